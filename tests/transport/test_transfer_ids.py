"""A publisher restarted at once is heard: its transfer-IDs continue above its former self's (Cyphal/UDP)."""

from __future__ import annotations

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
