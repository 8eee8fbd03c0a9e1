"""Validation against closed-form physics (the Webots-vs-Simulink style checks of the issue)."""

from __future__ import annotations

import math

import numpy as np

from sim_plant import Joint, JointParams


def test_paper_critically_damped_spring_damper_release() -> None:
    """K = 36, B = 12, J = 1 released from −1 follows q(t) = −(1 + 6t)·e^(−6t) to < 1e-4 over 2 s."""
    j = Joint(JointParams(inertia=1.0, spring_constant=36.0, damping_constant=12.0, position=-1.0, max_force=0.0))
    worst = 0.0
    for n in range(1, 2001):
        j.step(0.001)
        t = n * 0.001
        worst = max(worst, abs(j.position - (-(1.0 + 6.0 * t) * math.exp(-6.0 * t))))
        assert abs(j.velocity - 36.0 * t * math.exp(-6.0 * t)) < 1e-4
    assert worst < 1e-4
    assert j.motor_force_feedback == 0.0


def test_paper_pd_law_through_set_force_matches_zero_order_hold_prediction() -> None:
    """The PD law u = 36(1 − q) − 12 q' applied via set_force at 1 kHz versus 1 − (1 + 6t)·e^(−6t).

    ZOH error derivation: the held force differs from the continuous one by −(t − t_k)·u' on each step, on average
    −(h/2)·u'.  With J = 1, u = q'' of the continuous solution, so the error e obeys e'' + 12e' + 36e = −(h/2)·q'''
    with q''' = 36(36t − 12)e^(−6t).  Convolving with the impulse response t·e^(−6t) gives
    e(t) = 108·h·t²·(1 − t)·e^(−6t) + O(h²) (max ≈ 1.13e-3 at h = 1 ms).  The simulation must also equal the exact
    discrete ZOH recursion of the double integrator, x ← Φx + Γu with Φ = [[1, h], [0, 1]], Γ = [h²/2, h].
    """
    h = 0.001
    j = Joint(JointParams(inertia=1.0, max_force=100.0))
    x = np.zeros(2)
    worst_pred = worst_exact = worst_total = 0.0
    for n in range(2000):
        u = 36.0 * (1.0 - j.position) - 12.0 * j.velocity
        j.set_force(u)
        j.step(h)
        ud = 36.0 * (1.0 - x[0]) - 12.0 * x[1]
        x = np.array([x[0] + h * x[1] + 0.5 * h * h * ud, x[1] + h * ud])
        t = (n + 1) * h
        e = j.position - (1.0 - (1.0 + 6.0 * t) * math.exp(-6.0 * t))
        predicted = 108.0 * h * t * t * (1.0 - t) * math.exp(-6.0 * t)
        worst_pred = max(worst_pred, abs(e - predicted))
        worst_exact = max(worst_exact, abs(j.position - x[0]))
        worst_total = max(worst_total, abs(e))
    assert worst_exact < 1e-12
    assert worst_pred < 2e-5  # O(h²) remainder, ~60x below the first-order term
    assert 1.0e-3 < worst_total < 1.2e-3  # the derived first-order ZOH error is really there, and no more


def test_undamped_spring_period_and_energy() -> None:
    """Period 2π·sqrt(J/K); energy ½Jv² + ½Kq² conserved to 1e-6 relative over 100 periods."""
    inertia, k = 2.0, 5.0
    j = Joint(JointParams(inertia=inertia, spring_constant=k, position=1.0, max_force=0.0))
    e0 = 0.5 * k
    period = 2.0 * math.pi * math.sqrt(inertia / k)
    dt = 0.001
    crossings: list[float] = []
    worst = 0.0
    q_prev = 1.0
    for n in range(1, int(100 * period / dt) + 2):
        j.step(dt)
        q, v = j.position, j.velocity
        worst = max(worst, abs(0.5 * inertia * v * v + 0.5 * k * q * q - e0) / e0)
        if q_prev > 0.0 >= q:  # downward zero crossing, linear interpolation
            crossings.append((n - 1) * dt + dt * q_prev / (q_prev - q))
        q_prev = q
    assert worst < 1e-6
    assert len(crossings) >= 99
    measured = (crossings[-1] - crossings[0]) / (len(crossings) - 1)
    assert abs(measured - period) / period < 1e-6


def test_damped_spring_decay_rate() -> None:
    """Underdamped free response decays as e^(−B/(2J)·t): q(t + T_d) = e^(−σT_d)·q(t) exactly."""
    inertia, k, b = 0.5, 50.0, 0.4
    sigma = b / (2.0 * inertia)
    omega_d = math.sqrt(k / inertia - sigma * sigma)
    t_d = 2.0 * math.pi / omega_d
    j = Joint(JointParams(inertia=inertia, spring_constant=k, damping_constant=b, position=0.3, max_force=0.0))
    q_prev = j.position
    for _ in range(20):
        j.step(t_d)
        rate = -math.log(j.position / q_prev) / t_d
        assert abs(rate - sigma) < 1e-9 * max(1.0, sigma) + 1e-8
        q_prev = j.position
