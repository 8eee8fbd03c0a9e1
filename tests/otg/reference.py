"""Slow, readable reference checks for planned trajectories (the validator every OTG test uses).

``check`` samples a profile densely (every phase boundary from both sides, interior extrema of v,
zero crossings of v, plus a uniform grid), re-integrates the jerk signal on its own to confirm
p, v, a are continuous and consistent, and checks every limit, the direction-relative rule and
the end state.  It returns a list of human-readable violations (empty when the plan is valid).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from servo_node.otg import sample_batch
from servo_node.otg._profile import BRAKE_COUNT, COUNT, DURATION, HEADER, PH_A, PH_J, PH_T, PH_V, PHASE_STRIDE

Arr = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Problem:
    """One planning problem in the public argument order."""

    p0: float
    v0: float
    a0: float
    pt: float
    vt: float
    v_min: float
    v_max: float
    a_min: float
    a_max: float
    j_max: float

    def args(self) -> tuple[float, ...]:
        """Arguments for ``plan``/``plan_into``."""
        return (self.p0, self.v0, self.a0, self.pt, self.vt, self.v_min, self.v_max, self.a_min, self.a_max,
                self.j_max)

    def repaired_vt(self) -> float:
        """The target velocity after the seed's feasibility repair."""
        w = min(max(self.vt, self.v_min), self.v_max)
        if self.pt > self.p0 and w < 0.0:
            w = 0.0
        if self.pt < self.p0 and w > 0.0:
            w = 0.0
        return w

    def starts_inside(self) -> bool:
        """True when the start obeys every limit and needs no brake (no unavoidable overshoot)."""
        lo, hi = (self.a_min, self.a_max) if self.v0 >= 0.0 else (-self.a_max, -self.a_min)
        if not (lo <= self.a0 <= hi and self.v_min <= self.v0 <= self.v_max):
            return False
        # a crossing of v = 0 that cannot be reached with the acceleration inside the other side's bound
        if self.v0 >= 0.0 > self.a0 and self.a0 * self.a0 > 2.0 * self.j_max * self.v0:
            if self.a0 * self.a0 - 2.0 * self.j_max * self.v0 > self.a_max**2:
                return False
        if self.v0 < 0.0 < self.a0 and self.a0 * self.a0 > -2.0 * self.j_max * self.v0:
            if self.a0 * self.a0 + 2.0 * self.j_max * self.v0 > self.a_max**2:
                return False
        if self.a0 >= 0.0:
            cap = self.a_max if self.v0 >= 0.0 else -self.a_min
            return self.v0 + self.a0 * self.a0 / (2.0 * self.j_max) <= self.v_max and self.a0 <= cap
        return self.v0 - self.a0 * self.a0 / (2.0 * self.j_max) >= self.v_min


def phase_table(profile: Arr) -> tuple[Arr, Arr, Arr, Arr]:
    """Start times, velocities, accelerations and jerks of the profile's phases."""
    n = int(profile[COUNT])
    idx = HEADER + np.arange(n) * PHASE_STRIDE
    return profile[idx + PH_T], profile[idx + PH_V], profile[idx + PH_A], profile[idx + PH_J]


def critical_times(profile: Arr, grid: int) -> Arr:
    """Uniform grid plus phase boundaries (both sides), v extrema (a = 0) and v = 0 crossings."""
    dur = float(profile[DURATION])
    t0, v, a, j = phase_table(profile)
    ends = np.append(t0[1:], dur)
    times = [np.linspace(0.0, dur, grid), t0, ends]
    eps = 1e-12 * max(dur, 1e-300)
    times.append(np.clip(t0 - eps, 0.0, None))
    times.append(np.minimum(t0 + eps, dur))
    for k in range(t0.shape[0]):
        cands = []
        if j[k] != 0.0:
            cands.append(-a[k] / j[k])
            disc = a[k] * a[k] - 2.0 * j[k] * v[k]
            if disc >= 0.0:
                cands += [(-a[k] + np.sqrt(disc)) / j[k], (-a[k] - np.sqrt(disc)) / j[k]]
        elif a[k] != 0.0:
            cands.append(-v[k] / a[k])
        for c in cands:
            if 0.0 < c < ends[k] - t0[k]:
                times.append(np.array([t0[k] + c]))
    out = np.unique(np.concatenate(times))
    return out[(out >= 0.0) & (out <= dur)]


def check(problem: Problem, profile: Arr, *, grid: int = 801, rel: float = 1e-9, end_rel: float = 1e-8) -> list[str]:
    """All violations of limits, rule, continuity and end state for ``profile`` solving ``problem``."""
    pr = problem
    errors: list[str] = []
    dur = float(profile[DURATION])
    if not np.isfinite(dur) or dur < 0.0:
        return [f"bad duration {dur}"]
    t = critical_times(profile, grid)
    p, v, a, j = (np.asarray(x, dtype=np.float64) for x in sample_batch(profile[None, :], t[None, :]))
    p, v, a, j = p[0], v[0], a[0], j[0]
    # velocity scale: the limits, or the largest speed the plan reaches (a start outside the limits may force an
    # excursion far beyond them, and a velocity is known only to ~ulp of the largest one summed into it)
    vs = max(pr.v_max, -pr.v_min, abs(pr.v0), abs(pr.vt), float(np.max(np.abs(v))))
    as_ = max(pr.a_max, -pr.a_min, abs(pr.a0))
    # position scale: the move, or 1e-15 of the limits' natural length a³/j² for vanishing moves
    # or, for vanishing moves, the planner's documented position resolution: distances below
    # 4·vtol^1.5 (vtol = 1.5e-14 of the velocity range, in units a³/j²) count as already reached
    amax = max(pr.a_max, -pr.a_min)
    natural = amax**3 / pr.j_max**2
    vtol_n = 1.5e-14 * (pr.v_max - pr.v_min + abs(pr.repaired_vt())) / (amax * amax / pr.j_max)
    resolution = 4.0 * vtol_n**1.5 * natural + 1e-13 * (abs(pr.p0) + abs(pr.pt))
    # and the planner's noise on a direct velocity change (its ``tol``: 1e-14 of the distance and of the velocity
    # scale, the natural a²/j included, times the duration), which it accepts ten times over where reversing is
    # forbidden and the move is short by noise only (0 → 0 ending at vt = 1e-10 from rest, j = 1, a = 23: 1e-15)
    resolution += 1e-14 * (abs(pr.pt - pr.p0) + (abs(pr.v0) + abs(pr.repaired_vt()) + amax * amax / pr.j_max) * dur)
    ps = max(abs(pr.p0), abs(pr.pt), float(np.max(np.abs(p - pr.p0))), 1e-15 * natural, resolution / rel, 1e-300)
    # independent re-integration of the jerk signal from the start state (continuity and consistency)
    dt = np.diff(t)
    jm = np.asarray(sample_batch(profile[None, :], (t[:-1] + 0.5 * dt)[None, :])[3], dtype=np.float64)[0]
    # times are absolute doubles: a sample time is only known to ~ulp(T), which moves a, v, p by j·ulp etc.
    q = 4.0 * np.finfo(np.float64).eps * max(dur, 1e-300)
    ps_q, vs_q, as_q = ps + vs * q / rel, vs + as_ * q / rel, as_ + pr.j_max * q / rel
    h = dt
    pi = p[:-1] + h * (v[:-1] + h * (0.5 * a[:-1] + h * jm / 6.0))
    vi = v[:-1] + h * (a[:-1] + 0.5 * h * jm)
    ai = a[:-1] + h * jm
    # the first sample must be the start state itself
    gaps = [abs(p[0] - pr.p0) / ps_q, abs(v[0] - pr.v0) / vs_q, abs(a[0] - pr.a0) / as_q]
    # the jump onto the exact target at t = T is the end-state error, judged below with end_rel
    inner = t[1:] < dur
    worst = max(float(np.max(np.abs(pi - p[1:])[inner] / ps_q, initial=0.0)),
                float(np.max(np.abs(vi - v[1:])[inner] / vs_q, initial=0.0)),
                float(np.max(np.abs(ai - a[1:])[inner] / as_q, initial=0.0)), *gaps)
    reached = (pi[-1], vi[-1], ai[-1]) if pi.shape[0] else (p[-1], v[-1], a[-1])
    if worst > 1e-9:
        errors.append(f"discontinuity {worst:.3g}")
    if np.any(np.abs(j) > pr.j_max * (1.0 + rel)):
        errors.append("jerk limit")
    # limits apply once the state is back inside (a start outside is brought back by the brake)
    start = 0
    if not pr.starts_inside():
        nb = int(profile[BRAKE_COUNT])
        t_brake = phase_table(profile)[0][nb] if nb < int(profile[COUNT]) else dur
        inside = _inside(pr, v, a, vs, as_, rel) & (t >= t_brake)
        start = int(np.argmax(inside)) if inside.any() else t.shape[0]
    vv, aa = v[start:], a[start:]
    if np.any(vv > pr.v_max + rel * vs) or np.any(vv < pr.v_min - rel * vs):
        errors.append(f"velocity limit: [{vv.min()!r}, {vv.max()!r}] vs [{pr.v_min!r}, {pr.v_max!r}]")
    if not np.all(_rule_ok(pr, vv, aa, rel * as_, rel * vs)):
        errors.append("direction-relative acceleration rule")
    pe, ve, ae = (float(x) for x in reached)  # the end state the phases actually integrate to
    w = pr.repaired_vt()
    if abs(pe - pr.pt) > end_rel * ps_q or abs(ve - w) > end_rel * vs_q or abs(ae) > end_rel * as_q:
        errors.append(f"end state ({pe!r}, {ve!r}, {ae!r}) vs ({pr.pt!r}, {w!r}, 0)")
    return errors


def _rule_ok(pr: Problem, v: Arr, a: Arr, tol: float, vtol: float = 0.0) -> npt.NDArray[np.bool_]:
    """Direction-relative acceleration rule on samples: bounds depend on the sign of v.

    Within vtol of v = 0 (a 1e-9-relative velocity excursion) either side's bounds are accepted.
    """
    lo = np.where(v >= 0.0, pr.a_min, -pr.a_max)
    hi = np.where(v >= 0.0, pr.a_max, -pr.a_min)
    # at v == 0 exactly both sides' bounds apply by continuity; accept either side
    amax = max(pr.a_max, -pr.a_min)
    lo2 = np.where(np.abs(v) <= vtol, -amax, lo)
    hi2 = np.where(np.abs(v) <= vtol, amax, hi)
    return (a >= lo2 - tol) & (a <= hi2 + tol)


def _inside(pr: Problem, v: Arr, a: Arr, vs: float, as_: float, rel: float) -> npt.NDArray[np.bool_]:
    """Samples where velocity and acceleration are within their limits."""
    return (v <= pr.v_max + rel * vs) & (v >= pr.v_min - rel * vs) & _rule_ok(pr, v, a, rel * as_, rel * vs)
