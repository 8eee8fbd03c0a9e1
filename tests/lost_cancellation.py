"""A send that loses a cancellation, as pycyphal's sends can on Python 3.11.

``asyncio.wait_for`` (inside pycyphal's transport sends) swallows a cancellation that meets the send's completion:
a publishing loop ended by a single ``cancel()`` then goes on. :class:`LostCancellation` wraps a real send so that
every cancellation during it is swallowed, and closes its owner while a send is in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


class LostCancellation:
    """``send`` (a session's ``send`` or a publisher's ``publish``) wrapped: each call recorded, a cancellation during
    it swallowed (the send completes)."""

    def __init__(self, send: Callable[..., Awaitable[Any]]) -> None:
        self._send = send
        self.sent: list[float] = []
        """time.monotonic of every call."""
        self._in_flight = asyncio.Event()

    async def __call__(self, *args: Any) -> bool:
        self.sent.append(time.monotonic())
        self._in_flight.set()
        try:
            await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            pass  # What the race in wait_for does: the send completed, the cancellation is gone.
        self._in_flight.clear()
        return bool(await self._send(*args))

    async def close_mid_send(self, close: Callable[[], None], after: int = 3) -> None:
        """Once ``after`` sends are done, call ``close`` while the next one is in flight (its cancellation is lost)."""
        while len(self.sent) < after or self._in_flight.is_set():
            await asyncio.sleep(0.001)
        await self._in_flight.wait()
        close()

    def sent_since(self, seconds: float) -> int:
        """Calls in the last ``seconds``."""
        return sum(1 for t in self.sent if t > time.monotonic() - seconds)
