"""Ending asyncio child tasks for sure: cancel, wait, and cancel again while one still runs; awaiting several at once
without leaving one behind.

One ``cancel()`` is not enough around pycyphal: its UDP output session catches ``CancelledError`` inside a send
(it counts the frame as dropped and returns), and on Python 3.11 ``asyncio.wait_for`` can lose a cancellation
that arrives as its inner future completes. A task cancelled at that moment goes on, and a plain
``await gather(task)`` then waits forever (a node that never finished closing after SIGTERM).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")

RETRY_S = 0.05
"""How often a task that is still running is cancelled again [second]."""


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]], retry_s: float = RETRY_S) -> None:
    """Cancel ``tasks`` and return once every one has ended; their exceptions are retrieved and dropped.

    Cancelled itself meanwhile (a parent ending this task's parent with ``cancel_and_wait`` cancels it every
    ``retry_s``), it still ends the tasks first and raises ``CancelledError`` after: given up half-way, it would
    leave an orphan running (a coordinator's feeder repeating an old setpoint against the next move's).
    """
    everything = list(tasks)
    pending = {t for t in everything if not t.done()}
    interrupted = False
    while pending:
        for t in pending:
            t.cancel()
        try:
            _, pending = await asyncio.wait(pending, timeout=retry_s)
        except asyncio.CancelledError:
            interrupted = True
            pending = {t for t in pending if not t.done()}
    for t in everything:
        if not t.cancelled():
            t.exception()  # Retrieved: no "exception was never retrieved" at garbage collection.
    if interrupted:
        raise asyncio.CancelledError


async def gather_all(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Await every one of ``aws`` at once and return their results in order; the first failure cancels the others
    and is raised once they have ended (``asyncio.gather`` leaves them running, and what they raise later, e.g. a
    closed port's error once the caller has closed its node, is never retrieved)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        await cancel_and_wait(tasks)
        raise
