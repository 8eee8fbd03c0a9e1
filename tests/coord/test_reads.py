"""The coordinator's register reads when the answers come late (a host too busy to read its bus on time) and when a
node is gone: a late answer is taken, a missing one is reported by name, and no read is left running or unretrieved.

The servers are real pycyphal nodes on loopback UDP and udpmc CAN that answer ``uavcan.register.Access`` as a servo
node does, one of them only after a delay: what a coordinator sees of a node whose answer waits behind a backlog.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pycyphal.presentation import Presentation

from cyphal_common.transport import make_transport
from servo_node.coord._axes import Axis, CoordError
from servo_node.coord._session import Coordinator

COORD, SLOW, PROMPT, GONE = 80, 81, 82, 83
BUSES = {"udp": {"UAVCAN__UDP__IFACE": "127.0.0.1"},
         "udpmc": {"UAVCAN__CAN__IFACE": "udpmc:239.61.3.80:43180", "UAVCAN__CAN__MTU": "64"}}
ANSWER_DELAY_S = 1.2
"""Longer than the coordinator's first deadline (1 s); each request is answered this long after the one before."""


@asynccontextmanager
async def _register_server(bus: str, node_id: int, delay_s: float = 0.0) -> AsyncIterator[None]:
    """A node answering every register read with [1.0, 2.0], each answer ``delay_s`` after it takes the request."""
    import pycyphal.application
    import uavcan.primitive.array
    import uavcan.register

    env = {**BUSES[bus], "UAVCAN__NODE__ID": str(node_id)}
    pres = Presentation(make_transport(pycyphal.application.make_registry(None, env)))
    server = pres.get_server_with_fixed_service_id(uavcan.register.Access_1_0)

    async def serve(_req: Any, _meta: Any) -> Any:
        await asyncio.sleep(delay_s)
        value = uavcan.register.Value_1_0(real64=uavcan.primitive.array.Real64_1_0([1.0, 2.0]))
        return uavcan.register.Access_1_0.Response(value=value)

    server.serve_in_background(serve)
    try:
        yield
    finally:
        pres.close()


def _coordinator(bus: str, *node_ids: int) -> Coordinator:
    env = {**BUSES[bus], "UAVCAN__NODE__ID": str(COORD)}
    return Coordinator([Axis(n, 1000 + k, 1100 + k) for k, n in enumerate(node_ids)], env, start_subject=None)


@pytest.mark.parametrize("bus", BUSES)
async def test_answers_later_than_the_first_deadline_are_taken(bus: str) -> None:
    """Each request is answered 1.2 s after the one before it: the first deadline (1 s) passes, the next request's
    longer one does not. Asked again with the same 1 s deadline, every answer came after its request's deadline and
    the read failed (seen over udpmc on a loaded 2-core host: "no answer to a read of servo.profile.velocity")."""
    async with _register_server(bus, SLOW, ANSWER_DELAY_S):
        coord = _coordinator(bus, SLOW)
        try:
            await coord.start()
            assert await coord.read_register(0, "servo.profile.velocity") == [1.0, 2.0]
        finally:
            coord.close()


def _reads_under_way() -> list[asyncio.Task[Any]]:
    """This loop's tasks that are register reads of the coordinator and still running."""
    return [t for t in asyncio.all_tasks() if not t.done() and any(
        name in t.get_coro().__qualname__ for name in ("read_register", "limits"))]  # type: ignore[union-attr]


@pytest.mark.parametrize("bus", BUSES)
async def test_a_node_that_is_gone_is_named_and_no_read_is_left_behind(bus: str) -> None:
    """One node answers, one is gone: the move's reads fail naming the one that is gone, and the reads still under
    way when that failure came have ended with it. With ``asyncio.gather`` they ran on; the command then closed its
    node under them, and asyncio's exit cancelled them with the closed port's error set on their futures ("Future
    exception was never retrieved: PortClosedError")."""
    async with _register_server(bus, PROMPT):
        coord = _coordinator(bus, PROMPT, GONE)
        try:
            await coord.start()
            with pytest.raises(CoordError, match=f"node {GONE}: no answer to a read of servo.profile"):
                await coord.axes_info()
            assert _reads_under_way() == []
        finally:
            coord.close()


async def test_a_coordinator_of_its_own_freezes_what_it_started_with() -> None:
    """A coordinator's process held ~150,000 objects from its start; each full collection scanned them all (0.2–0.5 s
    beside real-time nodes on two cores: the setpoints paused past the nodes' deadman and a move stopped, one in 50
    of bench/coord.py's on udpmc). With a node of its own the coordinator freezes them once up; on a node it shares
    (a console's) the process's collector is its owner's."""
    gc.unfreeze()
    coord = _coordinator("udp", PROMPT)
    try:
        await coord.start()
        frozen = gc.get_freeze_count()
        assert frozen > 50_000 and len(gc.get_objects()) < frozen / 10, (frozen, len(gc.get_objects()))
        gc.unfreeze()
        shared = Coordinator([Axis(PROMPT, 1000, 1100)], node=coord._node, start_subject=None)
        await shared.start()
        assert gc.get_freeze_count() == 0
        shared.close()
    finally:
        coord.close()
