"""Cyphal/UDP input sessions read by the event loop: no reader thread per session.

Why: in pycyphal 1.27 every UDP input session starts a reader thread (``pycyphal/transport/udp/_session/_input.py``)
that polls its socket with ``select`` every 0.1 s, stamps and parses each datagram, and hands it to the event loop
with ``call_soon_threadsafe``. Every message then costs two threads, a self-pipe wake-up and the GIL passed back
and forth: 160–170 µs of CPU per message in a process that only receives and deserialises (``bench/scale.py
--bare``), about 1.7 % of a core per axis at 100 Hz setpoints before the node does anything. Every idle session
also woke its thread ten times a second, and ``close()`` joined the thread, waiting for its next poll, one session
after another (a node took 0.7–0.8 s to exit).

What: :func:`install` replaces the session's constructor and wraps its ``close()``: the socket (pycyphal's own,
from its socket factory) is non-blocking and read by ``loop.add_reader`` in the event loop the session was made in;
each datagram is stamped at its reading, parsed by pycyphal's ``UDPFrame.parse`` and queued in the session's own
frame queue, where pycyphal's ``receive()`` (filtering, reassembly, statistics) takes it exactly as before. The
port list, the transfers' timestamps and every session class stay pycyphal's. ``close()`` removes the reader before
pycyphal closes the socket (a reused descriptor never reaches the old session). A flood is bounded: the loop reads
at most :data:`BATCH` datagrams per wake-up, and a session whose queue holds :data:`MAX_QUEUED` unread frames drops
further datagrams and counts them in its statistics (``drops``), where pycyphal's thread queued without a bound.
A loop that cannot watch sockets (Windows' proactor loop) keeps pycyphal's own sessions, threads and all.

The patch is written against pycyphal 1.27 (pinned); :func:`install` checks what it relies on and raises
:class:`UDPReceptionError` if pycyphal changed underneath (``tests/transport/test_udp_reception.py`` fails the same
way).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import socket as socket_
import threading
from collections.abc import Callable
from typing import Any

from pycyphal.transport import InputSessionSpecifier, PayloadMetadata, Timestamp
from pycyphal.transport.udp import UDPFrame
from pycyphal.transport.udp._session import _input
from pycyphal.transport.udp._session._input import UDPInputSession

__all__ = ["BATCH", "MAX_QUEUED", "UDPReceptionError", "install", "installed"]

BATCH = 64
"""Datagrams one wake-up of the event loop reads from a session's socket at most: a flooded socket cannot hold the
loop (heartbeat, deadman, services) for longer than that; the rest waits in the socket for the next wake-up."""
MAX_QUEUED = 1024
"""Unread frames a session keeps (pycyphal's ``receive`` takes one per call); more are dropped and counted."""
BACKLOG_ATTRIBUTE = "_cyphal_servo_backlog"
"""A session given this attribute (an int, by ``_backlog.bounded_backlog``) keeps that many unread frames at most,
dropping the oldest."""
READ_SIZE = 0xFFFF
"""Largest datagram read (pycyphal's ``_READ_SIZE``): a Cyphal/UDP frame is at most one IP datagram."""

_MARK = "_cyphal_servo_in_loop"
_ORIGINAL_INIT = UDPInputSession.__init__
"""pycyphal's own constructor (a reader thread), for loops that cannot watch a socket."""
_lock = threading.Lock()


class UDPReceptionError(RuntimeError):
    """pycyphal's UDP input session no longer has the shape this patch was written against."""


class _NoReaderThread:
    """Stands in for the session's reader thread, which pycyphal's ``close()`` joins: there is none."""

    ident = None

    def join(self, timeout: float | None = None) -> None:
        pass

    def is_alive(self) -> bool:
        return False


def _on_readable(session: UDPInputSession) -> None:
    """The session's socket is readable: read up to :data:`BATCH` datagrams into its frame queue."""
    sock: socket_.socket = session._socket
    queue: asyncio.Queue[tuple[Timestamp, UDPFrame | None]] = session._frame_queue
    bound = getattr(session, BACKLOG_ATTRIBUTE, None)
    for _ in range(BATCH):
        try:
            data = sock.recv(READ_SIZE)
        except OSError:  # Nothing more to read (BlockingIOError), or closed underneath (close() removes the reader).
            return
        if bound is not None and queue.qsize() >= bound:
            queue.get_nowait()  # A bounded backlog (_backlog.py): the oldest goes, what was just read is newer.
            session._statistics.drops += 1
        elif queue.qsize() >= MAX_QUEUED:
            session._statistics.drops += 1
            continue
        queue.put_nowait((Timestamp.now(), UDPFrame.parse(memoryview(data))))


def _init(
    self: UDPInputSession,
    specifier: InputSessionSpecifier,
    payload_metadata: PayloadMetadata,
    socket: socket_.socket,
    finalizer: Callable[[], None] | None,
    local_node_id: int | None,
) -> None:
    """pycyphal's ``UDPInputSession.__init__`` with the reader thread replaced by the event loop's reader; where the
    loop cannot watch a socket (Windows' proactor loop), pycyphal's own, with its thread."""
    loop = asyncio.get_running_loop()
    if not _watches_sockets(loop):
        _ORIGINAL_INIT(self, specifier, payload_metadata, socket, finalizer, local_node_id)
        return
    s: Any = self
    s._closed = False
    s._specifier = specifier
    s._payload_metadata = payload_metadata
    s._socket = socket
    s._finalizer = finalizer
    s._local_node_id = local_node_id
    s._transfer_id_timeout = self.DEFAULT_TRANSFER_ID_TIMEOUT
    s._frame_queue = asyncio.Queue()
    s._thread = _NoReaderThread()
    s._loop = loop
    socket.setblocking(False)
    loop.add_reader(socket.fileno(), _on_readable, self)


def _watches_sockets(loop: asyncio.AbstractEventLoop) -> bool:
    """True for a selector event loop (every POSIX loop, uvloop too); a proactor loop has no ``add_reader``."""
    return not isinstance(loop, getattr(asyncio, "ProactorEventLoop", ()))


def _remove_reader(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Remove the loop's reader of ``fd``: at once in the loop's thread or when the loop is not running; from
    another thread (a transport closed from a helper thread), through the loop, waiting for it up to 5 s."""
    if loop.is_closed():
        return
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if current is loop or not loop.is_running():
        loop.remove_reader(fd)
        return
    done = threading.Event()

    def remove() -> None:
        try:
            loop.remove_reader(fd)
        finally:
            done.set()

    try:
        loop.call_soon_threadsafe(remove)
    except RuntimeError:  # Closed meanwhile: its selector, and the reader with it, are gone.
        return
    done.wait(5.0)


def installed() -> bool:
    """True once :func:`install` has patched pycyphal's UDP input sessions in this process."""
    return bool(getattr(UDPInputSession.close, _MARK, False))


_INIT_PARAMETERS = ("self", "specifier", "payload_metadata", "socket", "finalizer", "local_node_id")
_RECEIVE_NAMES = ("_frame_queue", "_get_reassembler", "_statistics", "_transfer_id_timeout", "_local_node_id")


def _refuse(what: str) -> UDPReceptionError:
    """The error for a pycyphal that no longer has the shape :func:`install` relies on."""
    return UDPReceptionError(f"{what}: cyphal_common.transport._udp_reception needs updating for this pycyphal")


def _check_contract() -> None:
    init = UDPInputSession.__init__
    if tuple(inspect.signature(init).parameters) != _INIT_PARAMETERS:
        raise _refuse("pycyphal's UDPInputSession.__init__ changed its parameters")
    if not {"_frame_queue", "_thread", "_socket", "_closed", "_finalizer"} <= set(init.__code__.co_names):
        raise _refuse("pycyphal's UDP input session no longer keeps its frame queue, reader thread and socket")
    if not set(_RECEIVE_NAMES) <= set(UDPInputSession.receive.__code__.co_names):
        raise _refuse("pycyphal's UDPInputSession.receive no longer takes frames from its queue as before")
    for cls in UDPInputSession.__subclasses__():
        if "close" in vars(cls) or "receive" in vars(cls) or "super" not in cls.__init__.__code__.co_names:
            raise _refuse(f"pycyphal's {cls.__name__} no longer leaves reception to UDPInputSession")
    if getattr(_input, "_READ_SIZE", None) != READ_SIZE:
        raise _refuse("pycyphal's UDP datagram read size changed")


def install() -> None:
    """Patch pycyphal's Cyphal/UDP input sessions to be read by their event loop; idempotent, thread-safe. Sessions
    made before stay as they were (threaded).

    :raises UDPReceptionError: pycyphal's session changed; the patch refuses to guess — pin or update it.
    """
    with _lock:
        if installed():
            return
        _check_contract()
        original_close = UDPInputSession.close

        @functools.wraps(original_close)
        def close(self: UDPInputSession) -> None:
            s: Any = self
            loop: asyncio.AbstractEventLoop | None = getattr(s, "_loop", None)
            fd = s._socket.fileno()
            if loop is not None and not s._closed and fd >= 0:
                _remove_reader(loop, fd)  # Before the socket closes: its number may be reused.
            original_close(self)

        setattr(close, _MARK, True)
        UDPInputSession.__init__ = _init  # type: ignore[method-assign]
        UDPInputSession.close = close  # type: ignore[method-assign]
