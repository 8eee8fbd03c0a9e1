"""A real-time subscription whose event loop falls behind its traffic takes a bounded backlog, not every frame."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pycyphal.presentation
import pytest
import uavcan.primitive.scalar

from cyphal_common.transport import bounded_backlog, continue_after_restart, make_transport
from cyphal_common.transport._backlog import FRAMES

from .conftest import Endpoint

SUBJECT = 1234
BURST = 100


@pytest.fixture(params=["udpmc", "udp"])
def registers(request: pytest.FixtureRequest, endpoint: Endpoint) -> dict[str, Any]:
    """The transport's registers (without the node-ID): CAN on the test's own udpmc bus, or UDP on loopback."""
    if request.param == "udp":
        return {"uavcan.udp.iface": "127.0.0.1"}
    return {"uavcan.can.iface": endpoint.iface, "uavcan.can.mtu": 64}


def _presentation(registers: dict[str, Any], node_id: int) -> pycyphal.presentation.Presentation:
    transport = make_transport({**registers, "uavcan.node.id": node_id})
    assert transport is not None
    return pycyphal.presentation.Presentation(transport)


def _burst(registers: dict[str, Any], values: range, node_id: int = 11) -> None:
    """Publish ``values`` from ``node_id``, on a thread and event loop of its own."""

    async def run() -> None:
        pres = _presentation(registers, node_id)
        try:
            pub = pres.make_publisher(uavcan.primitive.scalar.Real32_1_0, SUBJECT)
            continue_after_restart(pub)  # A publisher again under the same node-ID: transfer-IDs on from the last.
            for v in values:
                assert await pub.publish(uavcan.primitive.scalar.Real32_1_0(float(v)))
        finally:
            pres.close()

    th = threading.Thread(target=asyncio.run, args=(run(),))
    th.start()
    th.join()  # Called from the subscriber's event loop: it is held up while the burst arrives (a starved loop).


async def _drain(sub: pycyphal.presentation.Subscriber[uavcan.primitive.scalar.Real32_1_0],
                 done: Callable[[list[float]], bool], timeout: float = 30.0) -> list[float]:
    """What the subscription yields until ``done`` says all is accounted for (or ``timeout``), then whatever else
    comes within 0.5 s. A receive that times out is not the end: on a starved host the frames and the timeout come
    due at the same wake-up of the loop, and the frames are then still on their way to the subscriber's queue."""
    out: list[float] = []
    deadline = time.monotonic() + timeout
    while not done(out) and time.monotonic() < deadline:
        if (got := await sub.receive_for(0.5)) is not None:
            out.append(got[0].value)
    while (got := await sub.receive_for(0.5)) is not None:
        out.append(got[0].value)
    return out


async def test_a_subscriber_held_up_takes_at_most_the_bound_and_then_what_is_new(registers: dict[str, Any]) -> None:
    """A burst that arrives while the event loop is held up: the subscription takes about :data:`FRAMES` of it (the
    rest dropped and counted), and a message sent afterwards is taken at once, not after the burst."""
    pres = _presentation(registers, 10)
    try:
        sub = pres.make_subscriber(uavcan.primitive.scalar.Real32_1_0, SUBJECT)
        assert bounded_backlog(sub)
        await asyncio.sleep(0.2)
        _burst(registers, range(BURST))
        time.sleep(0.3)  # Still held up: every frame of the burst has reached the media's receive thread.
        drops = lambda: sub.transport_session.sample_statistics().drops  # noqa: E731
        held = await _drain(sub, lambda out: len(out) + drops() >= BURST)
        assert 0 < len(held) <= FRAMES + 1, held  # The bound, and one its consumer may take between two reads.
        assert drops() == BURST - len(held)
        # From another node: node 11 again within CAN's transfer-ID timeout starts at a transfer-ID of its clock
        # (continue_after_restart), which is the last one the subscriber took from it once in 32 (modulo 32: taken
        # for a duplicate and dropped, as CAN's reassembler must; ci53 failed so).
        _burst(registers, range(1000, 1001), node_id=12)
        assert await _drain(sub, lambda out: len(out) >= 1) == [1000.0]
    finally:
        pres.close()


async def test_without_the_bound_the_held_up_subscriber_takes_the_whole_burst(registers: dict[str, Any]) -> None:
    """What the bound changes: the queue keeps every frame, however late it is taken."""
    pres = _presentation(registers, 10)
    try:
        sub = pres.make_subscriber(uavcan.primitive.scalar.Real32_1_0, SUBJECT)
        await asyncio.sleep(0.2)
        _burst(registers, range(BURST))
        time.sleep(0.3)
        assert len(await _drain(sub, lambda out: len(out) >= BURST)) == BURST
    finally:
        pres.close()
