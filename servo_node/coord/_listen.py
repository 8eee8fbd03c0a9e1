"""The axes' ``dynamics`` as a coordinator hears them: each axis's latest state, and recordings of a move.

Each sample is kept with the node's own stamp (the instant it describes, on the nodes' synchronized clock), never
this process's reception time, so a coordinator that falls behind its sockets records the motion late but as it
was. The transfers are read below pycyphal's presentation layer and decoded with one ``struct`` call
(:func:`dynamics_sample`): recording three nodes at 500 Hz through the generated deserializer cost this process
enough CPU, on a loaded host, that its own setpoint repetitions came late and the nodes' deadman stopped them.
Importing this module needs no compiled DSDL.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Sequence
from typing import Any

from ._axes import Axis, CoordError
from ._result import Recorder

RECORDING_WAIT_S = 2.0
"""After a move, how long a coordinator waits for samples still on their way (a node publishes those its event
loop was late with; this process may be behind its sockets) before it judges what it has [second]."""

State = tuple[float, float, float, float]
"""(stamp [second], position, velocity, acceleration) of one sample."""

DYNAMICS_SIZE = 23
"""Serialized size of ``zubax.physics.dynamics.DoF3rdTs.1.0`` [byte] (sealed): the stamp (uint53 µs + void3, 7
bytes), position, velocity, acceleration, force (float32 each, little-endian)."""
_FLOATS = struct.Struct("<4f")
_STAMP_MASK = (1 << 53) - 1


def dynamics_sample(payload: bytes) -> State:
    """(stamp [second], position, velocity, acceleration) of a ``DoF3rdTs.1.0`` payload, as the DSDL deserializer
    reads it (a shorter payload zero-extended, a longer one truncated)."""
    data = payload[:DYNAMICS_SIZE] if len(payload) >= DYNAMICS_SIZE else payload + bytes(DYNAMICS_SIZE - len(payload))
    p, v, a, _ = _FLOATS.unpack_from(data, 7)
    return (int.from_bytes(data[:7], "little") & _STAMP_MASK) * 1e-6, p, v, a


class Listener:
    """Subscriptions to every axis's ``dynamics`` on a pycyphal presentation: the latest sample of each, and the
    recordings while :attr:`recorders` is set (one :class:`~._result.Recorder` per axis)."""

    def __init__(self, transport: Any, axes: Sequence[Axis], presentation: Any = None) -> None:
        """``presentation``: a node shared with others (the console's): subscribe through its presentation layer,
        whose subscribers share a subject's transport session (a raw session of our own would be theirs too:
        closing it would end their subscription, and reading it would take their transfers)."""
        self._transport = transport
        self._presentation = presentation
        self.axes = list(axes)
        self._sessions: list[Any] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.latest: list[State | None] = [None] * len(axes)
        self.recorders: list[Recorder] | None = None
        self._fresh = asyncio.Event()

    def start(self) -> None:
        """Subscribe (idempotent); the latest samples start afresh."""
        import pycyphal.transport as pt

        if self._sessions:
            return
        self.latest = [None] * len(self.axes)
        if self._presentation is not None:
            import zubax.physics.dynamics

            for i, ax in enumerate(self.axes):
                sub = self._presentation.make_subscriber(zubax.physics.dynamics.DoF3rdTs_1_0, ax.dynamics)
                sub.receive_in_background(self._on_message(i))
                self._sessions.append(sub)
            return
        for i, ax in enumerate(self.axes):
            session = self._transport.get_input_session(
                pt.InputSessionSpecifier(pt.MessageDataSpecifier(ax.dynamics), None), pt.PayloadMetadata(DYNAMICS_SIZE))
            self._sessions.append(session)
            self._tasks.append(asyncio.get_running_loop().create_task(self._receive(i, session)))

    def stop(self) -> None:
        """Close the subscriptions (the latest samples stay)."""
        for task in self._tasks:
            task.cancel()
        for session in self._sessions:
            session.close()  # A receive in progress ends with ResourceClosedError.
        self._tasks.clear()
        self._sessions.clear()

    def record(self) -> list[Recorder]:
        """Start a recording of every axis, each from its latest sample (its state before what is recorded)."""
        self.recorders = [Recorder() for _ in self.axes]
        for rec, sample in zip(self.recorders, self.latest, strict=True):
            if sample is not None:
                rec.add(*sample)
        return self.recorders

    def take(self) -> list[Recorder] | None:
        """End the recording; returns it (None: none was running)."""
        recs, self.recorders = self.recorders, None
        return recs

    def _on_message(self, i: int) -> Any:
        """Axis ``i``'s handler of deserialized samples (a shared node's subscriber)."""

        async def handler(msg: Any, _meta: Any) -> None:
            kin = msg.value.kinematics
            self._take(i, (msg.timestamp.microsecond * 1e-6, float(kin.base.position), float(kin.base.velocity),
                           float(kin.acceleration)))

        return handler

    def _take(self, i: int, sample: State) -> None:
        self.latest[i] = sample
        if self.recorders is not None:
            self.recorders[i].add(*sample)
        self._fresh.set()

    async def _receive(self, i: int, session: Any) -> None:
        """Axis ``i``'s samples, as they come, until its session is closed."""
        import pycyphal.transport as pt

        loop = asyncio.get_running_loop()
        try:
            while True:
                transfer = await session.receive(loop.time() + 1.0)
                if transfer is None:
                    continue
                self._take(i, dynamics_sample(b"".join(transfer.fragmented_payload)))
        except (asyncio.CancelledError, pt.ResourceClosedError):
            pass

    async def states(self, timeout: float = 3.0) -> list[State]:
        """The latest sample of every axis, waiting up to ``timeout`` for the first of each."""
        self.start()
        deadline = time.monotonic() + timeout
        while any(s is None for s in self.latest):
            self._fresh.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                silent = [ax.label + f" (subject {ax.dynamics})" for ax, s in zip(self.axes, self.latest, strict=True)
                          if s is None]
                raise CoordError(f"no dynamics from {', '.join(silent)}: is servo.dynamics_rate set, the "
                                 f"dynamics port configured, and its drive reporting (a node publishes measurements "
                                 f"only)?")
            try:
                await asyncio.wait_for(self._fresh.wait(), left)
            except TimeoutError:
                pass
        return [s for s in self.latest if s is not None]

    async def await_samples(self, stamp_to: float, timeout_s: float = RECORDING_WAIT_S) -> None:
        """Until every axis's recording reaches ``stamp_to`` (the samples' own clock), or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (self.recorders is not None and time.monotonic() < deadline
               and any(r.last_stamp() < stamp_to for r in self.recorders)):
            await asyncio.sleep(0.02)
