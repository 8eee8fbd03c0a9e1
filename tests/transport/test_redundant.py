"""Redundant CAN over two multicast groups: deduplicated delivery that survives the loss of one bus."""

from __future__ import annotations

import asyncio

import pytest
from pycyphal.transport import (
    InputSessionSpecifier,
    MessageDataSpecifier,
    OutputSessionSpecifier,
    PayloadMetadata,
    Priority,
    Timestamp,
    Transfer,
    TransferFrom,
)
from pycyphal.transport.can import CANTransport
from pycyphal.transport.redundant import RedundantTransport

from cyphal_common.transport import UDPMulticastMedia, udpmc_transport

from .conftest import RECEIVE_TIMEOUT, Endpoint, random_endpoint

META = PayloadMetadata(4096)
SUBJECT = MessageDataSpecifier(3000)


def redundant(node_id: int, endpoints: list[Endpoint]) -> tuple[RedundantTransport, list[UDPMulticastMedia]]:
    """A redundant transport with one CAN inferior per endpoint; the media are returned for fault injection."""
    media = [UDPMulticastMedia(e.group, e.port, 64) for e in endpoints]
    red = RedundantTransport()
    for m in media:
        red.attach_inferior(CANTransport(m, node_id))
    return red, media


async def exchange(tx: RedundantTransport, rx: RedundantTransport, tid: int) -> int:
    """Send one 100-byte transfer and count how many copies the receiver gets."""
    sub = rx.get_input_session(InputSessionSpecifier(SUBJECT, None), META)
    out = tx.get_output_session(OutputSessionSpecifier(SUBJECT, None), META)
    loop = asyncio.get_running_loop()
    data = bytes(range(100))
    assert await out.send(Transfer(Timestamp.now(), Priority.NOMINAL, tid, [memoryview(data)]), loop.time() + 10)
    got = await sub.receive(loop.time() + RECEIVE_TIMEOUT)
    assert got is not None, "transfer lost"
    assert got.source_node_id == 10 and got.transfer_id == tid
    assert b"".join(bytes(x) for x in got.fragmented_payload)[:100] == data
    copies = 1
    while await sub.receive(loop.time() + 0.5) is not None:  # A duplicate would arrive well within this.
        copies += 1
    return copies


def two_endpoints() -> list[Endpoint]:
    """Two distinct private groups on one port (the common redundant layout)."""
    first = random_endpoint()
    second = random_endpoint(first.port)
    while second.group == first.group:
        second = random_endpoint(first.port)
    return [first, second]


@pytest.mark.parametrize("broken_side", ["sender", "receiver"])
async def test_dedup_and_survival(broken_side: str) -> None:
    """Delivered exactly once over two buses; still delivered after one side's media on group 1 is closed.

    After a bus goes silent, pycyphal's redundant deduplicator switches to the other bus only once the
    transfer-ID timeout (2 s) has passed, so the sender keeps publishing periodically, as a real node does.
    CAN transfer-IDs are modulo 32: at most ~8 transfers fit in the switch-over window, so IDs stay below 32.
    """
    eps = two_endpoints()
    tx, tx_media = redundant(10, eps)
    rx, rx_media = redundant(11, eps)
    sub = rx.get_input_session(InputSessionSpecifier(SUBJECT, None), META)
    out = tx.get_output_session(OutputSessionSpecifier(SUBJECT, None), META)
    loop = asyncio.get_running_loop()
    received: list[int] = []

    async def send(tid: int) -> None:
        data = bytes(range(100))
        assert await out.send(Transfer(Timestamp.now(), Priority.NOMINAL, tid, [memoryview(data)]), loop.time() + 10)

    def record(got: TransferFrom) -> None:
        assert got.source_node_id == 10
        assert b"".join(bytes(x) for x in got.fragmented_payload)[:100] == bytes(range(100))
        received.append(got.transfer_id)

    async def expect(tid: int) -> None:
        deadline = loop.time() + RECEIVE_TIMEOUT
        while tid not in received:
            got = await sub.receive(deadline)
            assert got is not None, f"transfer {tid} lost; got {received}"
            record(got)

    try:
        for tid in range(3):  # Both buses up.
            await send(tid)
            await expect(tid)
        (tx_media if broken_side == "sender" else rx_media)[0].close()
        deadline = loop.time() + RECEIVE_TIMEOUT
        tid = 3
        while not any(t >= 3 for t in received):
            assert loop.time() < deadline and tid < 32, f"nothing arrived after the break; got {received}"
            await send(tid)
            tid += 1
            if (got := await sub.receive(loop.time() + 0.25)) is not None:
                record(got)
        for _ in range(3):  # After the switch-over every transfer arrives again.
            await send(tid)
            await expect(tid)
            tid += 1
        while (got := await sub.receive(loop.time() + 0.5)) is not None:  # Late duplicates, if any.
            record(got)
        assert len(received) == len(set(received)), f"duplicates: {received}"
    finally:
        tx.close()
        rx.close()


async def test_udpmc_transport_builds_redundant_from_space_separated_groups() -> None:
    """The helper used by yakut expressions makes a RedundantTransport from several groups."""
    eps = two_endpoints()
    spec = " ".join(f"udpmc:{e.spec}" for e in eps)
    tx = udpmc_transport(spec, 10)
    rx = udpmc_transport(" ".join(e.spec for e in eps), 11)
    try:
        assert isinstance(tx, RedundantTransport) and isinstance(rx, RedundantTransport)
        assert len(tx.inferiors) == 2
        rx.get_input_session(InputSessionSpecifier(SUBJECT, None), META)
        assert await exchange(tx, rx, 0) == 1
    finally:
        tx.close()
        rx.close()
