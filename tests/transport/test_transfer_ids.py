"""A publisher restarted at once is heard: its transfer-IDs continue above its former self's (Cyphal/UDP)."""

from __future__ import annotations

import time

from pycyphal.presentation import Presentation
from pycyphal.transport.udp import UDPTransport

from cyphal_common.transport import continue_after_restart

SUBJECT, SENDER, RECEIVER = 3794, 3795, 3796


async def _run_twice(fresh_ids: bool) -> list[float]:
    """A publisher node sends 1.0 three times and closes; a new one with the same node-ID sends 2.0 at once."""
    import uavcan.primitive.scalar

    rx = Presentation(UDPTransport("127.0.0.1", local_node_id=RECEIVER))
    sub = rx.make_subscriber(uavcan.primitive.scalar.Real32_1_0, SUBJECT)
    got: list[float] = []
    try:
        for value in (1.0, 2.0):
            tx = Presentation(UDPTransport("127.0.0.1", local_node_id=SENDER))
            pub = tx.make_publisher(uavcan.primitive.scalar.Real32_1_0, SUBJECT)
            if fresh_ids:
                continue_after_restart(pub)
            for _ in range(3):
                assert await pub.publish(uavcan.primitive.scalar.Real32_1_0(value))
            tx.close()
            # Until this round's three (or 3 s: the second round of the same IDs is dropped), then until 0.3 s
            # without one: the new publisher must start within the receiver's transfer-ID timeout (2 s), where its
            # former self's IDs still count. A receive that times out is not the end by itself: on a starved host
            # the datagrams and the timeout come due at one wake-up of the loop.
            want, deadline = len(got) + 3, time.monotonic() + 3.0
            while len(got) < want and time.monotonic() < deadline:
                if (msg := await sub.receive_for(0.5)) is not None:
                    got.append(float(msg[0].value))
            while (msg := await sub.receive_for(0.3)) is not None:
                got.append(float(msg[0].value))
    finally:
        rx.close()
    return got


async def test_a_publisher_restarted_within_the_transfer_id_timeout_is_heard() -> None:
    """With ``continue_after_restart`` all six arrive; without it, the receiver takes the second process's
    transfer-IDs 0, 1, 2 for repeats and drops them (what lost a coordinator's move run again at once)."""
    assert await _run_twice(fresh_ids=True) == [1.0] * 3 + [2.0] * 3
    assert await _run_twice(fresh_ids=False) == [1.0] * 3


async def _call_twice(fresh_ids: bool) -> list[bool]:
    """A client node calls a server and closes; a new one with the same node-ID calls again at once. Each call
    waits 5 s for its answer: a request taken for a repeat is never answered, however long one waits, and a busy
    host may answer a taken one late (0.5 s was once too short in CI)."""
    import uavcan.node

    server_side = Presentation(UDPTransport("127.0.0.1", local_node_id=RECEIVER))
    server = server_side.get_server_with_fixed_service_id(uavcan.node.GetInfo_1_0)

    async def serve(_req: object, _meta: object) -> uavcan.node.GetInfo_1_0.Response:
        return uavcan.node.GetInfo_1_0.Response(name="server")

    server.serve_in_background(serve)
    answered: list[bool] = []
    try:
        for _ in range(2):
            tx = Presentation(UDPTransport("127.0.0.1", local_node_id=SENDER))
            client = tx.make_client_with_fixed_service_id(uavcan.node.GetInfo_1_0, RECEIVER)
            client.response_timeout = 5.0
            if fresh_ids:
                continue_after_restart(client)
            answered.append(await client.call(uavcan.node.GetInfo_1_0.Request()) is not None)
            tx.close()
    finally:
        server_side.close()
    return answered


async def test_a_client_restarted_within_the_transfer_id_timeout_is_answered() -> None:
    """A coordinator run again at once reads the servos' registers: its requests' transfer-IDs continue too.
    Without it, the server takes the second request (transfer-ID 0 again) for a repeat and never answers."""
    assert await _call_twice(fresh_ids=True) == [True, True]
    assert await _call_twice(fresh_ids=False) == [True, False]
