"""Hypothesis properties over the whole input space, degenerate corners included, plus the API contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from numba import njit

from servo_node.otg import (
    PROFILE_SIZE,
    Status,
    fast_plan_into,
    new_profile,
    plan,
    plan_batch,
    plan_into,
    profile_duration,
    sample_batch,
    sample_into,
)

from .reference import Problem, check

mag = st.floats(1e-2, 1e3)
pos = st.one_of(st.just(0.0), st.floats(-1e3, 1e3), st.floats(-1e-3, 1e-3))


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    """Any valid problem: starts inside or outside, vt anywhere (repaired), zero moves, limits at extremes."""
    v_max = draw(mag)
    v_min = -draw(st.one_of(st.just(v_max), st.just(0.0), mag))
    a_max = draw(mag)
    a_min = -draw(st.one_of(st.just(a_max), mag))
    j_max = draw(mag)
    p0 = draw(pos)
    pt = draw(st.one_of(st.just(p0), pos, st.builds(lambda d: p0 + d, st.floats(-1e-3, 1e-3))))
    v0 = draw(st.one_of(st.just(0.0), st.just(v_max), st.just(v_min), st.floats(v_min * 1.5, v_max * 1.5)))
    a0 = draw(st.one_of(st.just(0.0), st.just(a_max), st.just(a_min), st.floats(-1.5 * a_max, 1.5 * a_max)))
    vt = draw(st.one_of(st.just(0.0), st.just(v_max), st.just(v_min), st.floats(-2 * v_max, 2 * v_max)))
    return Problem(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
@example(Problem(0.0, 0.0, 0.0, 0.0, 1e-10, -0.0, 1.0, -23.0, 23.0, 1.0))  # short by noise only (found by CI)
@example(Problem(0.0, 0.0, -609.0, 0.0, 0.0625, -0.0625, 0.0625, -609.0, 0.03125, 0.03125))  # T = 9e15 s (CI)
@example(Problem(0.0, 0.0, 888.0, 0.0, 0.0, -1.0, 1.0, -0.03125, 888.0, 0.015625))  # rule broken at T = 1e16 s (CI)
@example(Problem(0.0, 0.0, 957.25, 0.0, 0.0, -352.0, 352.0, -0.01, 957.25, 3.0))  # plateau residue, T = 3e9 s (CI)
@example(Problem(0.0, 0.0, 372.88976114060563, 0.0, 0.0, -0.01, 0.01, -372.88976114060563, 372.88976114060563,
                 0.01))  # a brake to v = 3.5e6, where a velocity is known to 5e-10
@example(Problem(2e-16, 0.0, 0.0, 0.0, 0.0, -0.0, 98.0, -1.0, 1.0, 0.125))  # empty plan jumped 10x the resolution
def test_every_plan_is_valid_or_honestly_infeasible(pr: Problem) -> None:
    """Status 0 plans obey every limit, the rule and reach the (repaired) target; status 1 only if reversing is
    forbidden (v_min == 0); never a numerical failure."""
    traj = plan(*pr.args())
    assert traj.status != Status.NUMERICAL_FAILURE, pr
    if traj.status == Status.INFEASIBLE:
        assert pr.v_min == 0.0, pr
        return
    assert traj.repaired == (pr.repaired_vt() != pr.vt)
    errors = check(pr, traj.profile, grid=401)
    assert not errors, (pr, errors)
    # the continuation after the end: v = vt, a = 0, over the step a float time can take (none past ~9e15 s)
    after = traj.duration + 1.0
    p1, v1, a1, j1 = traj.at(after)
    assert v1 == pr.repaired_vt() and a1 == 0.0 and j1 == 0.0
    assert math.isclose(p1, pr.pt + pr.repaired_vt() * (after - traj.duration), rel_tol=1e-12, abs_tol=1e-12)


def test_degenerate_cases() -> None:
    """Already at the target: zero duration; zero-length move with speed: a valid out-and-back; vt at its limit."""
    assert plan(1.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0).duration == 0.0
    t = plan(0.0, 1.0, 0.0, 0.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)
    assert t.status == 0 and t.duration > 0.0
    assert not check(Problem(0.0, 1.0, 0.0, 0.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0), t.profile)
    t = plan(0.0, 0.0, 0.0, 5.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0)
    assert t.status == 0 and t.at(t.duration)[1] == 1.0
    for big in (1e-6, 1e6):
        pr = Problem(0.0, 0.0, 0.0, big, 0.0, -big, big, -big, big, big)
        assert not check(pr, plan(*pr.args()).profile)


def test_invalid_inputs_give_status_1() -> None:
    """Non-finite inputs and wrong-sign limits are status 1, never an exception."""
    good = [0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0]
    for i in range(10):
        for bad in (math.nan, math.inf):
            args = list(good)
            args[i] = bad
            assert plan(*args).status == Status.INFEASIBLE
    for i, bad in ((5, 0.5), (6, 0.0), (7, 0.0), (8, 0.0), (9, 0.0), (9, -1.0)):
        args = list(good)
        args[i] = bad
        assert plan(*args).status == Status.INFEASIBLE


def test_repair_flag() -> None:
    """A vt pointing away from the target or beyond a limit is repaired to the nearest feasible value."""
    t = plan(0.0, 0.0, 0.0, 1.0, -0.5, -1.0, 1.0, -1.0, 1.0, 1.0)
    assert t.status == 0 and t.repaired and t.at(t.duration)[1] == 0.0
    t = plan(0.0, 0.0, 0.0, 10.0, 5.0, -1.0, 1.0, -1.0, 1.0, 1.0)
    assert t.status == 0 and t.repaired and t.at(t.duration)[1] == 1.0


def test_batch_matches_single_and_broadcasts() -> None:
    """plan_batch broadcasts scalars and agrees with plan; sample_batch agrees with Trajectory.at."""
    rng = np.random.default_rng(3)
    pt = rng.uniform(-5, 5, 64)
    profiles, durations, statuses, repaired = plan_batch(0.0, 0.0, 0.0, pt, 0.0, -1.0, 2.0, -1.5, 1.0, 3.0)
    assert profiles.shape == (64, PROFILE_SIZE) and not statuses.any() and not repaired.any()
    times = rng.uniform(0, 10, (64, 5))
    p, v, a, j = sample_batch(profiles, times)
    for i in (0, 17, 63):
        t = plan(0.0, 0.0, 0.0, pt[i], 0.0, -1.0, 2.0, -1.5, 1.0, 3.0)
        assert t.duration == durations[i]
        assert t.at(times[i, 2]) == (p[i, 2], v[i, 2], a[i, 2], j[i, 2])


def test_batch_plans_again_into_the_arrays_it_returned() -> None:
    """plan_batch(out=...) plans into an earlier result's arrays: the same objects, the results of a fresh call;
    arrays for another number of problems, or of another type, are refused before anything is written."""
    rng = np.random.default_rng(4)
    first = plan_batch(0.0, 0.0, 0.0, rng.uniform(-5, 5, 32), 0.0, -1.0, 2.0, -1.5, 1.0, 3.0)
    pt = rng.uniform(-5, 5, 32)
    again = plan_batch(0.0, 0.5, 0.0, pt, 0.0, -1.0, 2.0, -1.5, 1.0, 3.0, out=first)
    fresh = plan_batch(0.0, 0.5, 0.0, pt, 0.0, -1.0, 2.0, -1.5, 1.0, 3.0)
    assert all(a is b for a, b in zip(again, first, strict=True))
    for a, b in zip(again[1:], fresh[1:], strict=True):  # durations, statuses, repaired
        np.testing.assert_array_equal(a, b)
    times = rng.uniform(0, 10, (32, 7))  # the profiles: the same motion (the phases not in use are not written)
    np.testing.assert_array_equal(sample_batch(again[0], times), sample_batch(fresh[0], times))
    kept = [a.copy() for a in first]
    for bad in (plan_batch(0.0, 0.0, 0.0, pt[:31], 0.0, -1.0, 2.0, -1.5, 1.0, 3.0),
                (first[0], first[1].astype(np.float32), first[2], first[3]), first[:3]):
        with pytest.raises(ValueError, match="what plan_batch returned for 32 problems"):
            plan_batch(0.0, 0.0, 0.0, pt, 0.0, -1.0, 2.0, -1.5, 1.0, 3.0, out=bad)  # type: ignore[arg-type]
    for a, b in zip(first, kept, strict=True):
        np.testing.assert_array_equal(a, b)


@njit(cache=False, nogil=True)
def _loop_in_numba(profile, out) -> float:  # type: ignore[no-untyped-def]
    """The kernels called from other numba code (as the control loop does)."""
    plan_into(0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0, profile)
    sample_into(profile, 1.0, out)
    return profile_duration(profile)


def test_kernels_callable_from_numba() -> None:
    """plan_into / sample_into / profile_duration compose inside an njit function."""
    profile = np.zeros(PROFILE_SIZE)
    out = np.zeros(4)
    assert abs(_loop_in_numba(profile, out) - plan(0, 0, 0, 1, 0, -1, 1, -1, 1, 1).duration) == 0.0
    assert out[3] != 0.0


def test_fast_plan_into_matches_plan() -> None:
    """The dispatch-free entry point plans bit for bit like plan_into (ints accepted for the scalars)."""
    fast = fast_plan_into()
    assert fast_plan_into() is fast
    rng = np.random.default_rng(5)
    prof = new_profile()
    assert prof.shape == (PROFILE_SIZE,) and prof.dtype == np.float64 and prof.flags.c_contiguous
    for _ in range(200):
        args = (float(rng.uniform(-1, 1)), float(rng.uniform(-1, 1)), float(rng.uniform(-0.5, 0.5)),
                float(rng.uniform(-3, 3)), 0.0, -1.5, 1.0, -float(rng.uniform(0.3, 3)), 1.0, 2.0)
        assert fast(*args, prof) == 0
        used = 8 + 5 * int(prof[2])  # header and the phases in use (slots past them are scratch)
        assert np.array_equal(prof[:used], plan(*args).profile[:used])
    assert fast(0, 0, 0, 1, 0, -1, 1, -1, 1, 1, prof) == 0
    assert prof[3] == plan(0, 0, 0, 1, 0, -1, 1, -1, 1, 1).duration
