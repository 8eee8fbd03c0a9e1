"""Diagnostics: what the servo tells the network in words, as ``uavcan.diagnostic.Record.1.1``, and in the log.

Reports are buffered while no node is up (during a RESTART, before the first node) and published in order by one
task that the node's shell starts and cancels and awaits (no ``publish_soon`` tasks outliving the transport).
Callers report edges (a state change, an error that appeared), never a condition per message.

This is the node's one diagnostics path: it honours the standard ``uavcan.diagnostic.severity`` register (records
below it are logged, not published; 255 publishes none; default :data:`DEFAULT_SEVERITY`), and :func:`sole_path`
removes the log handler pycyphal's node factory installs for the same register, which would publish every
report's log line a second time.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Collection

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

DEFAULT_SEVERITY = Severity.INFO
"""``uavcan.diagnostic.severity`` unless set: every report the servo makes (INFO and above) is published."""

SEVERITY_REGISTER = "uavcan.diagnostic.severity"


def sole_path(before: Collection[logging.Handler]) -> None:
    """Remove the diagnostic log handlers pycyphal's ``make_node`` added since ``before`` (the root's handlers
    before the call): :class:`Diagnostics` publishes every report once, at its own severity."""
    from pycyphal.application.diagnostic import DiagnosticPublisher

    for handler in [h for h in logging.root.handlers if h not in before]:
        if isinstance(handler, DiagnosticPublisher):
            logging.root.removeHandler(handler)


class Diagnostics:
    """Log a report once and publish it as a diagnostic record through the node currently attached."""

    def __init__(self) -> None:
        self._pending: collections.deque[tuple[int, str]] = collections.deque(maxlen=_BUFFER)
        self._wake = asyncio.Event()
        self._pub: pycyphal.presentation.Publisher[uavcan.diagnostic.Record_1_1] | None = None
        self._task: asyncio.Task[None] | None = None
        self.min_severity = int(DEFAULT_SEVERITY)
        """Reports below this severity are not published (``uavcan.diagnostic.severity``; above 7: none)."""
        self.published = 0

    def report(self, text: str, severity: int = Severity.WARNING) -> None:
        """Log ``text`` and queue it for the network."""
        _logger.log(logging.WARNING if severity >= Severity.WARNING else logging.INFO, "%s", text)
        self._pending.append((severity, text))
        self._wake.set()

    def attach(self, node: pycyphal.application.Node) -> None:
        """Publish through ``node`` from now on (flushes what was buffered), at the severity its registry's
        ``uavcan.diagnostic.severity`` sets; idempotent."""
        self.min_severity = int(node.registry[SEVERITY_REGISTER].ints[0]) if SEVERITY_REGISTER in node.registry \
            else int(DEFAULT_SEVERITY)
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
                    if severity >= self.min_severity:
                        record = uavcan.diagnostic.Record_1_1(severity=Severity(severity),
                                                              text=text.encode()[:_TEXT_MAX])
                        await self._pub.publish(record)
                        self.published += 1
                    self._pending.popleft()
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass
