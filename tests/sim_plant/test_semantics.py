"""Webots Servo semantics: limits, stops, friction, controller caps, force feedback, validation, numba API."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from sim_plant import Joint, JointArray, JointParams
from sim_plant import _kernels as k


def run(j: Joint, seconds: float, dt: float = 0.001) -> list[tuple[float, float, float]]:
    """Step j for `seconds`, returning (position, velocity, feedback) after each step."""
    out = []
    for _ in range(round(seconds / dt)):
        j.step(dt)
        out.append((j.position, j.velocity, j.motor_force_feedback))
    return out


def test_hard_stop_is_never_passed_and_holds_the_joint() -> None:
    j = Joint(JointParams(max_force=1000.0, min_stop=-0.2, max_stop=0.5))
    j.set_force(1000.0)
    trace = run(j, 1.0)
    assert max(q for q, _, _ in trace) <= 0.5
    assert j.position == 0.5 and j.velocity == 0.0
    j.set_force(-1000.0)
    trace = run(j, 1.0)
    assert min(q for q, _, _ in trace) >= -0.2
    assert j.position == -0.2


def test_motor_stalls_against_hard_stop_with_full_force_feedback() -> None:
    j = Joint(JointParams(max_force=3.0, max_stop=0.1, min_stop=-1.0))
    j.set_position(1.0)
    run(j, 1.0)
    assert j.position == 0.1
    assert j.motor_force_feedback == pytest.approx(3.0)


def test_soft_limits_clip_the_target() -> None:
    j = Joint(JointParams(max_force=1000.0, min_position=-0.3, max_position=0.4))
    j.set_position(2.0)
    run(j, 2.0)
    assert j.position == pytest.approx(0.4, abs=1e-6)
    j.set_position(-5.0)
    run(j, 2.0)
    assert j.position == pytest.approx(-0.3, abs=1e-6)
    j.set_velocity(1.0)
    j.set_position(math.inf)  # velocity control also stops at the soft limit
    run(j, 3.0)
    assert j.position == pytest.approx(0.4, abs=1e-6)


def test_static_friction_holds_below_breakaway_and_releases_above() -> None:
    j = Joint(JointParams(inertia=2.0, max_force=10.0, static_friction=2.0))
    j.set_force(1.9)
    run(j, 1.0)
    assert j.position == 0.0 and j.velocity == 0.0
    j.set_force(2.5)
    run(j, 1.0)
    # slides with the kinetic (Coulomb) friction of the same magnitude: a = (2.5 − 2) / 2
    assert j.velocity == pytest.approx(0.25, rel=1e-6)
    assert j.position == pytest.approx(0.125, rel=1e-2)


def test_static_friction_brakes_a_passive_joint() -> None:
    """A passive joint moving at 1 m/s under 2 N of friction and a 1 kg mass stops after 0.5 s."""
    j = Joint(JointParams(kind="linear", inertia=1.0, max_force=10.0, static_friction=2.0))
    j.set_force(0.0)
    j._state[0, k.S_VELOCITY] = 1.0
    run(j, 0.25)
    assert j.velocity == pytest.approx(0.5, abs=1e-9)
    run(j, 0.5)
    assert j.velocity == 0.0
    assert j.position == pytest.approx(0.25, abs=1e-3)


def test_spring_below_static_friction_does_not_move_the_joint() -> None:
    j = Joint(JointParams(spring_constant=10.0, position=0.1, max_force=0.0, static_friction=1.5))
    run(j, 1.0)
    assert j.position == 0.1
    j2 = Joint(JointParams(spring_constant=10.0, position=0.2, max_force=0.0, static_friction=1.5))
    run(j2, 0.1)
    assert j2.position < 0.2


def test_p_controller_respects_velocity_and_acceleration_caps() -> None:
    """Vc = P·(Pt − q) clipped to Vd, its change limited to A per second; a strong motor follows Vc exactly."""
    j = Joint(JointParams(max_force=1e4, max_velocity=5.0, control_p=10.0, acceleration=4.0))
    j.set_velocity(2.0)
    j.set_position(3.0)
    trace = run(j, 4.0)
    v = np.array([t[1] for t in trace])
    assert np.max(np.abs(v)) <= 2.0 + 1e-12
    assert np.max(np.abs(np.diff(v))) <= 4.0 * 0.001 + 1e-12
    assert v[249] == pytest.approx(4.0 * 0.25, abs=1e-9)  # ramping at A
    assert v[999] == pytest.approx(2.0, abs=1e-9)  # cruising at Vd
    assert j.position == pytest.approx(3.0, abs=1e-4)


def test_set_velocity_is_clipped_to_max_velocity() -> None:
    j = Joint(JointParams(max_force=1e4, max_velocity=1.5))
    j.set_velocity(7.0)
    j.set_position(math.inf)
    run(j, 0.5)
    assert j.velocity == pytest.approx(1.5, abs=1e-9)


@pytest.mark.parametrize(("target", "velocity"), [(math.inf, -2.0), (-math.inf, 2.0)])
def test_velocity_control_reaches_and_holds_the_set_velocity(target: float, velocity: float) -> None:
    j = Joint(JointParams(max_force=5.0, damping_constant=0.5, acceleration=10.0))
    j.set_position(target)
    j.set_velocity(velocity)
    trace = run(j, 2.0)
    assert all(abs(v + 2.0) < 1e-9 for _, v, _ in trace[500:])
    # force feedback is the motor force in use: it balances the damper at steady state
    assert j.motor_force_feedback == pytest.approx(-1.0, rel=1e-9)  # −B·v = +1 from the damper


def test_force_feedback_equals_saturated_motor_force() -> None:
    j = Joint(JointParams(inertia=0.5, max_force=4.0, max_velocity=100.0))
    j.set_motor_force(2.0)
    j.set_position(math.inf)
    j.set_velocity(50.0)
    trace = run(j, 1.0)
    assert all(fb == pytest.approx(2.0) for _, _, fb in trace)
    assert j.velocity == pytest.approx(2.0 / 0.5 * 1.0, rel=1e-9)
    j.set_motor_force(100.0)  # clipped to max_force
    run(j, 0.1)
    assert j.motor_force_feedback == pytest.approx(4.0)


def test_set_force_is_clipped_switches_motor_off_and_set_position_restores() -> None:
    j = Joint(JointParams(inertia=1.0, max_force=3.0))
    j.set_force(10.0)
    trace = run(j, 1.0)
    assert j.velocity == pytest.approx(3.0, rel=1e-9)  # 10 clipped to 3
    assert all(fb == 0.0 for _, _, fb in trace)  # feedback excludes set_force
    j.set_position(0.0)
    j.step(0.001)
    assert j.motor_force_feedback == pytest.approx(-3.0)  # the motor is back on, braking with all it has
    assert j.velocity == pytest.approx(3.0 - 0.003, rel=1e-9)


def test_passive_joint_with_zero_motor_force() -> None:
    j = Joint(JointParams(max_force=0.0, load=2.0, inertia=4.0))
    j.set_position(-1.0)
    run(j, 1.0)
    assert j.velocity == pytest.approx(0.5, rel=1e-9)
    assert j.motor_force_feedback == 0.0


def test_gravity_load_pendulum_small_oscillation_period() -> None:
    """gravity_load G·sin(q) with G = −m·g·l hangs down: small swings have period 2π·sqrt(J/m·g·l)."""
    mgl, inertia = 4.0, 1.0
    j = Joint(JointParams(max_force=0.0, inertia=inertia, gravity_load=-mgl, position=0.01))
    trace = run(j, 10.0)
    crossings = [n for n in range(1, len(trace)) if trace[n - 1][0] > 0.0 >= trace[n][0]]
    period = (crossings[-1] - crossings[0]) / (len(crossings) - 1) * 0.001
    assert period == pytest.approx(2.0 * math.pi * math.sqrt(inertia / mgl), rel=2e-3)


def test_acceleration_is_reported() -> None:
    j = Joint(JointParams(max_force=0.0, load=3.0, inertia=2.0))
    j.step(0.01)
    assert j.acceleration == pytest.approx(1.5)


def test_motor_joint_carrying_spring_damper_joint() -> None:
    """Accelerating the carrier at A deflects the carried spring by −J_c·A/K and needs (J_p + J_c)·A."""
    parent = JointParams(inertia=1.0, max_force=100.0, acceleration=2.0, max_velocity=10.0)
    child = JointParams(inertia=0.5, max_force=0.0, spring_constant=400.0, damping_constant=40.0)
    arr = JointArray([parent, child], parents=[-1, 0])
    arr.set_velocity(0, 4.0)
    arr.set_position(0, math.inf)
    for _ in range(1000):
        arr.step(0.001)
    assert arr.velocities[0] == pytest.approx(2.0, rel=1e-9)  # exact velocity constraint
    assert arr.positions[1] == pytest.approx(-0.5 * 2.0 / 400.0, rel=1e-3)
    assert arr.motor_force_feedbacks[0] == pytest.approx(1.5 * 2.0, rel=1e-3)
    assert arr.motor_force_feedbacks[1] == 0.0
    for _ in range(3000):
        arr.step(0.001)
    assert arr.velocities[0] == pytest.approx(4.0, rel=1e-9)
    assert abs(arr.positions[1]) < 1e-6 and abs(arr.motor_force_feedbacks[0]) < 1e-3


def test_independent_joints_in_an_array_match_single_joints() -> None:
    ps = [JointParams(spring_constant=float(i), damping_constant=0.1 * i, position=0.1 * i) for i in range(5)]
    arr = JointArray(ps)
    singles = [Joint(p) for p in ps]
    for i, s in enumerate(singles):
        arr.set_position(i, -0.5 + 0.2 * i)
        s.set_position(-0.5 + 0.2 * i)
    for _ in range(300):
        arr.step(0.002)
        for s in singles:
            s.step(0.002)
    assert np.array_equal(arr.positions, [s.position for s in singles])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("inertia", -1.0),
        ("inertia", 0.0),
        ("min_stop", 0.1),
        ("max_stop", -0.1),
        ("max_force", -1.0),
        ("max_velocity", math.nan),
        ("spring_constant", math.inf),
        ("damping_constant", -0.5),
        ("static_friction", -0.1),
        ("control_p", -2.0),
        ("acceleration", -0.5),
        ("position", math.nan),
        ("load", math.inf),
    ],
)
def test_invalid_parameters_raise_value_error_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        JointParams(**{field: value})  # type: ignore[arg-type]


def test_other_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="kind"):
        JointParams(kind="prismatic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_position"):
        JointParams(min_position=1.0, max_position=0.5)
    with pytest.raises(ValueError, match="position"):
        JointParams(min_stop=-0.1, max_stop=0.1, position=0.5)
    with pytest.raises(ValueError, match="parents"):
        JointArray([JointParams()] * 3, parents=[-1, 0, 1])
    with pytest.raises(ValueError, match="dt"):
        Joint(JointParams()).step(-0.1)
    with pytest.raises(ValueError, match="force"):
        Joint(JointParams()).set_force(math.nan)


@njit(nogil=True)
def _numba_control_loop(params: np.ndarray, state: np.ndarray, ticks: int) -> float:
    """What the servo node's nogil loop does each 1 kHz tick: command, step, read."""
    for n in range(ticks):
        if n < ticks // 2:
            k.command_velocity(params, state, 0, 1.5)
        else:
            k.command_force(params, state, 0, -2.0)
        k.command_motor_force(params, state, 0, 5.0)
        k.step_joints(params, state, 0.001)
    return state[0, k.S_POSITION]


def test_kernels_are_callable_from_other_numba_code() -> None:
    arr = JointArray([JointParams(inertia=1.0, max_force=10.0)])
    position = _numba_control_loop(arr.params, arr.state, 1000)
    # 0.3 s accelerating at Fm/J = 5 to 1.5, 0.2 s at 1.5, then 0.5 s decelerating at 2 (force control)
    assert position == pytest.approx(0.5 * 5.0 * 0.3**2 + 1.5 * 0.2 + (1.5 * 0.5 - 0.5 * 2.0 * 0.25), abs=1e-9)
    assert arr.velocities[0] == pytest.approx(0.5, abs=1e-9)
