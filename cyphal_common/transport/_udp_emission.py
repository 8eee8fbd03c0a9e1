"""Cyphal/UDP output sessions send a datagram straight from the socket: no task per frame.

Why: pycyphal 1.27's ``UDPOutputSession._emit`` sends every frame through ``asyncio.wait_for(loop.sock_sendall(…))``,
and Python 3.11's ``wait_for`` wraps the send in a new task with a timer, to schedule a ``send`` that a non-blocking
UDP socket completes at once. Measured for one ``PlanarTs`` publication on loopback: 51–56 µs of CPU with it, 30–37 µs
without; a drive link publishes hundreds of messages a second at each end.

What: :func:`install` wraps ``_emit``: while the deadline has not passed, each frame goes out by the socket's own
``send`` (pycyphal's sockets are non-blocking), counted in the session's statistics and stamped as pycyphal does.
Anything else goes pycyphal's way, from the frame it concerns on: a socket whose buffer is full
(``BlockingIOError``: the event loop waits until it is writable, within the deadline), an error (pycyphal counts it
and raises it, or ignores it where it does), a deadline already past (dropped and counted). A datagram is sent whole
or not at all, so no frame goes out twice.

Written against pycyphal 1.27 (pinned); :func:`install` checks what it relies on and raises :class:`UDPEmissionError`
if pycyphal changed underneath (``tests/transport/test_udp_emission.py`` fails the same way).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Sequence
from typing import Any

from pycyphal.transport import Timestamp
from pycyphal.transport.udp._session._output import UDPOutputSession

__all__ = ["UDPEmissionError", "install", "installed"]

_MARK = "_cyphal_servo_direct_send"
_EMIT_PARAMETERS = ("self", "header_payload_pairs", "monotonic_deadline")
_EMIT_NAMES = ("_sock", "_statistics", "sock_sendall", "wait_for")
_lock = threading.Lock()


class UDPEmissionError(RuntimeError):
    """pycyphal's UDP output session no longer has the shape this patch was written against."""


def installed() -> bool:
    """True once :func:`install` has patched pycyphal's UDP output sessions in this process."""
    return bool(getattr(UDPOutputSession._emit, _MARK, False))


def _check_contract() -> None:
    emit = UDPOutputSession._emit
    if tuple(inspect.signature(emit).parameters) != _EMIT_PARAMETERS:
        raise UDPEmissionError("pycyphal's UDPOutputSession._emit changed its parameters: "
                               "cyphal_common.transport._udp_emission needs updating for this pycyphal")
    if not set(_EMIT_NAMES) <= set(emit.__code__.co_names):
        raise UDPEmissionError("pycyphal's UDPOutputSession._emit no longer sends through sock_sendall: "
                               "cyphal_common.transport._udp_emission needs updating for this pycyphal")
    for cls in UDPOutputSession.__subclasses__():
        if "_emit" in vars(cls):
            raise UDPEmissionError(f"pycyphal's {cls.__name__} sends its own way: "
                                   "cyphal_common.transport._udp_emission needs updating for this pycyphal")


def install() -> None:
    """Patch pycyphal's Cyphal/UDP output sessions to send each frame directly; idempotent, thread-safe.

    :raises UDPEmissionError: pycyphal's session changed; the patch refuses to guess — pin or update it.
    """
    with _lock:
        if installed():
            return
        _check_contract()
        original = UDPOutputSession._emit

        @functools.wraps(original)
        async def _emit(
            self: UDPOutputSession, header_payload_pairs: Sequence[tuple[memoryview, memoryview]],
            monotonic_deadline: float,
        ) -> Timestamp | None:
            s: Any = self
            ts: Timestamp | None = None
            if asyncio.get_running_loop().time() < monotonic_deadline and s._sock.gettimeout() == 0.0:
                for index, (header, payload) in enumerate(header_payload_pairs):
                    try:
                        s._sock.send(b"".join((header, payload)))
                    except Exception:  # pycyphal's way from this frame on: it waits, counts, raises or ignores.
                        rest = await original(self, header_payload_pairs[index:], monotonic_deadline)
                        if rest is None:
                            return None  # A frame was not sent: the transfer failed (pycyphal's contract).
                        return ts or rest
                    ts = ts or Timestamp.now()
                    s._statistics.frames += 1
                    s._statistics.payload_bytes += len(payload)
                return ts
            return await original(self, header_payload_pairs, monotonic_deadline)

        setattr(_emit, _MARK, True)
        UDPOutputSession._emit = _emit  # type: ignore[method-assign]
