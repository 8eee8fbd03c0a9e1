"""How regularly a coordinator sends its setpoints: every node's deadman counts the time since the last one.

A coordinator whose process is held up (a busy host, a long garbage collection) sends its repetitions late; past
the shortest deadman the nodes stop on their own, safely, and the move looks as if the joints failed. The gap is
measured from the burst itself (a stall before the first repetition counts too), reported as a warning when it
exceeds :data:`STALL_PERIODS` repetition periods, and the longest one goes into the move's result, which names it
as the cause of a stop it explains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

STALL_PERIODS = 4.0
"""A gap longer than this many repetition periods is reported (a quarter of the shortest deadman each)."""

_logger = logging.getLogger(__name__)


def held_up(gap_s: float, deadman_s: float) -> str:
    """Why the nodes stopped if the coordinator made them (its setpoints paused longer than their deadman), or ''."""
    if not gap_s > deadman_s:
        return ""
    return (f"the coordinator sent no setpoint for {gap_s:.3f} s, longer than the nodes' deadman ({deadman_s:.3g} s): "
            f"its process was held up (a busy host, a long garbage collection) and they stopped on their own")


class Cadence:
    """The sends of one move's (or path's) setpoints: the longest gap between two, from its burst on [second]."""

    def __init__(self, repeat_s: float, deadman_s: float, burst_at: float) -> None:
        self.repeat_s = repeat_s
        self.deadman_s = deadman_s
        """The shortest deadman of the nodes [second] (a gap longer than this stops them)."""
        self.last = burst_at
        """When the setpoints were last sent [second, ``time.monotonic``]."""
        self.longest = 0.0
        """The longest gap so far [second]."""

    def sent(self, now: float) -> float:
        """The setpoints went out again at ``now``: the gap since the last send, reported if it is a stall."""
        gap = now - self.last
        self.last = now
        self.longest = max(self.longest, gap)
        if gap > STALL_PERIODS * self.repeat_s:
            _logger.warning(
                "setpoints repeated %.3f s after the last: this process was held up (a busy host, a long garbage "
                "collection)%s", gap,
                f"; the nodes' deadman ({self.deadman_s:.3g} s) stopped them" if gap > self.deadman_s else "")
        return gap


async def repeat(send: Callable[[], Awaitable[None]], cadence: Cadence) -> None:
    """Call ``send`` every ``cadence.repeat_s`` from the burst on, until cancelled. A failed send (e.g. ENOBUFS on a
    starved host: transient) is reported and tried again at the next period; after a stall the repetition goes on
    from now, not with a catch-up burst per missed period."""
    period = cadence.repeat_s
    next_at = cadence.last + period
    while True:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        now = time.monotonic()
        try:
            await send()
        except OSError as ex:
            _logger.warning("setpoints not sent (%s: %s); again in %.3g s", type(ex).__name__, ex, period)
        except Exception:
            _logger.exception("the setpoints' repetition failed: the nodes stop on their deadman")
            raise
        else:
            cadence.sent(now)
        next_at += period
        if next_at < now:
            next_at = now + period
