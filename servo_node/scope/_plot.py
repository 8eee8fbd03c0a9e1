"""The scope's figure: one panel per quantity (position, velocity, acceleration, force) against time, one line per
axis, the reference thin and dotted in the axis's colour, the limits dashed. matplotlib is optional (the ``plot``
extra): without it :func:`render` raises :class:`PlotUnavailableError` and the caller keeps the CSV.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._trace import QUANTITIES, AxisTrace, Trace

UNITS = {"rad": ("rad", "rad/s", "rad/s²", "N·m"), "m": ("m", "m/s", "m/s²", "N")}


class PlotUnavailableError(ImportError):
    """matplotlib is not installed: ``pip install 'cyphal-servo[plot]'``."""


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend; :raises PlotUnavailableError: without matplotlib."""
    try:
        import matplotlib
    except ImportError as ex:
        raise PlotUnavailableError("matplotlib is not installed (pip install 'cyphal-servo[plot]'): "
                                   "wrote the CSV only") from ex
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _step_onto(t_src: Sequence[float], x_src: Sequence[float], t: np.ndarray) -> np.ndarray:
    """The latest value of a step series at each of the times ``t`` (its first value before it starts)."""
    idx = np.searchsorted(np.asarray(t_src), t, side="right") - 1
    return np.asarray(x_src, dtype=float)[np.clip(idx, 0, len(t_src) - 1)]


def _limit_lines(a: AxisTrace, t: np.ndarray, v: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(lower, upper) limit curves per panel at the measured times: velocity limits, the direction-relative
    acceleration limits (a_max bounds speeding up, |a_min| slowing down, so they swap with the sign of v), ±force."""
    lim = a.limits
    if not len(lim) or not len(t):
        return {}
    c = {n: _step_onto(lim.t, lim.columns[n], t) for n in lim.names}
    fwd = v >= 0.0
    return {
        "velocity": (c["v_min"], c["v_max"]),
        "acceleration": (np.where(fwd, c["a_min"], -c["a_max"]), np.where(fwd, c["a_max"], -c["a_min"])),
        "force": (-c["f_max"], c["f_max"]),
    }


def draw(trace: Trace, panels: Sequence[Any], t0: float | None = None) -> None:
    """Draw the trace into four matplotlib axes (position, velocity, acceleration, force), time from ``t0``."""
    t0 = trace.t_start() if t0 is None else t0
    colours = [f"C{k % 10}" for k in range(len(trace.axes))]
    for a, colour in zip(trace.axes.values(), colours, strict=True):
        m = a.measured
        t = np.asarray(m.t) - t0
        label = f"{a.label} [{a.unit}]" if a.unit else a.label
        for ax, q in zip(panels, QUANTITIES, strict=True):
            ax.plot(t, m.columns[q], color=colour, linewidth=1.2, label=label)
        r = a.reference
        if len(r):
            tr = np.asarray(r.t) - t0
            for ax, q in zip(panels[:3], QUANTITIES[:3], strict=True):
                ax.plot(tr, r.columns[q], color=colour, linewidth=0.8, linestyle=":", alpha=0.9)
        for q, (lo, hi) in _limit_lines(a, np.asarray(m.t), np.asarray(m.columns["velocity"])).items():
            ax = panels[QUANTITIES.index(q)]
            for curve in (lo, hi):
                if np.all(np.isfinite(curve)):
                    ax.plot(t, curve, color=colour, linewidth=0.8, linestyle="--", alpha=0.7)
    units = {a.unit for a in trace.axes.values()}
    unit = UNITS.get(units.pop()) if len(units) == 1 else None
    for k, (ax, q) in enumerate(zip(panels, QUANTITIES, strict=True)):
        ax.set_ylabel(f"{q} [{unit[k]}]" if unit else q)
        ax.grid(alpha=0.3)
        ax.axhline(0.0, color="black", linewidth=0.4)
    panels[0].legend(loc="best", fontsize=7, ncol=max(1, math.ceil(len(trace.axes) / 4)))


def render(trace: Trace, path: str | Path, title: str = "") -> list[str]:
    """Write the figure (PNG or SVG by the suffix); returns the panels drawn.

    :raises PlotUnavailableError: without matplotlib. :raises ValueError: an empty trace.
    """
    if not trace.samples():
        raise ValueError("nothing recorded: no dynamics arrived")
    plt = pyplot()
    fig, panels = plt.subplots(len(QUANTITIES), 1, sharex=True, figsize=(9, 9), constrained_layout=True)
    draw(trace, panels)
    panels[-1].set_xlabel("time [s]")
    panels[0].set_title(title or "measured (solid), reference (dotted), limits (dashed)", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return list(QUANTITIES)
