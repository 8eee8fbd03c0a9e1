"""Time-optimality against Ruckig on thousands of seeded random symmetric-limit problems."""

from __future__ import annotations

import numpy as np
import pytest

from servo_node.otg import plan

from .problems import problem_set, ruckig_duration
from .reference import check

pytest.importorskip("ruckig")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_matches_ruckig_symmetric(seed: int) -> None:
    """Inside starts: |T/T_ruckig - 1| <= 1e-7; outside starts: never slower; Ruckig failures: we stay valid."""
    problems = problem_set(seed, 1200, symmetric=True, outside_fraction=0.3)
    worst_inside = 0.0
    faster = 0
    faster_inside: list[object] = []
    ruckig_failed = 0
    for pr in problems:
        traj = plan(*pr.args())
        ref = ruckig_duration(pr)
        if traj.status == 1:
            # only a forbidden reverse motion (v_min == 0) is infeasible; Ruckig may still answer within its
            # absolute 1e-8 position tolerance (a tiny overshoot it cannot undo)
            assert pr.v_min == 0.0, pr
            continue
        assert traj.status == 0, pr
        errors = check(pr, traj.profile)
        assert not errors, (pr, errors)
        if ref is None:
            ruckig_failed += 1
            continue
        ratio = traj.duration / ref - 1.0 if ref > 0.0 else traj.duration
        # never slower; a faster answer is a valid trajectory (checked above), so Ruckig was not optimal there
        assert ratio <= 1e-7, (pr, traj.duration, ref)
        if ratio < -1e-7:
            faster += 1
            if pr.starts_inside():
                faster_inside.append((pr, traj.duration, ref))
        elif pr.starts_inside():
            worst_inside = max(worst_inside, abs(ratio))
    # from inside starts Ruckig is optimal except in rare degenerate cases; we must equal it everywhere else
    assert len(faster_inside) <= len(problems) // 200, faster_inside
    print(f"seed {seed}: max |T/T_ruckig-1| (inside) = {worst_inside:.3g}; faster than Ruckig: "
          f"{faster} ({len(faster_inside)} from inside); Ruckig failed on {ruckig_failed} (all valid here)")


def test_boundary_states_classified_with_tolerance() -> None:
    """States exactly on a limit (a0 == a_max, v_stop == v_max +- 1 ulp) plan like their neighbours."""
    for a0 in (1.0, np.nextafter(1.0, 2.0), np.nextafter(1.0, 0.0)):
        v0 = 1.0 - a0 * a0 / 2.0
        ref = plan(0.0, v0 - 1e-9, a0, 10.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0).duration
        got = plan(0.0, v0, a0, 10.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)
        assert got.status == 0
        assert abs(got.duration - ref) < 1e-7
