"""Cyphal/UDP output sessions sending straight from the socket, against pycyphal's real UDP transport: transfers
(single- and multi-frame) arrive whole and counted, no task per frame, a socket that would block and a deadline
already past go pycyphal's way, and the contract the patch relies on."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pycyphal
from pycyphal.transport import (
    InputSessionSpecifier,
    MessageDataSpecifier,
    OutputSession,
    OutputSessionSpecifier,
    PayloadMetadata,
    Priority,
    Timestamp,
    Transfer,
    Transport,
)

from cyphal_common.transport import _udp_emission as emission

from .conftest import udp_transport

NODE, PEER, SUBJECT = 3921, 3922, 3960
"""Uncommon IDs (each pytest worker also has a network of its own)."""


def _sessions(rx: Transport, tx: Transport) -> tuple[pycyphal.transport.InputSession, OutputSession]:
    spec = MessageDataSpecifier(SUBJECT)
    return (rx.get_input_session(InputSessionSpecifier(spec, None), PayloadMetadata(8192)),
            tx.get_output_session(OutputSessionSpecifier(spec, None), PayloadMetadata(8192)))


async def _send(out: OutputSession, transfer_id: int, payload: bytes, deadline_s: float = 1.0) -> bool:
    transfer = Transfer(Timestamp.now(), Priority.NOMINAL, transfer_id, [memoryview(payload)])
    return await out.send(transfer, asyncio.get_running_loop().time() + deadline_s)


async def _received(session: pycyphal.transport.InputSession, expected: int,
                    timeout_s: float = 10.0) -> list[tuple[int, bytes]]:
    """The transfers that arrive: each of the ``expected`` waited for up to ``timeout_s`` (a starved host may see a
    short wait expire with the datagrams already in the socket), then any more until none comes for 0.2 s."""
    loop = asyncio.get_running_loop()
    got = []
    while (t := await session.receive(loop.time() + (timeout_s if len(got) < expected else 0.2))) is not None:
        got.append((t.transfer_id, b"".join(t.fragmented_payload)))
    return got


def test_pinned_pycyphal_contract() -> None:
    """Written against pycyphal 1.27: ``_emit`` as the patch expects it."""
    assert pycyphal.__version__.startswith("1.27."), f"written against 1.27, found {pycyphal.__version__}"
    emission.install()
    emission.install()  # Idempotent.
    assert emission.installed()


async def test_single_and_multi_frame_transfers_arrive_whole_without_a_task_per_frame() -> None:
    """Ten small transfers and one of four frames arrive whole and in order, counted frame by frame as pycyphal
    counts them, and sending them made no task."""
    rx, tx = udp_transport(NODE), udp_transport(PEER)
    loop = asyncio.get_running_loop()
    made: list[Any] = []
    loop.set_task_factory(lambda lp, coro, **kw: made.append(coro) or asyncio.Task(coro, loop=lp, **kw))
    try:
        inp, out = _sessions(rx, tx)
        mtu = tx.protocol_parameters.mtu
        big = (bytes(range(256)) * (4 * mtu // 256))[: 3 * mtu + 100]  # Four frames (with the transfer CRC).
        for k in range(10):
            assert await _send(out, k, b"small %d" % k)
        assert await _send(out, 10, big)
        sending_tasks = len(made)
        loop.set_task_factory(None)
        assert sending_tasks == 0, made
        got = await _received(inp, 11)
        assert got == [(k, b"small %d" % k) for k in range(10)] + [(10, big)]
        stats = out.sample_statistics()
        assert (stats.transfers, stats.frames, stats.drops, stats.errors) == (11, 14, 0, 0)
        assert inp.sample_statistics().frames == 14
    finally:
        loop.set_task_factory(None)
        tx.close()
        rx.close()


class _BusyOnce(socket.socket):
    """A socket whose first ``send`` finds its buffer full (as a flooded one does), then sends as usual."""

    busy = 1

    def send(self, data: Any, flags: int = 0) -> int:
        if self.busy:
            self.busy -= 1
            raise BlockingIOError("send buffer full")
        return super().send(data, flags)


async def test_a_socket_that_would_block_is_waited_for_by_the_loop_and_sends_once() -> None:
    """A full send buffer: pycyphal's way (the loop waits until the socket is writable), the frame sent once."""
    rx, tx = udp_transport(NODE), udp_transport(PEER)
    try:
        inp, out = _sessions(rx, tx)
        s: Any = out
        real: socket.socket = s._sock
        busy = _BusyOnce(real.family, real.type, real.proto, fileno=os.dup(real.fileno()))
        busy.setblocking(False)
        s._sock = busy
        real.close()
        assert await _send(out, 7, b"after a full buffer")
        assert busy.busy == 0
        assert await _received(inp, 1) == [(7, b"after a full buffer")]
        assert out.sample_statistics().frames == 1
    finally:
        tx.close()
        rx.close()


async def test_a_deadline_already_past_is_dropped_and_counted_as_pycyphal_does() -> None:
    rx, tx = udp_transport(NODE), udp_transport(PEER)
    try:
        inp, out = _sessions(rx, tx)
        assert not await _send(out, 1, b"too late", deadline_s=-0.01)
        assert await _send(out, 2, b"in time")
        assert await _received(inp, 1) == [(2, b"in time")]
        stats = out.sample_statistics()
        assert (stats.transfers, stats.frames, stats.drops) == (1, 1, 1)
    finally:
        tx.close()
        rx.close()
