"""When an ODrive took the encoder estimates it sends: their cadence, locked from the reception times.

The ODrive stamps nothing, but it sends Get_Encoder_Estimates on its own timer, every ``encoder_msg_rate_ms``
(a whole number of milliseconds). Reception adds a delay that is never below the bus's fastest and is often more (a
busy host, a full queue), so the reception time is a late and jittery measure of the instant described. The send
instants lie on a regular grid: the grid is the lower envelope of the receptions (``a + n·T`` below every one of
them, touching the earliest), so each estimate is stamped with its grid point — what a drive clock would have
written, up to the fastest delivery. The period is the median interval of the first :data:`LEARN` frames, rounded
to whole milliseconds. An arrival off the grid by more than half a period (a lost lock, a changed rate, a stall
longer than the window) starts over from that reception.
"""

from __future__ import annotations

import itertools
import math
import statistics

LEARN = 9
"""Receptions whose intervals give the period."""
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
        self.relocks = 0
        """Times the grid was started over (after the first lock)."""

    def stamp(self, received: float) -> float:
        """The grid instant of a frame received at ``received`` (≤ it); NaN while the period is being learnt."""
        if math.isnan(self.period):
            return self._learn(received)
        a, t = self._anchor, self.period
        late = received - (a + round((received - a) / t) * t)
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
            self._anchor = received
            return received
        return received - late - t

    def _learn(self, received: float) -> float:
        self._learning.append(received)
        if len(self._learning) < LEARN:
            return math.nan
        r = self._learning
        self._learning = []
        period = round(statistics.median(b - a for a, b in itertools.pairwise(r)) * 1e3) * 1e-3
        if period <= 0.0:
            return math.nan  # Faster than 1 kHz, or bursts: learn again.
        self.period = period
        self._anchor = min(x - round((x - r[0]) / period) * period for x in r)
        return self.stamp(received)
