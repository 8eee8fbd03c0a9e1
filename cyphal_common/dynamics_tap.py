"""Servos' ``dynamics`` (``zubax.physics.dynamics.DoF3rdTs.1.0``) heard below pycyphal's presentation layer: one raw
transport session per subject for the whole process, each sample decoded with one ``struct`` call.

Two reasons. The generated deserializer costs tens of microseconds per sample: a console plotting eight axes at
1 kHz, or a coordinator recording three at 500 Hz on a loaded host, spent its core on it (its own setpoints came
late). And a transport has one input session per subject: two consumers that each open "their own" share it, so
one closing it ends the other's samples (a coordinated move from the console ended the console's plots). Every
consumer of a transport's ``dynamics`` therefore takes them from its one :class:`DynamicsTap` (:meth:`DynamicsTap.of`),
which opens a subject's session for its first consumer and closes it after its last. Importing this module needs no
compiled DSDL.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import weakref
from collections.abc import Callable
from typing import Any

_logger = logging.getLogger(__name__)

Sample = tuple[float, float, float, float, float]
"""(stamp [second, the publisher's clock], position, velocity, acceleration, force) of one sample."""

Consumer = Callable[[int, Sample], None]
"""Called with (the publisher's node-ID, the sample) for each transfer on a subject, in the event loop's thread."""

DYNAMICS_SIZE = 23
"""Serialized size of ``DoF3rdTs.1.0`` [byte] (sealed): the stamp (uint53 µs + void3, 7 bytes), position,
velocity, acceleration, force (float32 each, little-endian)."""
_FLOATS = struct.Struct("<4f")
_STAMP_MASK = (1 << 53) - 1

_taps: weakref.WeakKeyDictionary[Any, DynamicsTap] = weakref.WeakKeyDictionary()


def decode(payload: bytes) -> Sample:
    """A ``DoF3rdTs.1.0`` payload as the DSDL deserializer reads it (a shorter one zero-extended, a longer one
    truncated)."""
    data = payload[:DYNAMICS_SIZE] if len(payload) >= DYNAMICS_SIZE else payload + bytes(DYNAMICS_SIZE - len(payload))
    p, v, a, f = _FLOATS.unpack_from(data, 7)
    return (int.from_bytes(data[:7], "little") & _STAMP_MASK) * 1e-6, p, v, a, f


class DynamicsTap:
    """A transport's ``dynamics`` subjects and their consumers. Create it with :meth:`of`."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._consumers: dict[int, list[Consumer]] = {}
        self._sessions: dict[int, tuple[Any, asyncio.Task[None]]] = {}

    @staticmethod
    def of(transport: Any) -> DynamicsTap:
        """The transport's tap (created on the first call; it lives as long as the transport)."""
        tap = _taps.get(transport)
        if tap is None:
            tap = _taps[transport] = DynamicsTap(transport)
        return tap

    def add(self, subject: int, consumer: Consumer) -> None:
        """Call ``consumer`` with every sample on ``subject`` from now on (its session opens with the first)."""
        import pycyphal.transport as pt

        self._consumers.setdefault(subject, []).append(consumer)
        if subject not in self._sessions:
            session = self._transport.get_input_session(
                pt.InputSessionSpecifier(pt.MessageDataSpecifier(subject), None), pt.PayloadMetadata(DYNAMICS_SIZE))
            task = asyncio.get_running_loop().create_task(self._receive(subject, session), name=f"dynamics-{subject}")
            self._sessions[subject] = (session, task)

    def remove(self, subject: int, consumer: Consumer) -> None:
        """No more samples for ``consumer`` (idempotent); a subject without consumers is closed."""
        consumers = self._consumers.get(subject, [])
        if consumer in consumers:
            consumers.remove(consumer)
        if consumers:
            return
        self._consumers.pop(subject, None)
        entry = self._sessions.pop(subject, None)
        if entry is not None:
            session, task = entry
            task.cancel()
            session.close()  # A receive in progress ends with ResourceClosedError.

    async def _receive(self, subject: int, session: Any) -> None:
        import pycyphal.transport as pt

        loop = asyncio.get_running_loop()
        try:
            while True:
                transfer = await session.receive(loop.time() + 1.0)
                if transfer is None or transfer.source_node_id is None:
                    continue
                sample = decode(b"".join(transfer.fragmented_payload))
                for consumer in list(self._consumers.get(subject, ())):
                    try:
                        consumer(transfer.source_node_id, sample)
                    except Exception:  # One consumer's bug must not end the others' samples.
                        _logger.exception("dynamics consumer %r of subject %d failed", consumer, subject)
        except (asyncio.CancelledError, pt.ResourceClosedError):
            pass
