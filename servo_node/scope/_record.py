"""The scope on the bus: record servo nodes' ``dynamics``, their limits and (polled) reference into a :class:`Trace`.

Each ``dynamics`` subject (``zubax.physics.dynamics.DoF3rdTs.1.0``) is one axis per publishing node; the node is
known from the transfer's source node-ID (an anonymous publisher's samples are not recorded). The samples come from
the transport's one :class:`~cyphal_common.dynamics_tap.DynamicsTap`: a recorder beside a coordinator on a busy
host fell seconds behind the joints while the generated deserializer ran for every sample.

With a node-ID of its own the recorder also reads, once per node, its default limits (``servo.profile.velocity``,
``servo.profile.acceleration``, ``servo.torque_limit``) and its unit (the register its backend names: ``sim.kind``,
``servo.drive.kind``), and at ``poll_hz`` its ``sys.motion`` (the reference p, v, a) and ``sys.status`` (the active
setpoint's limits). A polled value is stamped at the middle of its request's round trip on the system clock (the
clock of the ``dynamics`` timestamps), so it is good to a few milliseconds; the measured series is exact to the
node's own stamps. Anonymous (no node-ID), it records ``dynamics`` only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cyphal_common.dynamics_tap import Consumer, DynamicsTap, Sample
from cyphal_common.register_reads import read_register
from cyphal_common.tasks import cancel_and_wait

from ._trace import Trace

_logger = logging.getLogger(__name__)


WINDOW_GRACE_S = 2.0
"""A windowed recording waits this long past its window's end on this host's clock for the nodes' last samples
(their stamps past the window) before it ends without them (a node that stopped publishing) [second]."""

class ScopeError(RuntimeError):
    """The scope cannot run: no transport, a bad subject."""


class ScopeRecorder:
    """Records ``dynamics`` subjects into :attr:`trace` while started.

    :param subjects: (subject-ID, label) per ``dynamics`` subject; an empty label becomes ``node N``, and when
        several nodes publish on one subject each gets its own axis (``label/N``).
    :param environment: ``UAVCAN__*`` registers of the transport (default ``os.environ``).
    :param poll_hz: rate of the ``sys.motion``/``sys.status`` reads per node (0: off; default limits are still
        read once when a node-ID is set).
    """

    def __init__(self, subjects: Sequence[tuple[int, str]], environment: Mapping[str, str] | None = None,
                 poll_hz: float = 10.0) -> None:
        if not subjects:
            raise ScopeError("no dynamics subject to record")
        for subject, _ in subjects:
            if not 0 <= subject <= 8191:
                raise ScopeError(f"subject-ID {subject} is outside 0..8191")
        self.subjects = list(subjects)
        self.poll_hz = poll_hz
        self.trace = Trace()
        self._env = dict(os.environ if environment is None else environment)
        self._presentation: Any = None
        self._subs: list[tuple[DynamicsTap, int, Consumer]] = []
        self._clients: dict[int, Any] = {}
        self._labels: dict[tuple[int, int | None], str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.received = 0
        self._window_end = math.inf
        """Samples stamped after this [second, system clock] are not recorded (:meth:`record`)."""
        self._past_window: set[str] = set()
        self._window_done = asyncio.Event()

    @property
    def anonymous(self) -> bool:
        return self._presentation is None or self._presentation.transport.local_node_id is None

    async def start(self) -> None:
        """Join the bus and subscribe; idempotent."""
        if self._presentation is not None:
            return
        import pycyphal.application
        import pycyphal.presentation

        from cyphal_common.transport import make_transport

        transport = make_transport(pycyphal.application.make_registry(None, self._env))
        if transport is None:
            raise ScopeError("no transport configured: set UAVCAN__UDP__IFACE or UAVCAN__CAN__IFACE")
        self._presentation = pycyphal.presentation.Presentation(transport)
        tap = DynamicsTap.of(transport)  # One struct call a sample: a busy host's recorder keeps up.
        for subject, label in self.subjects:
            consumer = self._on_dynamics(subject, label)
            tap.add(subject, consumer)
            self._subs.append((tap, subject, consumer))
        if self.poll_hz > 0.0 and not self.anonymous:
            self._tasks.append(asyncio.get_running_loop().create_task(self._poll()))

    def close(self) -> None:
        """Leave the bus; idempotent. Recorded data stay in :attr:`trace`."""
        for t in self._tasks:
            t.cancel()
        self._tasks.clear()
        for tap, subject, consumer in self._subs:
            tap.remove(subject, consumer)
        if self._presentation is not None:
            self._presentation.close()
            self._presentation = None
            self._subs.clear()
            self._clients.clear()

    async def aclose(self) -> None:
        """:meth:`close`, then wait for the cancelled reads to end."""
        tasks = list(self._tasks)
        self.close()
        await cancel_and_wait(tasks)

    async def __aenter__(self) -> ScopeRecorder:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def record(self, window_s: float | None, stop: asyncio.Event | None = None) -> Trace:
        """Record ``window_s`` seconds of the nodes' time from now (None: until ``stop`` is set), then return the trace.

        The window is judged on the samples' own stamps (the nodes' system clocks), not on when this process gets to
        read them: a recorder that falls behind a busy bus still records the whole window, then ends once every
        axis has sent a sample past it (or :data:`WINDOW_GRACE_S` after the window on this host's clock)."""
        await self.start()
        stop = stop or asyncio.Event()
        waits = [asyncio.create_task(stop.wait())]
        if window_s is not None:
            self._window_end = time.time() + window_s
            waits.append(asyncio.create_task(self._window_done.wait()))
        try:
            await asyncio.wait(waits, timeout=None if window_s is None else window_s + WINDOW_GRACE_S,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait(waits)
        return self.trace

    # ---------------------------------------------------------------- receptions

    def _label(self, subject: int, given: str, node_id: int | None) -> str:
        key = (subject, node_id)
        if key not in self._labels:
            base = given or (f"node {node_id}" if node_id is not None else f"subject {subject}")
            if any(s == subject for s, _ in self._labels):
                base = f"{base}/{node_id}"
            self._labels[key] = base
            if node_id is not None and not self.anonymous and node_id not in self._clients:
                self._tasks.append(asyncio.get_running_loop().create_task(self._first_sight(node_id, base)))
        return self._labels[key]

    def _on_dynamics(self, subject: int, given: str) -> Consumer:
        def consumer(node_id: int, sample: Sample) -> None:
            self.received += 1
            label = self._label(subject, given, node_id)
            t, p, v, a, f = sample
            if t > self._window_end:
                self._past_window.add(label)
                if self._past_window >= set(self._labels.values()):
                    self._window_done.set()
                return
            self.trace.axis(label).measured.add(t, p, v, a, f)

        return consumer

    # ---------------------------------------------------------------- register reads

    def _client(self, node_id: int) -> Any:
        import uavcan.register

        if node_id not in self._clients:
            self._clients[node_id] = self._presentation.make_client_with_fixed_service_id(uavcan.register.Access_1_0,
                                                                                          node_id)
        return self._clients[node_id]

    async def _read(self, node_id: int, name: str) -> tuple[Any, float]:
        """(value: string or list of floats or None, system time of the read's middle)."""
        answer = await read_register(self._client(node_id), name)
        return (None, time.time()) if answer is None else (answer.value, answer.at_s)

    async def _first_sight(self, node_id: int, label: str) -> None:
        """The node's unit and default limits, once."""
        axis = self.trace.axis(label)
        backend, _ = await self._read(node_id, "servo.drive.backend")
        kind, _ = await self._read(node_id, _unit_register(backend))
        axis.unit = {"rotational": "rad", "linear": "m"}.get(kind or "", "")
        v, _ = await self._read(node_id, "servo.profile.velocity")
        a, _ = await self._read(node_id, "servo.profile.acceleration")
        f, t = await self._read(node_id, "servo.torque_limit")
        if v and a and f:
            t_first = axis.measured.t[0] if axis.measured.t else t
            axis.limits.add(min(t, t_first), v[0], v[1], a[0], a[1], f[0])
        else:
            _logger.warning("%s (node %d) did not give its servo.profile.* limits: none drawn", label, node_id)

    async def _poll(self) -> None:
        period = 1.0 / self.poll_hz
        next_at = time.monotonic()
        while True:
            next_at += period
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            known = [(n, label) for (_, n), label in self._labels.items() if n is not None]
            await asyncio.gather(*(self._poll_node(n, label) for n, label in known))

    async def _poll_node(self, node_id: int, label: str) -> None:
        axis = self.trace.axis(label)
        motion, t = await self._read(node_id, "sys.motion")
        try:
            ref = json.loads(motion)["ref"] if isinstance(motion, str) else None
        except (ValueError, KeyError):
            ref = None
        if ref is not None and all(isinstance(x, float | int) for x in ref):
            axis.reference.add(t, *(float(x) for x in ref[:3]))
        status, t = await self._read(node_id, "sys.status")
        try:
            servo = json.loads(status)["servo"] if isinstance(status, str) else {}
        except (ValueError, KeyError):
            servo = {}
        if "v_lim" in servo and len(axis.limits):
            f_max = float(servo.get("f_lim", 0.0))
            f_max = f_max if f_max > 0.0 else axis.limits.columns["f_max"][-1]  # ≤ 0: servo.torque_limit
            axis.limits.add(t, *(float(x) for x in (*servo["v_lim"], *servo["a_lim"])), f_max)


def _unit_register(backend: object) -> str:
    """The register that names the unit of a node with this ``servo.drive.backend`` (the backend's own hook)."""
    from ..drive import BackendUnavailableError
    from ..drive import backend as drive_backend

    try:
        return drive_backend(str(backend)).unit_register
    except BackendUnavailableError:  # A backend this scope does not know: the common register.
        return "servo.drive.kind"
