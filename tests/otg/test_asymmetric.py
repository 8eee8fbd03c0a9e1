"""Direction-relative (asymmetric) limits: valid everywhere, and no slower than any candidate we can build."""

from __future__ import annotations

import numpy as np
import pytest

from servo_node.otg import plan

from .problems import problem_set, ruckig_duration, ruckig_trajectory
from .reference import Problem, check

pytest.importorskip("ruckig")


def _ruckig_obeys_rule(pr: Problem, a_lo: float, a_hi: float) -> float | None:
    """Ruckig's duration under the box [a_lo, a_hi] when its trajectory also obeys the direction rule."""
    traj = ruckig_trajectory(
        (pr.p0, pr.v0, pr.a0), (pr.pt, pr.repaired_vt(), 0.0), pr.v_min, pr.v_max, a_lo, a_hi, pr.j_max
    )
    if traj is None:
        return None
    prof = traj.profiles[0][0]
    brake = float(getattr(prof.brake, "duration", 0.0))
    edges = np.concatenate(([0.0], brake + np.cumsum(np.asarray(prof.t, dtype=np.float64)), [traj.duration]))
    edges = np.clip(edges, 0.0, traj.duration)
    eps = 1e-9 * max(traj.duration, 1e-300)
    edges = np.unique(edges)
    inner = (edges[:-1, None] + (edges[1:] - edges[:-1])[:, None] * np.linspace(0.0, 1.0, 65)[None, :]).ravel()
    times = np.unique(np.concatenate((np.linspace(0.0, traj.duration, 2001), edges, edges + eps, edges - eps, inner)))
    times = times[(times >= 0.0) & (times <= traj.duration)]
    tol = 1e-9 * max(pr.a_max, -pr.a_min)
    for tk in times:
        _p, v, a = traj.at_time(float(tk))
        lo, hi = (pr.a_min, pr.a_max) if v[0] >= 0.0 else (-pr.a_max, -pr.a_min)
        if not lo - tol <= a[0] <= hi + tol:
            return None
    return float(traj.duration)


@pytest.mark.parametrize("seed", [11, 12])
def test_asymmetric_valid_and_no_slower_than_candidates(seed: int) -> None:
    """Every plan obeys the rule; it is never slower than a rule-obeying Ruckig box answer, never faster
    than the loose-box lower bound."""
    problems = problem_set(seed, 400, symmetric=False, outside_fraction=0.0)
    beaten = 0
    below_bound: list[object] = []
    for pr in problems:
        traj = plan(*pr.args())
        if traj.status == 1:
            assert pr.v_min == 0.0, pr
            continue
        assert traj.status == 0, pr
        errors = check(pr, traj.profile)
        assert not errors, (pr, errors)
        a_up, a_dn = pr.a_max, -pr.a_min
        loose = ruckig_duration(pr, -max(a_up, a_dn), max(a_up, a_dn))
        if loose is not None:
            # below the loose-box "lower bound" with a valid plan means Ruckig was not optimal there (it answers
            # a state already at the target with a detour, and misses rare cruise cases); keep those rare
            if traj.duration < loose * (1.0 - 1e-7):
                below_bound.append((pr, traj.duration, loose))
        for lo, hi in ((-a_dn, a_up), (-a_up, a_dn), (-min(a_up, a_dn), min(a_up, a_dn))):
            cand = _ruckig_obeys_rule(pr, lo, hi)
            if cand is not None:
                assert traj.duration <= cand * (1.0 + 1e-7), (pr, traj.duration, cand, (lo, hi))
                beaten += traj.duration < cand * (1.0 - 1e-7)
    assert len(below_bound) <= len(problems) // 100, below_bound
    print(f"seed {seed}: strictly faster than a rule-obeying Ruckig candidate {beaten} times; "
          f"below Ruckig's loose-box answer (Ruckig suboptimal) {len(below_bound)} times")


def test_reversal_changes_plateau_level_legally() -> None:
    """A reversing motion with a_max != |a_min| obeys the rule across v = 0 (checked densely)."""
    pr = Problem(0.0, 1.0, 0.0, -2.0, 0.0, -1.5, 1.5, -0.5, 2.0, 5.0)
    traj = plan(*pr.args())
    assert traj.status == 0
    assert not check(pr, traj.profile, grid=20001)
