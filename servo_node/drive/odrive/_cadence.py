"""When an ODrive took the encoder estimates it sends: their cadence, locked from the reception times.

The ODrive stamps nothing, but it sends Get_Encoder_Estimates on its own timer, every ``encoder_msg_rate_ms``
(a whole number of milliseconds). Reception adds a delay that is never below the bus's fastest and is often more (a
busy host, a full queue), so the reception time is a late and jittery measure of the instant described. The send
instants lie on a regular grid: the grid is the lower envelope of the receptions (``a + n·T`` below every one of
them, touching the earliest), so each estimate is stamped with its grid point — what a drive clock would have
written, up to the fastest delivery. The period is the median interval of :data:`LEARN` frames whose intervals agree
(within half of it), rounded to whole milliseconds, and learnt again when frames keep skipping grid points (it was
learnt from a burst of queued frames) or the grid keeps being restarted (three arrivals in a row well before it).
"""

from __future__ import annotations

import itertools
import math
import statistics

LEARN = 9
"""Receptions whose intervals give the period."""
RELEARN_FRAMES = 50
"""Two relocks within this many frames: the period is learnt again."""
DOWN_S = 5e-4
"""A frame at most this much earlier than the grid moves the grid down to it; one earlier still is taken for a
frame late by most of a period [second]."""
RELAX_S = 2e-6
"""The grid moves later by this per frame (a drive clock slower than ours stays locked: ±100 ppm of 10 ms is
1 µs) [second]."""


class Cadence:
    """Stamps of a cyclic sender's frames on our clock (see the module docstring)."""

    def __init__(self) -> None:
        self.period = math.nan
        self._anchor = math.nan
        self._learning: list[float] = []
        self._off = 0
        self._frames = 0
        self._n = 0
        self._skips = 0
        self._relocked_at = -RELEARN_FRAMES
        self.relocks = 0
        """Times the grid was started over (after the first lock)."""

    def stamp(self, received: float) -> float:
        """The grid instant of a frame received at ``received`` (≤ it); NaN while the period is being learnt."""
        self._frames += 1
        if math.isnan(self.period):
            return self._learn(received)
        a, t = self._anchor, self.period
        n = round((received - a) / t)
        self._skips = self._skips + 1 if n - self._n >= 2 else 0
        self._n = n
        if self._skips >= 5:  # Every frame skips grid points: a period learnt from a burst, a fraction of the true.
            self.period, self._skips = math.nan, 0
            return self._learn(received)
        late = received - (a + n * t)
        if late >= 0.0:
            self._anchor = a + RELAX_S
            self._off = 0
            return received - late
        if late > -DOWN_S:
            self._anchor = a + late  # A little earlier than the grid: the envelope moves down to it.
            self._off = 0
            return received
        # Much earlier: a frame late by most of a period (the previous point's), or a grid that is off (it is,
        # when that keeps happening): started over then.
        self._off += 1
        if self._off >= 3:
            self._off = 0
            self.relocks += 1
            if self._frames - self._relocked_at < RELEARN_FRAMES:
                self.period = math.nan  # Off again soon after the last: the period is wrong (learnt from a burst).
            self._relocked_at = self._frames
            self._anchor = received
            return received
        return received - late - t

    def _learn(self, received: float) -> float:
        self._learning.append(received)
        if len(self._learning) < LEARN:
            return math.nan
        r = self._learning
        self._learning = []
        gaps = [b - a for a, b in itertools.pairwise(r)]
        period = round(statistics.median(gaps) * 1e3) * 1e-3
        if period <= 0.0 or not all(0.5 * period <= g <= 1.5 * period for g in gaps):
            return math.nan  # Faster than 1 kHz, a burst of queued frames or a stall: learn again.
        self.period = period
        self._anchor = min(x - round((x - r[0]) / period) * period for x in r)
        return self.stamp(received)
