"""A node's heartbeat mode turned OPERATIONAL and said on the bus at once, not up to a second later.

pycyphal's heartbeat publisher sends at a fixed 1 Hz and does not publish on a change of mode, so a peer (an
orchestrator's health check, a test, a coordinator waiting for its axes) learned that a node was up up to a second
after it was. :func:`go_operational` sets the mode and sends one heartbeat now, besides the periodic ones.
"""

from __future__ import annotations

import pycyphal.application
from pycyphal.application.heartbeat_publisher import Mode

__all__ = ["go_operational"]


async def go_operational(node: pycyphal.application.Node) -> None:
    """Mode OPERATIONAL, and one heartbeat saying so now. The extra heartbeat shares the subject's transfer-ID
    counter with pycyphal's own publisher (one output session per subject), so receivers see no repeated ID."""
    import uavcan.node  # The compiled DSDL: importable once the application has made sure of it.

    node.heartbeat_publisher.mode = Mode.OPERATIONAL
    pub = node.make_publisher(uavcan.node.Heartbeat_1)
    try:
        await pub.publish(node.heartbeat_publisher.make_message())
    finally:
        pub.close()
