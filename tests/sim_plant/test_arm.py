"""The coupled arm: its A, C and g against an independent Euler–Lagrange derivation, energy, the control laws.

References: ``arm_reference`` (sympy, from 3-D link kinematics) and scipy's ``solve_ivp`` at rtol 1e-10.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_plant import arm
from sim_plant.arm import ArmParams

DEFAULT = ArmParams()
angle = st.floats(-math.pi, math.pi)
rate = st.floats(-6.0, 6.0)
poses = st.tuples(angle, angle, angle).map(np.array)
rates = st.tuples(rate, rate, rate).map(np.array)


@st.composite
def arm_params(draw: st.DrawFn) -> ArmParams:
    """Random valid arms (some without a hand mass, some with thin links)."""
    l1, l2 = draw(st.floats(0.1, 0.6)), draw(st.floats(0.1, 0.6))
    inertia = st.floats(0.0, 0.05)
    return ArmParams(
        g=draw(st.floats(0.0, 20.0)), base_inertia=draw(st.floats(1e-3, 0.1)),
        upper_mass=draw(st.floats(0.1, 3.0)), upper_length=l1, upper_com=draw(st.floats(0.01, l1)),
        upper_inertia=(draw(inertia), draw(inertia), draw(inertia)),
        fore_mass=draw(st.floats(0.1, 3.0)), fore_length=l2, fore_com=draw(st.floats(0.01, l2)),
        fore_inertia=(draw(inertia), draw(inertia), draw(inertia)),
        hand_mass=draw(st.floats(0.0, 2.0)), hand_distance=draw(st.floats(0.0, 0.6)),
    )


any_arm = st.one_of(st.just(DEFAULT), arm_params())


@settings(max_examples=60, deadline=None)
@given(any_arm, poses)
def test_mass_matrix_is_symmetric_positive_definite(p: ArmParams, q: np.ndarray) -> None:
    a = arm.mass_matrix(p, q)
    assert np.array_equal(a, a.T)
    assert np.linalg.eigvalsh(a).min() > 0.0
    np.linalg.cholesky(a)


@settings(max_examples=60, deadline=None)
@given(any_arm, poses, rates)
def test_a_c_g_and_energy_equal_the_symbolic_euler_lagrange_model(p: ArmParams, q: np.ndarray, w: np.ndarray) -> None:
    """A, C, g and the energy equal sympy's derivation from the links' 3-D kinematics to 1e-9 (relative to ≥ 1)."""
    # sympy (and scipy below): imported where used, not in every worker's collection (0.9 s of CPU each).
    from tests.sim_plant.arm_reference import reference_terms

    a_ref, c_ref, g_ref, e_ref = reference_terms(p, q, w)
    np.testing.assert_allclose(arm.mass_matrix(p, q), a_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(arm.velocity_terms(p, q, w), c_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(arm.gravity(p, q), g_ref, rtol=1e-9, atol=1e-9)
    assert arm.energy(p, q, w) == pytest.approx(e_ref, rel=1e-9, abs=1e-9)


def _passive_energy_error(q0: list[float], w0: list[float], dt: float) -> tuple[np.ndarray, np.ndarray]:
    """(t, E(t) − E(0)) of the arm without input over 5 s (the "pd" law with zero gains is no input)."""
    t, q, w, tau = arm.simulate(DEFAULT, "pd", q0, w0, [0.0, 0.0, 0.0], 5.0, dt, kp=0.0, kd=0.0)
    assert not tau.any()
    e = np.array([arm.energy(DEFAULT, q[i], w[i]) for i in range(len(t))])
    return t, e - e[0]


def test_passive_arm_keeps_its_energy_without_trend() -> None:
    """Swinging about the hanging pose while turning (E = −4.8 J, zero at the shoulder's height; up to 13 rad/s),
    RK4 at 1 ms over 5 s: |ΔE| < 2e-9 J (measured 1.26e-9 J), and a straight line fitted to ΔE(t) accounts for
    < 20 % of that over the 5 s (measured 1.2e-10 J): no trend, the error oscillates with the motion."""
    t, de = _passive_energy_error([0.0, 2.0, 0.5], [0.3, 0.2, 0.0], 1e-3)
    assert np.abs(de).max() < 2e-9
    slope = np.polyfit(t, de, 1)[0]
    assert abs(slope) * 5.0 < 0.2 * np.abs(de).max()


def test_violent_passive_motion_loses_energy_only_at_the_integrators_order() -> None:
    """Falling from near the top and spinning up to 49 rad/s, RK4 at 1 ms does drift (2.5e-6 J of 6.2 J); halving
    the step divides the drift by ≥ 10 (fourth order): the model itself conserves energy."""
    coarse = np.abs(_passive_energy_error([0.0, 0.5, 1.0], [1.0, 0.5, -0.5], 1e-3)[1]).max()
    fine = np.abs(_passive_energy_error([0.0, 0.5, 1.0], [1.0, 0.5, -0.5], 5e-4)[1]).max()
    assert coarse < 5e-6
    assert fine < coarse / 10.0


def test_continuous_computed_torque_from_rest_is_critically_damped() -> None:
    """From rest at q = 0 to (1, 1, 1): every joint's error is (1 + 6t)·e^(−6t) to 1e-4 (measured ~1e-11)."""
    t, q, _, _ = arm.simulate(DEFAULT, "ct", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 3.0, 1e-3)
    closed = (1.0 + 6.0 * t) * np.exp(-6.0 * t)
    assert np.abs((1.0 - q) - closed[:, None]).max() < 1e-4


def test_continuous_computed_torque_from_a_moving_start_follows_the_closed_form() -> None:
    """e(t) = (e0 + (ė0 + 6·e0)·t)·e^(−6t) with ė0 = −q̇0, per joint, to 1e-4."""
    q0, w0, qd = np.array([0.2, -0.3, 0.5]), np.array([1.0, -2.0, 0.5]), np.array([1.0, 1.0, 1.0])
    t, q, _, _ = arm.simulate(DEFAULT, "ct", q0, w0, qd, 3.0, 1e-3)
    e0, de0 = qd - q0, -w0
    closed = (e0 + (de0 + 6.0 * e0) * t[:, None]) * np.exp(-6.0 * t)[:, None]
    assert np.abs((qd - q) - closed).max() < 1e-4


def _sampled_reference(p: ArmParams, law: str, q0: np.ndarray, qd: np.ndarray, t_end: float,
                       period: float) -> np.ndarray:
    """State at every control instant: the law sampled and held, each hold interval integrated by DOP853."""
    from scipy.integrate import solve_ivp

    x = np.concatenate([q0, np.zeros(3)])
    out = [x]
    for _ in range(round(t_end / period)):
        q, w = x[:3], x[3:]
        v = 36.0 * (qd - q) - 12.0 * w
        tau = {"ct": arm.mass_matrix(p, q) @ v + arm.velocity_terms(p, q, w) + arm.gravity(p, q),
               "pdg": v + arm.gravity(p, q), "pd": v}[law]

        def rhs(_t: float, s: np.ndarray, tau: np.ndarray = tau) -> np.ndarray:
            acc = np.linalg.solve(arm.mass_matrix(p, s[:3]),
                                  tau - arm.velocity_terms(p, s[:3], s[3:]) - arm.gravity(p, s[:3]))
            return np.concatenate([s[3:], acc])

        x = solve_ivp(rhs, (0.0, period), x, method="DOP853", rtol=1e-10, atol=1e-12).y[:, -1]
        out.append(x)
    return np.array(out)


@pytest.mark.parametrize("law", ["ct", "pdg"])
def test_sampled_law_at_1ms_matches_an_independent_integration(law: arm.Law) -> None:
    """Zero-order hold at 1 ms over 1.5 s: our RK4 equals solve_ivp (rtol 1e-10) of the same held law to 1e-4."""
    q0, qd = np.array([0.0, 0.0, 0.0]), np.array([1.0, 1.0, 1.0])
    _, q, w, _ = arm.simulate(DEFAULT, law, q0, [0.0, 0.0, 0.0], qd, 1.5, 1e-3, control_period=1e-3)
    ref = _sampled_reference(DEFAULT, law, q0, qd, 1.5, 1e-3)
    assert np.abs(q - ref[:, :3]).max() < 1e-4
    assert np.abs(w - ref[:, 3:]).max() < 1e-3
    assert np.abs(1.0 - q[-1]).max() < 0.05  # it did move to the target


def test_sampled_law_holds_the_torque_over_its_period() -> None:
    """A 5 ms period with 1 ms steps: the torque changes only every fifth sample."""
    _, _, _, tau = arm.simulate(DEFAULT, "ct", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 0.1, 1e-3,
                                control_period=5e-3)
    changes = np.flatnonzero(np.any(np.diff(tau, axis=0) != 0.0, axis=1)) + 1
    assert changes.tolist() == list(range(5, 101, 5))


def test_pd_settles_where_its_spring_holds_gravity_and_pdg_on_the_target() -> None:
    """PD alone sags: at rest K_P·(q_d − q) = g(q); PD + gravity compensation has no error."""
    qd = np.array([0.5, 1.2, 0.6])
    _, q, w, _ = arm.simulate(DEFAULT, "pd", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], qd, 15.0, 1e-3)
    assert np.abs(w[-1]).max() < 1e-6
    np.testing.assert_allclose(36.0 * (qd - q[-1]), arm.gravity(DEFAULT, q[-1]), atol=1e-5)
    assert np.abs(qd - q[-1]).max() > 0.05  # the sag is real
    _, q, _, _ = arm.simulate(DEFAULT, "pdg", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], qd, 15.0, 1e-3)
    assert np.abs(qd - q[-1]).max() < 1e-6


def test_holding_torques_straight_up_and_horizontal() -> None:
    """Straight up: zero. Horizontal arm: the moments of the weights about shoulder and elbow, by hand."""
    p = DEFAULT
    assert np.array_equal(arm.gravity(p, [0.7, 0.0, 0.0]), np.zeros(3))
    elbow = p.g * (p.fore_mass * p.fore_com + p.hand_mass * p.hand_distance)
    shoulder = p.g * (p.upper_mass * p.upper_com + p.fore_mass * (p.upper_length + p.fore_com)
                      + p.hand_mass * (p.upper_length + p.hand_distance))
    # Holding torques are negative: they pull the arm back toward the upward vertical.
    np.testing.assert_allclose(arm.gravity(p, [0.3, math.pi / 2, 0.0]), [0.0, -shoulder, -elbow], rtol=1e-12)
    np.testing.assert_allclose(arm.gravity(p, [0.0, 0.0, math.pi / 2]), [0.0, -elbow, -elbow], rtol=1e-12)
    np.testing.assert_allclose(arm.gravity(p, [0.0, -math.pi / 2, 0.0]), [0.0, shoulder, elbow], rtol=1e-12)


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="upper_mass"):
        ArmParams(upper_mass=-1.0)
    with pytest.raises(ValueError, match="fore_inertia"):
        ArmParams(fore_inertia=(0.1, 0.1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="elbow"):
        ArmParams(fore_com=0.0, fore_inertia=(0.0, 0.0, 0.0), hand_mass=0.0)
    with pytest.raises(ValueError, match="law"):
        arm.simulate(DEFAULT, "pid", [0, 0, 0], [0, 0, 0], [1, 1, 1], 1.0, 1e-3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="whole multiple"):
        arm.simulate(DEFAULT, "ct", [0, 0, 0], [0, 0, 0], [1, 1, 1], 1.0, 1e-3, control_period=1.5e-3)
    with pytest.raises(ValueError, match="q0"):
        arm.simulate(DEFAULT, "ct", [0, 0], [0, 0, 0], [1, 1, 1], 1.0, 1e-3)
