"""``Planner``: the reusable planner object plans bit for bit like ``plan()``/``plan_velocity()`` and reuses its
trajectory (no timing assertions here; bench/otg.py measures the speed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servo_node.otg import Planner, Status, Trajectory, fast_plan_velocity_into, plan, plan_velocity
from servo_node.otg._profile import COUNT, HEADER, PHASE_STRIDE

from .problems import problem_set
from .test_velocity import random_velocity_problem


def _used(traj: Trajectory) -> np.ndarray:
    """Header and the phases in use (slots past them are scratch of earlier plans)."""
    return traj.profile[:HEADER + PHASE_STRIDE * int(traj.profile[COUNT])]


def _assert_same(got: Trajectory, ref: Trajectory) -> None:
    assert got.status == ref.status and got.repaired == ref.repaired
    assert np.array_equal(_used(got), _used(ref)), (got, ref)
    for t in (0.0, 0.37 * ref.duration, ref.duration, ref.duration + 1.0):
        assert got.at(t) == ref.at(t)


@pytest.mark.parametrize(("seed", "symmetric", "outside"), [(1, True, 0.3), (11, False, 0.0), (41, False, 0.3)])
def test_planner_plan_equals_plan(seed: int, symmetric: bool, outside: float) -> None:
    """Same profiles (bit for bit), statuses, flags and samples as plan() on the test problem sets, one planner
    reused for all of them (a shorter plan after a longer one leaves no trace)."""
    planner = Planner()
    for pr in problem_set(seed, 400, symmetric=symmetric, outside_fraction=outside):
        traj = planner.plan(*pr.args())
        _assert_same(traj, plan(*pr.args()))


def test_planner_plan_velocity_equals_plan_velocity() -> None:
    """The velocity method agrees bit for bit with plan_velocity(), interleaved with position plans."""
    rng = np.random.default_rng(8)
    planner = Planner()
    for i in range(300):
        args = random_velocity_problem(rng, symmetric=i % 2 == 0, outside=i % 5 == 0)
        _assert_same(planner.plan_velocity(*args), plan_velocity(*args))
        planner.plan(0.0, 0.0, 0.0, 1.0 + i, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)
    assert fast_plan_velocity_into() is fast_plan_velocity_into()


def test_planner_returns_its_own_reused_trajectory() -> None:
    """The returned trajectory is the planner's, overwritten by the next call; copies stay independent."""
    planner = Planner()
    first = planner.plan(0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)
    kept = Trajectory(first.profile.copy())
    second = planner.plan(0.0, 0.0, 0.0, 5.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)
    assert second is first is planner.trajectory
    assert first.duration == plan(0.0, 0.0, 0.0, 5.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0).duration
    assert kept.duration == plan(0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0).duration
    assert Planner().trajectory is not planner.trajectory


def test_planner_status_and_int_arguments() -> None:
    """Status is an IntEnum read lazily from the profile; ints are accepted; invalid input gives INFEASIBLE."""
    planner = Planner()
    traj = planner.plan(0, 0, 0, 1, 0, -1, 1, -1, 1, 1)
    assert traj.status is Status.OK and traj.duration == plan(0, 0, 0, 1, 0, -1, 1, -1, 1, 1).duration
    assert planner.plan(0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, math.nan).status is Status.INFEASIBLE
    assert planner.plan_velocity(0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0).status is Status.INFEASIBLE
