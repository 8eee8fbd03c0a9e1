"""Diagnostics: what the servo tells the network in words, as ``uavcan.diagnostic.Record.1.1``, and in the log.

Reports are buffered while no node is up (during a RESTART, before the first node) and published in order by one
task that the node's shell starts and cancels and awaits (no ``publish_soon`` tasks outliving the transport).
Callers report edges (a state change, an error that appeared), never a condition per message.
"""

from __future__ import annotations

import asyncio
import collections
import logging

import pycyphal
import pycyphal.application
import uavcan.diagnostic

from cyphal_common.tasks import cancel_and_wait

_logger = logging.getLogger(__name__)

_BUFFER = 64
"""Records kept while no node is up; older ones are dropped first."""

_TEXT_MAX = 255
"""``uavcan.diagnostic.Record.1.1`` text capacity [byte]."""

Severity = uavcan.diagnostic.Severity_1_0


class Diagnostics:
    """Log a report once and publish it as a diagnostic record through the node currently attached."""

    def __init__(self) -> None:
        self._pending: collections.deque[tuple[int, str]] = collections.deque(maxlen=_BUFFER)
        self._wake = asyncio.Event()
        self._pub: pycyphal.presentation.Publisher[uavcan.diagnostic.Record_1_1] | None = None
        self._task: asyncio.Task[None] | None = None

    def report(self, text: str, severity: int = Severity.WARNING) -> None:
        """Log ``text`` and queue it for the network."""
        _logger.log(logging.WARNING if severity >= Severity.WARNING else logging.INFO, "%s", text)
        self._pending.append((severity, text))
        self._wake.set()

    def attach(self, node: pycyphal.application.Node) -> None:
        """Publish through ``node`` from now on (flushes what was buffered); idempotent."""
        if self._task is None:
            self._pub = node.make_publisher(uavcan.diagnostic.Record_1_1)
            self._task = asyncio.get_running_loop().create_task(self._publish(), name="diagnostics")
            self._wake.set()

    async def detach(self) -> None:
        """Stop publishing (cancel and await the task, close the publisher); keeps buffering; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            self._wake.set()
            await cancel_and_wait([task])
        if self._pub is not None:
            self._pub.close()
            self._pub = None

    async def _publish(self) -> None:
        try:
            while self._task is not None:  # Also ends it if a cancellation was swallowed inside a publish.
                await self._wake.wait()
                self._wake.clear()
                while self._pending and self._pub is not None:
                    severity, text = self._pending[0]
                    record = uavcan.diagnostic.Record_1_1(severity=Severity(severity), text=text.encode()[:_TEXT_MAX])
                    await self._pub.publish(record)
                    self._pending.popleft()
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass
