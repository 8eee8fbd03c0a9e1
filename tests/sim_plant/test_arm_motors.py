"""Webots motors on the coupled arm: velocity and position control through gravity and coupling, saturation,
force control and the passive arm equal to :func:`sim_plant.arm.simulate`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_plant import arm
from sim_plant.arm import ArmParams
from sim_plant.arm_motors import ArmMotor, ArmPlant, _box2

P = ArmParams()
HORIZONTAL = (0.0, math.pi / 2, 0.0)


def test_velocity_control_reaches_every_commanded_velocity_despite_gravity_and_coupling() -> None:
    a = ArmPlant(P, position=(0.0, 1.0, 0.5))
    for i, v in enumerate((0.5, -0.3, 0.2)):
        a.set_position(i, math.inf)
        a.set_velocity(i, v)
        a.set_motor_force(i, 20.0)
    for _ in range(200):
        a.step(1e-3)
    np.testing.assert_allclose(a.velocities, [0.5, -0.3, 0.2], atol=1e-4)
    assert np.abs(a.motor_force_feedbacks).max() < 20.0  # not saturated: the constraint holds


def test_position_control_holds_the_horizontal_arm_with_the_gravity_torques() -> None:
    a = ArmPlant(P, position=HORIZONTAL)
    for i, t in enumerate(HORIZONTAL):
        a.set_position(i, t)
        a.set_motor_force(i, 20.0)
    for _ in range(1000):
        a.step(1e-3)
    np.testing.assert_allclose(a.positions, HORIZONTAL, atol=1e-9)
    np.testing.assert_allclose(a.motor_force_feedbacks, arm.gravity(P, HORIZONTAL), rtol=1e-6, atol=1e-9)


def test_a_motor_weaker_than_the_load_saturates_and_the_arm_sags() -> None:
    a = ArmPlant(P, [ArmMotor(), ArmMotor(max_force=5.0), ArmMotor()], position=HORIZONTAL)
    for i, t in enumerate(HORIZONTAL):
        a.set_position(i, t)
        a.set_motor_force(i, 20.0)
    for _ in range(200):
        a.step(1e-3)
    assert a.motor_force_feedbacks[1] == pytest.approx(-5.0)  # at its limit, holding back
    assert a.positions[1] > math.pi / 2 + 0.1  # falling outward


def test_passive_and_force_control_equal_the_held_torque_simulation() -> None:
    """Motor off (the start) is the zero-input arm; force control holds its torques: both equal simulate() with
    the same held torques, bit for bit (the same RK4 at 1 ms)."""
    a = ArmPlant(P, position=(0.0, 0.5, 1.0))
    a.state[3:] = [1.0, 0.5, -0.5]
    for _ in range(1000):
        a.step(1e-3)
    _, q, w, _ = arm.simulate(P, "pd", [0.0, 0.5, 1.0], [1.0, 0.5, -0.5], [0.0] * 3, 1.0, 1e-3, kp=0.0, kd=0.0)
    assert np.array_equal(a.positions, q[-1]) and np.array_equal(a.velocities, w[-1])
    b = ArmPlant(P, position=HORIZONTAL)
    for i, t in enumerate(arm.gravity(P, HORIZONTAL)):
        b.set_force(i, t)
    for _ in range(500):
        b.step(1e-3)
    np.testing.assert_allclose(b.positions, HORIZONTAL, atol=1e-12)  # exactly its holding torques: no motion
    assert not b.motor_force_feedbacks.any()


def test_a_long_step_is_substepped() -> None:
    """One 10 ms step equals ten 1 ms steps."""
    a, b = ArmPlant(P, position=(0.0, 0.5, 1.0)), ArmPlant(P, position=(0.0, 0.5, 1.0))
    for plant in (a, b):
        plant.set_position(1, 0.8)
        plant.set_motor_force(1, 20.0)
    a.step(0.01)
    for _ in range(10):
        b.step(0.001)
    np.testing.assert_allclose(a.state, b.state, rtol=1e-12, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.1, 5.0), st.floats(-0.9, 0.9), st.floats(0.1, 5.0), st.floats(-20.0, 20.0), st.floats(-20.0, 20.0),
       st.floats(0.0, 10.0), st.floats(0.0, 10.0))
def test_box_solver_is_optimal(h11: float, c: float, h22: float, r1: float, r2: float, f1: float,
                               f2: float) -> None:
    """The 2×2 box-constrained minimum is feasible and no point of a fine grid of the box is better."""
    h12 = c * math.sqrt(h11 * h22)
    u1, u2 = _box2(h11, h12, h22, r1, r2, f1, f2)
    assert abs(u1) <= f1 + 1e-12 and abs(u2) <= f2 + 1e-12

    def cost(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 0.5 * (h11 * x * x + 2 * h12 * x * y + h22 * y * y) - r1 * x - r2 * y

    gx, gy = np.meshgrid(np.linspace(-f1, f1, 81), np.linspace(-f2, f2, 81))
    assert cost(np.array(u1), np.array(u2)) <= cost(gx, gy).min() + 1e-9


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_force"):
        ArmMotor(max_force=-1.0)
    with pytest.raises(ValueError, match="three motors"):
        ArmPlant(P, [ArmMotor()])
    with pytest.raises(IndexError):
        ArmPlant(P).set_position(3, 0.0)
    with pytest.raises(ValueError, match="dt"):
        ArmPlant(P).step(0.0)
