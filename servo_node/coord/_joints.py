"""What the joints did in a coordinated move, judged from their own samples: when each arrived, how far the motion
left the straight line, and which stretches could not be judged because samples were lost.

Pure functions of the ``dynamics`` samples (each node's own stamps, never this process's reception times) and the
moves' starts and targets; no pycyphal, no clock. A node publishes every sample its loop traced at its
``servo.dynamics_rate`` (``servo_node/control/_trace.py``), so a gap in a recording is samples lost on the way or
by a coordinator that fell behind: where the samples are that far apart, nothing is judged, and the report says so
rather than interpolating a verdict across it. Between samples the joint's path is the cubic Hermite curve of the
positions and velocities at both ends (the joint's own measurements), a few µ-strokes off a jerk-limited motion
at the usual rates.

* **Arrival**: the last entry into ±:data:`ARRIVAL_BAND` of the stroke around the target (the crossing located on
  that curve), within the window; unknown if the crossing lies in a gap or the recording ends first.
* **Line deviation**: the largest spread, over the judged instants of the window (a 1 ms grid), of the axes'
  progress fractions (p − p0)/(target − p0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ARRIVAL_BAND = 1e-3
"""An axis has arrived once it stays within this fraction of its stroke of its target."""

GAP_PERIODS = 2.5
"""Samples further apart than this many of the node's dynamics periods (or :data:`GAP_MIN_S`) are a gap."""
GAP_MIN_S = 0.01
"""…and never less than this [second]: a joint between two samples this close moves along their Hermite curve to
well within the judged figures."""
GRID_S = 1e-3
"""The deviation is judged on instants this far apart [second]."""


@dataclass(frozen=True)
class Samples:
    """One axis's recorded samples (its own stamps [second], position, velocity) and its expected period."""

    t: np.ndarray
    p: np.ndarray
    v: np.ndarray
    period: float
    """The node's ``dynamics`` period [second] (1 / ``servo.dynamics_rate``)."""

    @property
    def max_gap(self) -> float:
        """Samples further apart than this are a gap [second]."""
        return max(GAP_PERIODS * self.period, GAP_MIN_S)


@dataclass(frozen=True)
class Gaps:
    """Where an axis's recording lost samples within a window."""

    lost: int
    """Samples missing (each interval's length in periods, less one, summed over the intervals longer than 1.5)."""
    longest: float
    """The longest interval between samples [second] (from the window's start to the first sample, and from the
    last sample to the window's end, included)."""
    unjudged: float
    """Time of the window within gaps [second]."""
    at: float = 0.0
    """Where the longest interval begins, from the window's start [second]."""


@dataclass(frozen=True)
class Line:
    """The straight-line deviation of a move as measured."""

    deviation: float
    """Largest spread of the progress fractions over the judged instants (NaN: none judged)."""
    at: float
    """When [second, the samples' clock] (NaN: none judged)."""
    unjudged: float
    """Time of the window not judged: some axis in a gap [second]."""


def hermite(s: Samples, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions at ``grid``, judged): the Hermite curve between the samples around each instant; an instant is
    judged when its samples are at most :attr:`Samples.max_gap` apart (before the first sample or after the last:
    not judged, at the first or last position)."""
    t, p, v = s.t, s.p, s.v
    if len(t) == 0:
        return np.full(len(grid), np.nan), np.zeros(len(grid), dtype=bool)
    if len(t) == 1:
        return np.full(len(grid), p[0]), grid == t[0]
    i = np.clip(np.searchsorted(t, grid, side="right"), 1, len(t) - 1)
    t0, t1 = t[i - 1], t[i]
    h = t1 - t0
    u = np.clip((grid - t0) / h, 0.0, 1.0)
    u2, u3 = u * u, u * u * u
    pos = ((2 * u3 - 3 * u2 + 1) * p[i - 1] + (u3 - 2 * u2 + u) * h * v[i - 1] + (-2 * u3 + 3 * u2) * p[i]
           + (u3 - u2) * h * v[i])
    judged = (grid >= t[0]) & (grid <= t[-1]) & (h <= s.max_gap)
    return pos, judged


def gaps(s: Samples, t_from: float, t_to: float) -> Gaps:
    """The samples an axis's recording lost within [t_from, t_to]."""
    inside = s.t[(s.t >= t_from) & (s.t <= t_to)]
    edges = np.concatenate(([t_from], inside, [t_to]))
    d = np.diff(edges)
    inner = np.diff(inside)
    lost = int(np.sum(np.maximum(np.round(inner / s.period) - 1.0, 0.0)[inner > 1.5 * s.period]))
    unjudged = float(np.sum(d[d > s.max_gap]))
    k = int(np.argmax(d)) if len(d) else 0
    return Gaps(lost, float(d.max(initial=0.0)), unjudged, float(edges[k] - t_from) if len(d) else 0.0)


def line(samples: Sequence[Samples], starts: Sequence[float], targets: Sequence[float], t_from: float,
         t_to: float) -> Line:
    """The straight-line deviation of the axes that move (target ≠ start) over [t_from, t_to]."""
    grid = np.arange(t_from, t_to + 0.5 * GRID_S, GRID_S)
    rows = []
    judged = np.ones(len(grid), dtype=bool)
    for s, p0, pt in zip(samples, starts, targets, strict=True):
        if pt == p0:
            continue
        pos, ok = hermite(s, grid)
        rows.append((pos - p0) / (pt - p0))
        judged &= ok
    unjudged = float(np.count_nonzero(~judged)) * GRID_S
    if len(rows) < 2:
        return Line(0.0, math.nan, unjudged if rows else 0.0)
    if not judged.any():
        return Line(math.nan, math.nan, unjudged)
    spread = np.ptp(np.vstack(rows)[:, judged], axis=0)
    k = int(np.argmax(spread))
    return Line(float(spread[k]), float(grid[judged][k]), unjudged)


def arrival(s: Samples, start: float, target: float, t_from: float, t_to: float) -> tuple[float, str]:
    """(when the axis last entered ±:data:`ARRIVAL_BAND` of its stroke around ``target`` within [t_from, t_to], or
    NaN; why not, if NaN). The crossing is located on the Hermite curve of the two samples around it."""
    band = ARRIVAL_BAND * abs(target - start)
    sel = (s.t >= t_from) & (s.t <= t_to)
    t, p, v = s.t[sel], s.p[sel], s.v[sel]
    if len(t) == 0:
        return math.nan, "no samples in the window"
    out = np.abs(p - target) > band
    if out[-1]:
        return math.nan, f"outside the band at its last sample, {(t_to - t[-1]) * 1e3:.0f} ms before the window's end"
    if t_to - t[-1] > s.max_gap:
        return math.nan, f"samples end {(t_to - t[-1]) * 1e3:.0f} ms before the window's end"
    if not out.any():
        if t[0] - t_from > s.max_gap:
            return math.nan, f"no sample in the first {(t[0] - t_from) * 1e3:.0f} ms of the window"
        return t_from, ""
    k = int(np.nonzero(out)[0][-1])
    if t[k + 1] - t[k] > s.max_gap:
        return math.nan, f"its arrival lies in a gap of {(t[k + 1] - t[k]) * 1e3:.0f} ms between samples"
    lo, hi = t[k], t[k + 1]
    seg = Samples(t[k:k + 2], p[k:k + 2], v[k:k + 2], s.period)
    for _ in range(40):  # Bisection on the curve: outside the band at lo, inside at hi.
        mid = 0.5 * (lo + hi)
        if abs(hermite(seg, np.array([mid]))[0][0] - target) > band:
            lo = mid
        else:
            hi = mid
    return hi, ""


LINE_WARN = 0.01
"""A measured straight-line deviation above this fraction of the stroke is a warning (``--check-line`` sets it)."""


@dataclass(frozen=True)
class Joints:
    """A move (or path segment) as the joints executed it: each moving axis's arrival, the line, the lost samples."""

    moving: tuple[bool, ...]
    arrivals: tuple[float, ...]
    """Each axis's measured arrival [second, the samples' clock]; NaN: not moving, or unknown (see :attr:`why`)."""
    why: tuple[str, ...]
    gaps: tuple[Gaps, ...]
    line: Line
    periods: tuple[float, ...]

    @property
    def spread(self) -> float:
        """Measured arrival spread of the moving axes [second]; NaN if any moving axis's arrival is unknown."""
        arr = [a for a, m in zip(self.arrivals, self.moving, strict=True) if m]
        if not arr or any(math.isnan(a) for a in arr):
            return math.nan if arr else 0.0
        return max(arr) - min(arr)

    @property
    def lost(self) -> bool:
        """Some moving axis's recording lost samples, or left a stretch unjudged."""
        return any(m and (g.lost > 0 or g.unjudged > 0.0) for m, g in zip(self.moving, self.gaps, strict=True))

    def verdict(self, threshold: float = LINE_WARN) -> str:
        """``above``: the judged deviation exceeds ``threshold`` (whatever was lost); ``unjudged``: it does not, but a
        stretch of the move could not be judged (or none was); ``ok`` otherwise."""
        dev = self.line.deviation
        if math.isfinite(dev) and dev > threshold:
            return "above"
        if not math.isfinite(dev) or self.line.unjudged > 0.0:
            return "unjudged"
        return "ok"

    def describe(self, labels: Sequence[str], threshold: float = LINE_WARN,
                 straight: bool = True) -> tuple[str, str, list[str]]:
        """(arrival spread text, line deviation text, notes on lost samples and unknown arrivals) for a report;
        the deviation is judged against ``threshold`` only if the move is meant to be ``straight``."""
        if not any(self.moving):
            return ("measured: none (no axis ran this move's plan)", "measured: none (no axis ran this move's plan)",
                    [])
        spread = (f"measured {self.spread * 1e3:.3f} ms (last entry into ±{ARRIVAL_BAND * 100:g} % of the stroke, "
                  f"from the joints' dynamics)" if math.isfinite(self.spread) else "measured: unknown")
        rates = sorted({round(1.0 / p) for p, m in zip(self.periods, self.moving, strict=True) if m and p > 0.0})
        dev = self.line.deviation
        verdict = self.verdict(threshold) if straight else "ok"
        line = (f"measured {dev * 100:.3f} % (the joints' dynamics at {'/'.join(map(str, rates))} Hz"
                f"{f', {self.line.unjudged * 1e3:.0f} ms not judged: samples lost' if self.line.unjudged else ''})"
                if math.isfinite(dev) else "measured: not judged (samples lost)")
        if verdict == "above":
            line += f" — WARNING: above {threshold * 100:g} % of the stroke"
        elif verdict == "unjudged":
            line += f" — no verdict against {threshold * 100:g} %: part of the move not judged"
        notes = [f"{lab}: lost {g.lost} samples, longest gap {g.longest * 1e3:.1f} ms (from +{g.at * 1e3:.0f} ms), "
                 f"{g.unjudged * 1e3:.0f} ms of the move not judged"
                 for lab, g, m in zip(labels, self.gaps, self.moving, strict=True) if m and (g.lost or g.unjudged)]
        notes += [f"{lab}: arrival unknown: {w}" for lab, w, m in zip(labels, self.why, self.moving, strict=True)
                  if m and w]
        return spread, line, notes


def measure(samples: Sequence[Samples], starts: Sequence[float], targets: Sequence[float], moving: Sequence[bool],
            t_from: float, t_to: float) -> Joints:
    """The joints' arrivals and line over [t_from, t_to] (the samples' clock): ``targets`` of axes not ``moving``
    (held) are ignored."""
    arrivals, why = [], []
    for s, p0, pt, m in zip(samples, starts, targets, moving, strict=True):
        a, w = arrival(s, p0, pt, t_from, t_to) if m and pt != p0 else (math.nan, "")
        arrivals.append(a)
        why.append(w)
    lined = [pt if m else p0 for p0, pt, m in zip(starts, targets, moving, strict=True)]
    return Joints(tuple(moving), tuple(arrivals), tuple(why), tuple(gaps(s, t_from, t_to) for s in samples),
                  line(samples, starts, lined, t_from, t_to), tuple(s.period for s in samples))
