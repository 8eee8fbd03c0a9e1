"""What a finished coordinated move measured: the straight-line deviation and each axis's lag behind its plan.

Pure functions of timestamped samples and the nodes' own plans (no pycyphal, no clock). The lag closes the loop
on the reported plan starts: a node that reported a t0 earlier than its joint really started would show it as
lag, so the arrival spread of the *measured* motion (t0 + T + lag) checks the reported one (t0 + T).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servo_node.otg import Trajectory

LAG_MIN_SPEED = 0.1
"""Samples where the plan is slower than this fraction of its peak speed carry little timing information (and
its start and end, where the joint's settling dominates): the lag fit leaves them out."""


def progress_deviation(series: Sequence[tuple[np.ndarray, np.ndarray]], starts: Sequence[float],
                       targets: Sequence[float], t_from: float, t_to: float, step: float = 1e-3,
                       max_gap: float | None = None) -> float:
    """Max over [t_from, t_to] of the spread of the normalised progress of the moving axes.

    ``series``: per axis (times, positions); before its first sample an axis is at its start, after its last at
    its last sample. ``max_gap``: instants between two samples of an axis farther apart than this are not judged (a
    recording that lost samples is not interpolated across its gaps); NaN if no instant is left.
    """
    grid = np.arange(t_from, t_to + step, step)
    rows = []
    judged = np.ones(len(grid), dtype=bool)
    for (t, p), p0, pt in zip(series, starts, targets, strict=True):
        if pt == p0 or len(t) == 0:
            continue
        rows.append((np.interp(grid, t, p, left=p0, right=p[-1]) - p0) / (pt - p0))
        if max_gap is not None and len(t) > 1:
            i = np.clip(np.searchsorted(t, grid), 1, len(t) - 1)
            inside = (grid > t[0]) & (grid < t[-1])
            judged &= ~inside | (t[i] - t[i - 1] <= max_gap)
    if len(rows) < 2:
        return 0.0
    if not judged.any():
        return math.nan
    s = np.vstack(rows)[:, judged]
    return float(np.max(s.max(axis=0) - s.min(axis=0)))


def plan_positions(traj: Trajectory, t0: float, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p, v) of the plan ``traj`` started at ``t0``, at ``times`` (at its start before it).

    Sampled one time at a time (a few thousand per move): the batch sampler is a parallel kernel, whose threads
    and compilation a coordinator has no use for.
    """
    samples = np.array([traj.at(max(0.0, float(t) - t0))[:2] for t in times]).reshape(-1, 2)
    return samples[:, 0], samples[:, 1]


def plan_lag(traj: Trajectory, t0: float, t: np.ndarray, p: np.ndarray) -> float:
    """How far the measured positions ``p`` at ``t`` trail the plan started at ``t0`` [second].

    Least squares of p(t) ≈ p_plan(t − t0 − lag) ≈ p_plan(t − t0) − v_plan·lag over the samples within the plan
    where its speed is at least :data:`LAG_MIN_SPEED` of its peak. NaN without such samples.
    """
    t = np.asarray(t, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    inside = (t >= t0) & (t <= t0 + traj.duration)
    if not inside.any():
        return math.nan
    p_ref, v_ref = plan_positions(traj, t0, t[inside])
    fast = np.abs(v_ref) >= LAG_MIN_SPEED * float(np.max(np.abs(v_ref)))
    if np.count_nonzero(fast) < 3 or not np.any(v_ref[fast]):
        return math.nan
    v = v_ref[fast]
    return float(np.sum((p_ref[fast] - p[inside][fast]) * v) / np.sum(v * v))
