"""Node-ID collision detection: another node sending heartbeats with our node-ID (Cyphal's recommended practice).

pycyphal drops every frame whose source is the local node-ID, so the node itself never sees an impostor. An
anonymous listener on the same bus (same transport configuration, no node-ID) sees every heartbeat, ours included;
ours are recognised by their content: the heartbeat's vendor-specific status code carries a random per-process tag
and the uptime is ours. A heartbeat from our node-ID that matches none of the last ones we sent is another node's:
a collision, until no such heartbeat was seen for :data:`CLEAR_AFTER_S`.
"""

from __future__ import annotations

import collections
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import pycyphal
import pycyphal.application
import pycyphal.presentation
import uavcan.node

from cyphal_common.transport import make_transport

CLEAR_AFTER_S = 3.0
"""A collision is over when no foreign heartbeat with our node-ID came for this long (three heartbeat periods)."""

_TRANSFER_ID_TIMEOUT_S = 1e-3
"""Transfer-ID timeout of the listener's session [second] (see :meth:`CollisionMonitor.start`)."""

_logger = logging.getLogger(__name__)


class CollisionMonitor:
    """Watches the bus for heartbeats from our node-ID that we did not send.

    :param registry: the node's registers (the transport is built from a copy with ``uavcan.node.id`` unset).
    :param node: our node; its heartbeat gets the random tag in the vendor-specific status code.
    :param on_change: called with True when a collision starts and False when it ends (edges only).
    """

    def __init__(
        self, registry: Mapping[str, Any], node: pycyphal.application.Node, on_change: Callable[[bool], None]
    ) -> None:
        self._node = node
        self._on_change = on_change
        self._tag = random.randint(1, 254)
        self._sent: collections.deque[tuple[int, int]] = collections.deque(maxlen=8)
        self._last_foreign = -1e9
        self.collided = False
        self.foreign_heartbeats = 0
        regs = {k: registry[k] for k in registry if str(k).startswith("uavcan.")}
        regs["uavcan.node.id"] = pycyphal.application.register.ValueProxy(
            pycyphal.application.register.Natural16([0xFFFF])
        )
        transport = make_transport(regs)
        self._presentation = pycyphal.presentation.Presentation(transport) if transport is not None else None
        self._sub: pycyphal.presentation.Subscriber[uavcan.node.Heartbeat_1_0] | None = None

    def start(self) -> None:
        """Tag our heartbeats and start listening; idempotent."""
        if self._sub is not None or self._presentation is None:
            return
        hb = self._node.heartbeat_publisher
        hb.vendor_specific_status_code = self._tag
        hb.add_pre_heartbeat_handler(self._remember_own)
        self._sub = self._presentation.make_subscriber_with_fixed_subject_id(uavcan.node.Heartbeat_1_0)
        # Both nodes share one source node-ID, hence one transfer-ID sequence as far as any receiver can tell:
        # with the usual 2 s transfer-ID timeout the node whose counter is behind would look like stale repeats
        # and be dropped. Heartbeats are 1 s apart, so a 1 ms timeout lets every one of them through.
        self._sub.transport_session.transfer_id_timeout = _TRANSFER_ID_TIMEOUT_S
        self._sub.receive_in_background(self._on_heartbeat)

    def close(self) -> None:
        """Stop listening; idempotent."""
        if self._presentation is not None:
            self._presentation.close()
            self._presentation = None
            self._sub = None

    def update(self) -> bool:
        """Whether a collision is in effect now (ends :data:`CLEAR_AFTER_S` after the last foreign heartbeat)."""
        if self.collided and time.monotonic() - self._last_foreign > CLEAR_AFTER_S:
            self.collided = False
            self._on_change(False)
        return self.collided

    def _remember_own(self) -> None:
        hb = self._node.heartbeat_publisher
        self._sent.append((int(hb.uptime), hb.vendor_specific_status_code))

    async def _on_heartbeat(self, msg: uavcan.node.Heartbeat_1_0, meta: pycyphal.transport.TransferFrom) -> None:
        if meta.source_node_id != self._node.id:
            return
        seen = (int(msg.uptime), int(msg.vendor_specific_status_code))
        own = any(seen[1] == tag and abs(seen[0] - up) <= 1 for up, tag in self._sent)
        if own:
            return
        self.foreign_heartbeats += 1
        self._last_foreign = time.monotonic()
        if not self.collided:
            self.collided = True
            _logger.error("Node-ID collision: another node sends heartbeats as node %s", self._node.id)
            self._on_change(True)
