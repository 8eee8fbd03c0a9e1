"""What a CiA 402 drive has to tell the diagnostics, at a cost that does not grow with what the bus sends.

Two kinds. Steps (a re-arm, a homing, each step of a stop by every channel) are few: each is one line in a bounded
queue. Occurrences that a stranger can send at bus rate (EMCY frames, another SDO client's writes, frames of another
master) are :class:`Tally` counters: the receive thread only counts and keeps the first and the last payload (O(1),
no formatting, no lock, no allocation but the payload the frame brought); the node's supervision pass takes them as
text: the first in full, then one summary per :data:`SUMMARY_PERIOD_S` however many came.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable
from typing import Any

SUMMARY_PERIOD_S = 1.0
"""At most one line per tally per this long [second]."""

STEPS_KEPT = 64
"""Step lines kept between two passes of the supervision (older ones are dropped first)."""


class Tally:
    """Occurrences of one kind of event, written by one thread (:meth:`hit`), read by another (:meth:`take`)."""

    __slots__ = ("_render", "_said_at", "_said_count", "count", "first", "label", "last", "prefix")

    def __init__(self, prefix: str, label: str, render: Callable[[Any], str]) -> None:
        self.prefix = prefix
        self.label = label
        self._render = render
        self.count = 0
        self.first: Any = None
        self.last: Any = None
        self._said_count = 0
        self._said_at = -math.inf

    def hit(self, payload: Any) -> None:
        """One more occurrence (the writer thread only; O(1))."""
        if self.count == self._said_count:
            self.first = payload
        self.last = payload
        self.count += 1

    def take(self, now: float) -> str | None:
        """A line for what came since the last one, if any and if the last line is :data:`SUMMARY_PERIOD_S` old."""
        count = self.count
        n = count - self._said_count
        if n <= 0 or now - self._said_at < SUMMARY_PERIOD_S:
            return None
        quiet = math.isinf(self._said_at)
        since = "" if quiet else f" in {now - self._said_at:.1f} s"
        self._said_count, self._said_at = count, now
        if n == 1:
            return f"{self.prefix}{self._render(self.last)}"
        first, last = self._render(self.first), self._render(self.last)
        return f"{self.prefix}{n} {self.label}{since} (total {count}), the first {first}, the last {last}"


class Notes:
    """The drive's lines for the diagnostics: steps (a bounded queue) and tallies (see the module)."""

    def __init__(self) -> None:
        self._steps: collections.deque[str] = collections.deque(maxlen=STEPS_KEPT)
        self._tallies: list[Tally] = []

    def step(self, text: str) -> None:
        """A line to say once (any thread; deque appends are atomic)."""
        self._steps.append(text)

    def tally(self, prefix: str, label: str, render: Callable[[Any], str]) -> Tally:
        """A new tally whose lines this takes: ``prefix`` + one rendered payload, or a count of ``label``."""
        t = Tally(prefix, label, render)
        self._tallies.append(t)
        return t

    def take(self) -> list[str]:
        """Every line due (the reader: the node's supervision)."""
        out = []
        while self._steps:
            out.append(self._steps.popleft())
        now = time.monotonic()
        for t in self._tallies:
            line = t.take(now)
            if line is not None:
                out.append(line)
        return out
