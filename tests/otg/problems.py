"""Seeded random problem sets over wide magnitudes, and a thin Ruckig wrapper (the oracle)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .reference import Problem


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    """A magnitude drawn uniformly in log space."""
    return float(10.0 ** rng.uniform(math.log10(lo), math.log10(hi)))


def random_problem(rng: np.random.Generator, *, symmetric: bool, outside: bool) -> Problem:
    """One problem: positions 1e-3..1e3, limits 1e-2..1e3, start inside (or deliberately outside) the limits."""
    v_max = _log_uniform(rng, 1e-2, 1e3)
    v_min = -v_max if rng.random() < 0.4 else -v_max * float(rng.choice([0.0, rng.uniform(0.1, 3.0)]))
    a_max = _log_uniform(rng, 1e-2, 1e3)
    a_min = -a_max if symmetric else -a_max * _log_uniform(rng, 0.1, 10.0)
    j_max = _log_uniform(rng, 1e-2, 1e3)
    p0 = float(rng.choice([0.0, rng.uniform(-1.0, 1.0) * _log_uniform(rng, 1e-3, 1e3)]))
    pt = p0 + float(rng.choice([0.0, 1.0, 1.0, 1.0])) * rng.uniform(-1.0, 1.0) * _log_uniform(rng, 1e-3, 1e3)
    kind = rng.random()
    v0 = 0.0 if kind < 0.25 else float(rng.uniform(v_min, v_max))
    if rng.random() < 0.1:
        v0 = float(rng.choice([v_min, v_max]))
    a_hi = a_max if v0 >= 0.0 else -a_min
    a_lo = a_min if v0 >= 0.0 else -a_max
    a0 = 0.0 if rng.random() < 0.3 else float(rng.uniform(a_lo, a_hi))
    if rng.random() < 0.1:
        a0 = float(rng.choice([a_lo, a_hi]))
    if outside:
        which = rng.integers(3)
        if which == 0:
            v0 = float(rng.choice([v_min, v_max])) * float(rng.uniform(1.0, 3.0)) + float(rng.uniform(-1, 1)) * 1e-3
        elif which == 1:
            a0 = float(rng.choice([a_lo, a_hi])) * float(rng.uniform(1.0, 3.0))
        else:
            a0 = float(rng.choice([a_lo, a_hi])) * float(rng.uniform(0.5, 1.0))
            v0 = float(rng.choice([v_min, v_max])) * float(rng.uniform(0.8, 1.0))
    else:
        # keep the start recoverable: no unavoidable velocity overshoot
        if a0 > 0.0:
            a0 = min(a0, math.sqrt(max(2.0 * j_max * (v_max - v0), 0.0)))
        elif a0 < 0.0:
            a0 = max(a0, -math.sqrt(max(2.0 * j_max * (v0 - v_min), 0.0)))
    vt = 0.0 if rng.random() < 0.4 else float(rng.uniform(v_min, v_max))
    if rng.random() < 0.1:
        vt = float(rng.choice([v_min, v_max]))
    vt = abs(vt) if pt > p0 else (-abs(vt) if pt < p0 else vt)
    vt = min(max(vt, v_min), v_max)
    return Problem(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max)


def problem_set(seed: int, n: int, *, symmetric: bool, outside_fraction: float) -> list[Problem]:
    """A reproducible list of problems."""
    rng = np.random.default_rng(seed)
    return [random_problem(rng, symmetric=symmetric, outside=rng.random() < outside_fraction) for _ in range(n)]


def ruckig_trajectory(
    start: tuple[float, float, float],
    target: tuple[float, float, float],
    v_min: float,
    v_max: float,
    a_lo: float,
    a_hi: float,
    j_max: float,
) -> Any:
    """Ruckig's time-optimal trajectory from (p, v, a) to (p, v, a) under the box [a_lo, a_hi]; None if it fails."""
    from ruckig import InputParameter, Ruckig, Trajectory

    otg = Ruckig(1)
    inp = InputParameter(1)
    inp.current_position, inp.current_velocity, inp.current_acceleration = ([x] for x in start)
    inp.target_position, inp.target_velocity, inp.target_acceleration = ([x] for x in target)
    inp.max_velocity, inp.min_velocity = [v_max], [v_min]
    inp.max_acceleration, inp.min_acceleration, inp.max_jerk = [a_hi], [a_lo], [j_max]
    traj = Trajectory(1)
    try:
        if int(otg.calculate(inp, traj).value) < 0:
            return None
    except Exception:  # Ruckig throws where it fails ("error in step 1", …).
        return None
    return traj


def ruckig_duration(pr: Problem, a_lo: float | None = None, a_hi: float | None = None) -> float | None:
    """Ruckig's time-optimal duration under the box [a_lo, a_hi] (default the problem's), None when it fails."""
    traj = ruckig_trajectory(
        (pr.p0, pr.v0, pr.a0),
        (pr.pt, pr.repaired_vt(), 0.0),
        pr.v_min,
        pr.v_max,
        pr.a_min if a_lo is None else a_lo,
        pr.a_max if a_hi is None else a_hi,
        pr.j_max,
    )
    return None if traj is None else float(traj.duration)
