"""The peers of a servo under test, in the test process: a drive that can lie, a stranger, a coordinator, time
masters, and an ear for the servo's diagnostics — pycyphal nodes on UDP 127.0.0.1, one asyncio loop in a thread.

The drive integrates the velocity the servo commands at 200 Hz and reports its state (stamped with the host's
monotonic clock, as ``sim-plant`` does) — unless :attr:`FakeDrive.lie` rewrites the report. Everything heard from
the servo is filtered by its node-ID.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cyphal_common.tasks import cancel_and_wait
from tests.procs import BusThread

DRIVE_PERIOD_S = 0.005


@dataclass
class Ports:
    """Subject-IDs of the servo's ports."""

    setpoint: int
    start: int
    drive_setpoint: int
    drive_readiness: int
    drive_dynamics: int
    drive_feedback: int

    def env(self) -> dict[str, str]:
        return {
            "UAVCAN__SUB__SETPOINT_SERVO__ID": str(self.setpoint),
            "UAVCAN__SUB__MOTION_START__ID": str(self.start),
            "UAVCAN__PUB__DRIVE_SETPOINT__ID": str(self.drive_setpoint),
            "UAVCAN__PUB__DRIVE_READINESS__ID": str(self.drive_readiness),
            "UAVCAN__SUB__DRIVE_DYNAMICS__ID": str(self.drive_dynamics),
            "UAVCAN__SUB__DRIVE_FEEDBACK__ID": str(self.drive_feedback),
        }


Lie = Callable[[float, float, float], tuple[float, float, float]]
"""(position, velocity, stamp [second]) → what the drive reports instead."""


@dataclass
class FakeDrive:
    """The drive's truth and what it heard."""

    p: float = 0.0
    v_cmd: float = 0.0
    engaged: bool = False
    lie: Lie | None = None
    commands: list[tuple[float, float]] = field(default_factory=list)
    """(time.monotonic, velocity) of every setpoint from the servo."""
    foreign_commands: int = 0
    trace: list[tuple[float, float]] = field(default_factory=list)
    """(time.monotonic, p) at every step of the drive (its truth, whatever it reports)."""
    lied_at: float = math.nan
    """When the drive first published a report rewritten by :attr:`lie` [time.monotonic]."""

    def peak_since(self, t: float) -> float:
        return max((abs(v) if math.isfinite(v) else math.inf for at, v in self.commands if at >= t), default=0.0)

    def non_finite_since(self, t: float) -> int:
        return sum(1 for at, v in self.commands if at >= t and not math.isfinite(v))


class Peers(BusThread):
    """Nodes ``ids`` (drive, stranger, coordinator, honest master, rogue master) around servo ``servo_id``."""

    def __init__(self, servo_id: int, ports: Ports, ids: dict[str, int]) -> None:
        super().__init__("peers")
        self.servo_id, self.ports, self.ids = servo_id, ports, ids
        self.drive = FakeDrive()
        self.diagnostics: list[tuple[float, str]] = []
        self._nodes: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._masters: list[Any] = []
        self._run(self._open())

    async def _open(self) -> None:
        import pycyphal.application
        import reg.udral.physics.dynamics.rotation as rot
        import reg.udral.service.common as common
        import uavcan.diagnostic

        for role, node_id in self.ids.items():
            env = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(node_id)}
            node = pycyphal.application.make_node(
                pycyphal.application.NodeInfo(name=f"test.{role}"), pycyphal.application.make_registry(None, env)
            )
            node.start()
            self._nodes[role] = node
        d = self._nodes["drive"]
        d.make_subscriber(rot.Planar_0_1, self.ports.drive_setpoint).receive_in_background(self._on_setpoint)
        d.make_subscriber(common.Readiness_0_1, self.ports.drive_readiness).receive_in_background(self._on_readiness)
        d.make_subscriber(uavcan.diagnostic.Record_1_1).receive_in_background(self._on_record)
        self._tasks.append(asyncio.create_task(self._drive_task()))

    async def _on_setpoint(self, msg: Any, meta: Any) -> None:
        if meta.source_node_id != self.servo_id:
            self.drive.foreign_commands += 1
            return
        v = float(msg.kinematics.angular_velocity.radian_per_second)
        self.drive.v_cmd = v
        self.drive.commands.append((time.monotonic(), v))

    async def _on_readiness(self, msg: Any, meta: Any) -> None:
        if meta.source_node_id == self.servo_id:
            self.drive.engaged = int(msg.value) == 3

    async def _on_record(self, msg: Any, meta: Any) -> None:
        if meta.source_node_id == self.servo_id:
            self.diagnostics.append((time.monotonic(), msg.text.tobytes().decode(errors="replace")))

    async def _drive_task(self) -> None:
        from reg.udral.physics.dynamics.rotation import PlanarTs_0_1

        from cyphal_common.udral import make_dynamics_ts

        pub = self._nodes["drive"].make_publisher(PlanarTs_0_1, self.ports.drive_dynamics)
        d = self.drive
        last = time.monotonic()
        while True:
            await asyncio.sleep(DRIVE_PERIOD_S)
            now = time.monotonic()
            v = d.v_cmd if d.engaged and math.isfinite(d.v_cmd) else 0.0
            d.p += v * (now - last)
            last = now
            d.trace.append((now, d.p))
            if d.lie is not None and math.isnan(d.lied_at):
                d.lied_at = now
            p, vr, stamp = (d.lie or (lambda a, b, c: (a, b, c)))(d.p, v, now)
            await pub.publish(make_dynamics_ts(True, int(stamp * 1e6), p, vr, 0.0, 0.0))

    def diagnostics_since(self, t: float) -> list[str]:
        return [text for at, text in self.diagnostics if at >= t]

    # ---------------------------------------------------------------- the other peers

    def stranger_dynamics(self, offset: float, seconds: float, rate_hz: float = 100.0) -> None:
        """The stranger publishes the drive's position + ``offset`` on the drive's dynamics subject for ``seconds``
        (in the background)."""

        async def run() -> None:
            from reg.udral.physics.dynamics.rotation import PlanarTs_0_1

            from cyphal_common.udral import make_dynamics_ts

            pub = self._nodes["stranger"].make_publisher(PlanarTs_0_1, self.ports.drive_dynamics)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                now = time.monotonic()
                await pub.publish(make_dynamics_ts(True, int(now * 1e6), self.drive.p + offset, 0.0, 0.0, 0.0))
                await asyncio.sleep(1.0 / rate_hz)
            pub.close()

        asyncio.run_coroutine_threadsafe(run(), self._loop)

    def setpoint(self, target: float, role: str = "coordinator") -> None:
        """One ServoCommand (position ``target``) from ``role``."""
        import zubax.physics.dynamics
        import zubax.physics.kinematics
        import zubax.telega

        msg = zubax.telega.ServoCommand_1_0(
            target=zubax.physics.dynamics.DoF2nd_1_0(
                kinematics=zubax.physics.kinematics.DoF2nd_1_0(position=target, velocity=0.0), force=0.0
            )
        )
        self._publish(role, zubax.telega.ServoCommand_1_0, self.ports.setpoint, msg)

    def start(self, lead_s: float, role: str = "coordinator") -> None:
        """A start message for ``lead_s`` from now (synchronized time: the system clock here) from ``role``."""
        import uavcan.time

        msg = uavcan.time.SynchronizedTimestamp_1_0(microsecond=int((time.time() + lead_s) * 1e6))
        self._publish(role, uavcan.time.SynchronizedTimestamp_1_0, self.ports.start, msg)

    def _publish(self, role: str, dtype: Any, subject: int, msg: Any) -> None:
        key = (role, subject)
        pubs = self.__dict__.setdefault("_pubs", {})

        async def run() -> None:
            if key not in pubs:
                pubs[key] = self._nodes[role].make_publisher(dtype, subject)
            await pubs[key].publish(msg)

        self._run(run())

    def time_master(self, role: str, clock: Callable[[], float]) -> None:
        """``role`` publishes uavcan.time.Synchronization with ``clock`` (until closed)."""
        from cyphal_common.timesync import TimeSync

        async def run() -> None:
            sync = TimeSync(self._nodes[role], "master", clock)
            sync.start()
            self._masters.append(sync)  # Held: an unreferenced task may be collected.

        self._run(run())

    def close(self) -> None:
        async def shut() -> None:
            await cancel_and_wait(self._tasks)  # before the nodes close under a publishing task
            for sync in self._masters:
                sync.close()
            for node in self._nodes.values():
                node.close()

        self._run(shut())
        super().close()


def hold(peers: Peers, target: float, seconds: float, role: str = "coordinator", period_s: float = 0.1) -> None:
    """Keep ``target`` alive for ``seconds`` (a setpoint every ``period_s``: within the deadman)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peers.setpoint(target, role)
        time.sleep(period_s)
