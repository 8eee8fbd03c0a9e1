"""What a scope records, and its CSV form. Pure data: no pycyphal, no matplotlib.

One :class:`Trace` holds, per axis, three time series on the system clock [second]: the measured ``dynamics``
(position, velocity, acceleration, force), the reference the node reports in ``sys.motion`` (position, velocity,
acceleration; sampled by register reads, so sparser), and the limits in force (velocity, acceleration, force:
the node's ``servo.profile.*`` and ``servo.torque_limit`` at first sight, then the active setpoint's limits from
``sys.status`` when polled).

CSV (one row per sample, long format so that axes with different rates share one file)::

    t_s,axis,source,position,velocity,acceleration,force,v_min,v_max,a_min,a_max,f_max

``source`` is ``measured``, ``reference`` or ``limits``; the columns a source does not fill are empty.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

COLUMNS = ("t_s", "axis", "source", "position", "velocity", "acceleration", "force",
           "v_min", "v_max", "a_min", "a_max", "f_max")
QUANTITIES = ("position", "velocity", "acceleration", "force")
"""The measured quantities, one plot panel each."""
LIMIT_FIELDS = ("v_min", "v_max", "a_min", "a_max", "f_max")


@dataclass
class Series:
    """Samples of one source of one axis: times [second, system clock] and named columns of equal length."""

    names: tuple[str, ...]
    t: list[float] = field(default_factory=list)
    columns: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for n in self.names:
            self.columns.setdefault(n, [])

    def add(self, t: float, *values: float) -> None:
        """Append one sample (values in the order of :attr:`names`); an older or repeated time is dropped."""
        if self.t and t <= self.t[-1]:
            return
        self.t.append(t)
        for n, v in zip(self.names, values, strict=True):
            self.columns[n].append(v)

    def __len__(self) -> int:
        return len(self.t)


@dataclass
class AxisTrace:
    """Everything recorded of one axis."""

    label: str
    unit: str = ""
    """``rad`` or ``m`` (and N·m or N for the force), when known."""
    measured: Series = field(default_factory=lambda: Series(QUANTITIES))
    reference: Series = field(default_factory=lambda: Series(QUANTITIES[:3]))
    limits: Series = field(default_factory=lambda: Series(LIMIT_FIELDS))


@dataclass
class Trace:
    """A recording: axes in the order they were first seen."""

    axes: dict[str, AxisTrace] = field(default_factory=dict)

    def axis(self, label: str) -> AxisTrace:
        """The axis of that label, created on first use."""
        if label not in self.axes:
            self.axes[label] = AxisTrace(label)
        return self.axes[label]

    def t_start(self) -> float:
        """Earliest time of any sample (NaN when empty)."""
        firsts = [s.t[0] for a in self.axes.values() for s in (a.measured, a.reference, a.limits) if s.t]
        return min(firsts) if firsts else math.nan

    def samples(self) -> int:
        return sum(len(a.measured) for a in self.axes.values())


def _cell(x: float) -> str:
    return repr(x) if math.isfinite(x) else ("" if math.isnan(x) else str(x))


def write_csv(trace: Trace, path: str | Path) -> int:
    """Write the trace (sorted by time); returns the number of rows."""
    rows: list[tuple[float, list[str]]] = []
    for a in trace.axes.values():
        for source, series in (("measured", a.measured), ("reference", a.reference), ("limits", a.limits)):
            for k, t in enumerate(series.t):
                row = {n: _cell(series.columns[n][k]) for n in series.names}
                rows.append((t, [repr(t), a.label, source, *(row.get(c, "") for c in COLUMNS[3:])]))
    rows.sort(key=lambda r: r[0])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(r for _, r in rows)
    return len(rows)


def read_csv(path: str | Path) -> Trace:
    """A trace from a CSV written by :func:`write_csv`."""
    trace = Trace()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            a = trace.axis(row["axis"])
            series = {"measured": a.measured, "reference": a.reference, "limits": a.limits}[row["source"]]
            series.add(float(row["t_s"]), *(_num(row[n]) for n in series.names))
    return trace


def _num(text: str) -> float:
    return float(text) if text else math.nan

