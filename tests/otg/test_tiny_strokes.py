"""Both planners near their resolution: strokes and velocity changes that vanish against the limits' natural scale.

With a small jerk the natural length a³/j² is long, so a stroke of 1e-18..1e-6 of it, or a few times the planner's
documented position resolution, is a plan of vanishing ramps, or of none.  Reversing may be forbidden
(v_min = ±0) with the target just behind the start: the plan is then empty or infeasible, and an empty plan must not
jump from p0 onto pt by more than that resolution (issue 50: p0 = 2e-16, pt = 0, j = 0.125 jumped ten times over).
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from servo_node.otg import Status, plan, plan_velocity

from .reference import Problem, check
from .test_velocity import VArgs, check_velocity

# strategies built once (building them per draw costs hypothesis more than planning and checking do)
mag = st.floats(1e-2, 1e3)
mag_or_none = st.one_of(st.none(), mag)
jerk = st.tuples(st.booleans(), st.floats(1e-3, 1.0))  # (relative to a, fraction)
v_min_kind = st.sampled_from(["+0", "-0", "symmetric", "other"])
ordinary = st.floats(-1e3, 1e3)
base_position = st.one_of(st.just(0.0), ordinary, st.floats(-1e-12, 1e-12))
sign = st.sampled_from([1.0, -1.0])
unit = st.floats(0.0, 1.0)
small = st.one_of(st.none(), st.tuples(sign, unit))  # zero, or a signed point of a decade range


def _decades(x: tuple[float, float] | None, lo: float, hi: float, scale: float) -> float:
    """0 for None, else ±10^(lo..hi) times scale."""
    if x is None:
        return 0.0
    return x[0] * 10.0 ** (lo + x[1] * (hi - lo)) * scale


def _limits(draw: st.DrawFn) -> tuple[float, float, float, float]:
    """a_min, a_max, the larger of the two and a small jerk (absolute 1e-3..1, or 1e-3..1 of it)."""
    a_max = draw(mag)
    other = draw(mag_or_none)
    a_min = -a_max if other is None else -other
    amax = max(a_max, -a_min)
    relative, r = draw(jerk)
    return a_min, a_max, amax, r * amax if relative else r


@st.composite
def tiny_strokes(draw: st.DrawFn) -> Problem:
    """A stroke of 1e-18..1e-6 of a³/j², or 0.1..30 times the position resolution, either way, at small jerk;
    from rest or nearly; reversing allowed or forbidden."""
    a_min, a_max, amax, j_max = _limits(draw)
    v_max = draw(mag)
    kind = draw(v_min_kind)
    v_min = {"+0": 0.0, "-0": -0.0, "symmetric": -v_max}.get(kind) if kind != "other" else -draw(mag)
    assert v_min is not None
    natural = amax**3 / j_max**2
    vu = amax * amax / j_max
    base = draw(base_position)
    # the planner's position resolution (docs/otg.md, the validator's comments) for these limits and positions
    vtol_n = 1.5e-14 * (v_max - v_min) / vu
    resolution = 4.0 * vtol_n**1.5 * natural + 2e-13 * abs(base)
    u = draw(unit)
    d = draw(sign) * (10.0 ** (-18.0 + 12.0 * u) * natural if draw(st.booleans()) else 10.0 ** (-1.0 + 2.5 * u)
                      * resolution)
    p0, pt = (base, base + d) if draw(st.booleans()) else (base - d, base)
    at_rest = draw(st.booleans())
    v0 = 0.0 if at_rest else _decades(draw(small), -20.0, -4.0, vu)
    a0 = 0.0 if at_rest else _decades(draw(small), -12.0, -2.0, amax)
    vt = _decades(draw(small), -20.0, -4.0, vu)
    return Problem(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_strokes())
@example(Problem(2e-16, 0.0, 0.0, 0.0, 0.0, -0.0, 98.0, -1.0, 1.0, 0.125))  # issue 50: jumped 2e-16 at t = 0
def test_tiny_strokes_are_valid_or_honestly_infeasible(pr: Problem) -> None:
    """Status 0 plans pass the validator (continuous within the resolution, the end within its tolerance); status 1
    only where reversing is forbidden and, from rest to rest, only for a target behind the start."""
    traj = plan(*pr.args())
    assert traj.status != Status.NUMERICAL_FAILURE, pr
    if traj.status == Status.INFEASIBLE:
        assert pr.v_min == 0.0, pr
        assert not (pr.v0 == 0.0 and pr.a0 == 0.0 and pr.repaired_vt() == 0.0 and pr.pt >= pr.p0), pr
        return
    errors = check(pr, traj.profile, grid=201)
    assert not errors, (pr, errors)
    p1, v1, a1, _j1 = traj.at(traj.duration + 1.0)
    assert v1 == pr.repaired_vt() and a1 == 0.0
    assert math.isclose(p1, pr.pt + pr.repaired_vt(), rel_tol=1e-12, abs_tol=1e-12)


@st.composite
def tiny_changes(draw: st.DrawFn) -> VArgs:
    """Velocity changes of 1e-20..1e-4 of a²/j at small jerk, from rest or a tiny (or ordinary) velocity."""
    a_min, a_max, amax, j_max = _limits(draw)
    vu = amax * amax / j_max
    p0 = draw(base_position) + _decades(draw(small), -18.0, -6.0, amax**3 / j_max**2)
    v0 = draw(ordinary) if draw(st.booleans()) else _decades(draw(small), -20.0, -4.0, vu)
    vt = (v0 if draw(st.booleans()) else 0.0) + _decades(draw(small), -20.0, -4.0, vu)
    a0 = _decades(draw(small), -12.0, -2.0, amax)
    return p0, v0, a0, vt, a_min, a_max, j_max


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_changes())
def test_tiny_velocity_changes_are_valid(args: VArgs) -> None:
    """The velocity interface on the same family: always status 0, continuous, within the rule, exact at the end."""
    traj = plan_velocity(*args)
    assert traj.status == Status.OK, args
    errors = check_velocity(args, traj.profile)
    assert not errors, (args, errors)
