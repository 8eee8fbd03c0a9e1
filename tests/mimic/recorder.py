"""The test's own pycyphal node: records ``dynamics`` subjects with their reception times, and publishes (readiness,
a stray setpoint, a second publisher on the leader's subjects) as any other node on the bus would."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from cyphal_common.tasks import cancel_and_wait
from tests.procs import BusThread


class Recorder(BusThread):
    """Per subject: rows (stamp, position, velocity, acceleration, reception) [second, system clock] of the samples
    from ``sources[i]`` (each subject's publisher; None: any)."""

    def __init__(
        self, bus: Mapping[str, str], subjects: list[int], node_id: int, sources: list[int | None] | None = None
    ) -> None:
        self._sources = sources or [None] * len(subjects)
        super().__init__("dynamics-recorder")
        self._rows: list[list[tuple[float, float, float, float, float]]] = [[] for _ in subjects]
        self._lock = threading.Lock()
        self._pubs: dict[int, Any] = {}
        self._presentation = self._run(self._open(bus, subjects, node_id))

    async def _open(self, bus: Mapping[str, str], subjects: list[int], node_id: int) -> Any:
        import pycyphal.presentation
        import zubax.physics.dynamics

        from cyphal_common.transport import make_transport

        regs: dict[str, Any] = {"uavcan.node.id": node_id}
        if "UAVCAN__CAN__IFACE" in bus:
            regs.update({"uavcan.can.iface": bus["UAVCAN__CAN__IFACE"], "uavcan.can.mtu": int(bus["UAVCAN__CAN__MTU"])})
        else:
            regs["uavcan.udp.iface"] = bus["UAVCAN__UDP__IFACE"]
        pres = pycyphal.presentation.Presentation(make_transport(regs))
        for i, subject in enumerate(subjects):
            sub = pres.make_subscriber(zubax.physics.dynamics.DoF3rdTs_1_0, subject)

            async def on(msg: Any, meta: Any, i: int = i) -> None:
                if self._sources[i] is not None and meta.source_node_id != self._sources[i]:
                    return
                kin = msg.value.kinematics
                row = (msg.timestamp.microsecond * 1e-6, float(kin.base.position), float(kin.base.velocity),
                       float(kin.acceleration), float(meta.timestamp.system))
                with self._lock:
                    self._rows[i].append(row)

            sub.receive_in_background(on)
        return pres

    def series(self, i: int) -> np.ndarray:
        """All rows of subject ``i`` so far (n × 5)."""
        with self._lock:
            return np.array(self._rows[i]).reshape(-1, 5)

    def latest(self, i: int) -> np.ndarray:
        """The newest row of subject ``i``."""
        with self._lock:
            assert self._rows[i], f"no sample on subject #{i} yet"
            return np.array(self._rows[i][-1])

    def repeat(self, subject: int, make: Callable[[], Any], period_s: float) -> Callable[[], None]:
        """Publish ``make()`` on ``subject`` every ``period_s`` from this node; returns the function that ends it."""

        async def start() -> asyncio.Task[None]:
            msg = make()
            pub = self._pubs.get(subject)
            if pub is None:
                pub = self._pubs[subject] = self._presentation.make_publisher(type(msg), subject)

            async def run() -> None:
                while True:
                    await pub.publish(make())
                    await asyncio.sleep(period_s)

            return asyncio.create_task(run())

        task = self._run(start())

        def stop() -> None:
            self._run(cancel_and_wait([task]))  # pycyphal's send can swallow a single cancel: it would run on.

        return stop
