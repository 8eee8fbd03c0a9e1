"""``go_operational`` against a real pycyphal node: the bus hears OPERATIONAL from the call itself, not from the
next 1 Hz heartbeat, and the periodic heartbeats continue the same transfer-ID sequence."""

from __future__ import annotations

import asyncio
from typing import Any

import pycyphal.application
from pycyphal.application.heartbeat_publisher import Mode
from pycyphal.transport.loopback import LoopbackTransport

from cyphal_common.node_mode import go_operational

NODE = 3931


async def test_the_call_itself_says_operational_and_transfer_ids_continue() -> None:
    import uavcan.node

    transport = LoopbackTransport(NODE)
    node = pycyphal.application.make_node(pycyphal.application.NodeInfo(name="test.node_mode"), ":memory:",
                                          transport=transport)
    received: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue()
    sub = node.make_subscriber(uavcan.node.Heartbeat_1)
    sub.receive_in_background(lambda msg, meta: received.put_nowait((msg, meta)))  # type: ignore[arg-type,return-value]
    try:
        node.heartbeat_publisher.mode = Mode.INITIALIZATION
        # The periodic publisher has not started (node.start() not called): what arrives is the call's own.
        await go_operational(node)
        msg, meta = await asyncio.wait_for(received.get(), 10)
        assert msg.mode.value == Mode.OPERATIONAL and meta.source_node_id == NODE
        node.start()
        periodic, periodic_meta = await asyncio.wait_for(received.get(), 10)
        assert periodic.mode.value == Mode.OPERATIONAL
        assert periodic_meta.transfer_id == meta.transfer_id + 1  # One counter per subject: no repeated ID.
    finally:
        node.close()
