"""Cyphal/UDP input sessions read by the event loop, against pycyphal's real UDP transport, and the contract the
patch relies on: transfers arrive as before, no thread per session, close at once, a flood is bounded and counted,
and a closed session's descriptor never reaches it again."""

from __future__ import annotations

import asyncio
import threading

import pycyphal
import pytest
from pycyphal.transport import (
    InputSessionSpecifier,
    MessageDataSpecifier,
    OutputSessionSpecifier,
    PayloadMetadata,
    Priority,
    Timestamp,
    Transfer,
    Transport,
)

from cyphal_common.transport import _udp_reception as reception

from .conftest import udp_transport

NODE, PEER, SUBJECT = 3911, 3912, 3950
"""Uncommon IDs (each pytest worker also has a network of its own)."""


def _listen(transport: Transport, subject: int, source: int | None = None) -> pycyphal.transport.InputSession:
    spec = InputSessionSpecifier(MessageDataSpecifier(subject), source)
    return transport.get_input_session(spec, PayloadMetadata(1024))


async def _send(transport: Transport, subject: int, transfer_ids: range, payload: bytes = b"abc") -> None:
    out = transport.get_output_session(OutputSessionSpecifier(MessageDataSpecifier(subject), None),
                                       PayloadMetadata(1024))
    for transfer_id in transfer_ids:
        transfer = Transfer(Timestamp.now(), Priority.NOMINAL, transfer_id, [memoryview(payload)])
        # A generous deadline: a worker at niceness 15 on a busy machine can stall past a second between two sends.
        assert await out.send(transfer, asyncio.get_running_loop().time() + 10.0)
        await asyncio.sleep(0)  # A send completes without yielding (_udp_emission): the receiver shares this loop.


def test_pinned_pycyphal_contract() -> None:
    """Written against pycyphal 1.27: the session's constructor and ``receive`` as the patch expects them."""
    assert pycyphal.__version__.startswith("1.27."), f"written against 1.27, found {pycyphal.__version__}"
    reception.install()
    reception.install()  # Idempotent.
    assert reception.installed()
    from pycyphal.transport.udp._session import _input

    assert {c.__name__ for c in _input.UDPInputSession.__subclasses__()} == {"PromiscuousUDPInputSession",
                                                                           "SelectiveUDPInputSession"}
    assert _input.UDPInputSession.__init__ is reception._init


async def test_transfers_arrive_in_order_with_no_thread_per_session() -> None:
    """Twelve sessions add no thread; three transfers from a peer arrive in order, stamped at their reception, in a
    promiscuous and in a selective session alike."""
    threads = threading.active_count()
    rx, tx = udp_transport(NODE), udp_transport(PEER)
    try:
        idle = [_listen(rx, SUBJECT + 1 + k) for k in range(12)]
        promiscuous, selective = _listen(rx, SUBJECT), _listen(rx, SUBJECT, PEER)
        assert threading.active_count() <= threads + 1  # At most the sender's own (pycyphal's output needs none).
        assert all(not s._thread.is_alive() for s in idle)  # type: ignore[attr-defined]
        before = Timestamp.now()
        await _send(tx, SUBJECT, range(3))
        for session in (promiscuous, selective):
            received = [await session.receive(asyncio.get_running_loop().time() + 10.0) for _ in range(3)]
            assert [r.transfer_id for r in received if r is not None] == [0, 1, 2]
            assert all(r is not None and r.source_node_id == PEER for r in received)
            assert all(r is not None and before.monotonic_ns <= r.timestamp.monotonic_ns <= Timestamp.now().monotonic_ns
                       for r in received)
    finally:
        tx.close()
        rx.close()


async def test_a_flood_is_bounded_and_counted() -> None:
    """More datagrams than a session keeps, none received meanwhile: it keeps :data:`MAX_QUEUED` frames, counts
    the rest as drops, and still delivers the kept ones in order."""
    rx, tx = udp_transport(NODE), udp_transport(PEER)
    try:
        session = _listen(rx, SUBJECT)
        sent = reception.MAX_QUEUED + 200
        await _send(tx, SUBJECT, range(sent))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        while session.sample_statistics().drops + session._frame_queue.qsize() < sent:  # type: ignore[attr-defined]
            assert loop.time() < deadline, "not every datagram was read"
            await asyncio.sleep(0.01)
        assert session._frame_queue.qsize() == reception.MAX_QUEUED  # type: ignore[attr-defined]
        assert session.sample_statistics().drops == sent - reception.MAX_QUEUED
        first = await session.receive(loop.time() + 1.0)
        assert first is not None and first.transfer_id == 0
    finally:
        tx.close()
        rx.close()


async def test_close_removes_the_reader_before_the_descriptor_is_reused() -> None:
    """A closed session's socket number, reused at once by the next session, is read for the new one only; a
    transport closed from another thread closes its sessions there too, at once."""
    rx, tx = udp_transport(NODE), udp_transport(PEER)
    try:
        old = _listen(rx, SUBJECT)
        fd = old._socket.fileno()  # type: ignore[attr-defined]
        old.close()
        loop = asyncio.get_running_loop()
        assert not loop.remove_reader(fd), "the closed session's reader is still registered"
        new = _listen(rx, SUBJECT + 1)
        await _send(tx, SUBJECT + 1, range(1))
        got = await new.receive(loop.time() + 10.0)
        assert got is not None and got.transfer_id == 0
        assert old._frame_queue.empty()  # type: ignore[attr-defined]
        new_fd = new._socket.fileno()  # type: ignore[attr-defined]
        closer = threading.Thread(target=rx.close, daemon=True)
        closer.start()
        while closer.is_alive():
            await asyncio.sleep(0.01)  # The loop runs meanwhile and takes the removal the closer hands it.
        assert not loop.remove_reader(new_fd)
        with pytest.raises(pycyphal.transport.ResourceClosedError):
            await new.receive(loop.time() + 0.1)
    finally:
        tx.close()
        rx.close()


async def test_a_loop_that_cannot_watch_sockets_gets_pycyphal_s_reader_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the loop has no ``add_reader`` (Windows' proactor loop; stood in for here), a session is pycyphal's
    own, with its reader thread, and still receives and closes."""
    monkeypatch.setattr(reception, "_watches_sockets", lambda loop: False)
    rx, tx = udp_transport(NODE), udp_transport(PEER)
    try:
        session = _listen(rx, SUBJECT)
        thread = session._thread  # type: ignore[attr-defined]
        assert isinstance(thread, threading.Thread) and thread.is_alive()
        await _send(tx, SUBJECT, range(1))
        got = await session.receive(asyncio.get_running_loop().time() + 10.0)
        assert got is not None and got.transfer_id == 0
    finally:
        tx.close()
        rx.close()
    assert not thread.is_alive()
