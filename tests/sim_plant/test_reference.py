"""Comparison with a slow, readable reference: explicit (semi-implicit Euler) integration at a 100x smaller step."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from sim_plant import JointArray, JointParams

H_REF = 2e-5  # reference step [s]


class NaiveChain:
    """Reference model of one joint or a parent/child pair, written for reading, not speed.

    Per step h: Webots controller Vc = clip(P·(Pt − q), ±|Vd|), rate-limited by A·h; the motor/friction force is the
    one reaching Vc (or 0) at the end of the step under all other forces, clipped; semi-implicit Euler; stops clip.
    """

    def __init__(self, joints: list[JointParams], parents: list[int]) -> None:
        self.p = joints
        self.parents = parents
        n = len(joints)
        self.q = [j.position for j in joints]
        self.v = [0.0] * n
        self.target = list(self.q)
        self.vd = [j.max_velocity for j in joints]
        self.fm = [j.max_force for j in joints]
        self.force: list[float | None] = [None] * n
        self.vc = [0.0] * n
        self.feedback = [0.0] * n
        # joint-space mass matrix: child coordinate is relative to its parent (coaxial)
        m = np.zeros((n, n))
        for i, j in enumerate(joints):
            chain = [i] if parents[i] < 0 else [parents[i], i]
            for a in chain:
                for b in chain:
                    m[a, b] += j.inertia
        self.minv = np.linalg.inv(m).tolist()

    def set_position(self, i: int, x: float) -> None:
        self.target[i] = x
        self.force[i] = None

    def set_velocity(self, i: int, x: float) -> None:
        self.vd[i] = max(-self.p[i].max_velocity, min(self.p[i].max_velocity, x))

    def set_force(self, i: int, x: float) -> None:
        self.force[i] = x

    def _controller(self, i: int, h: float) -> float:
        j = self.p[i]
        limited = j.min_position != 0.0 or j.max_position != 0.0
        t = self.target[i]
        if math.isinf(t):
            direction = math.copysign(1.0, t) * math.copysign(1.0, self.vd[i])
            t = (j.max_position if direction > 0 else j.min_position) if limited else math.copysign(1e300, direction)
        elif limited:
            t = min(max(t, j.min_position), j.max_position)
        vc = max(-abs(self.vd[i]), min(abs(self.vd[i]), j.control_p * (t - self.q[i])))
        if j.acceleration >= 0.0:
            vc = self.vc[i] + max(-j.acceleration * h, min(j.acceleration * h, vc - self.vc[i]))
        self.vc[i] = vc
        return vc

    def step(self, dt: float) -> None:
        for _ in range(round(dt / H_REF)):
            self._step(H_REF)

    def _step(self, h: float) -> None:
        n = len(self.p)
        q, v, minv = self.q, self.v, self.minv
        absolute = [q[i] + (q[self.parents[i]] if self.parents[i] >= 0 else 0.0) for i in range(n)]
        f = [0.0] * n
        target_v = [0.0] * n
        limit = [0.0] * n
        motor = [False] * n
        for i, j in enumerate(self.p):
            f[i] += -j.spring_constant * q[i] - j.damping_constant * v[i]
            ext = j.load + j.gravity_load * math.sin(absolute[i])
            f[i] += ext
            if self.parents[i] >= 0:
                f[self.parents[i]] += ext
            force = self.force[i]
            if force is not None:
                f[i] += max(-self.fm[i], min(self.fm[i], force))
                limit[i] = j.static_friction
            else:
                vc = self._controller(i, h)
                if self.fm[i] > 0.0:
                    target_v[i], limit[i], motor[i] = vc, max(self.fm[i], j.static_friction), True
                else:
                    limit[i] = j.static_friction
        u = [0.0] * n
        active = [i for i in range(n) if limit[i] > 0.0]
        for _ in range(30 if len(active) > 1 else 1):  # Gauss-Seidel on the velocity constraints within the limits
            change = 0.0
            for i in active:
                v_end = v[i] + h * sum(minv[i][k] * (f[k] + u[k]) for k in range(n))
                new = max(-limit[i], min(limit[i], u[i] + (target_v[i] - v_end) / (h * minv[i][i])))
                change, u[i] = max(change, abs(new - u[i])), new
            if change <= 1e-12 * (1.0 + max(abs(x) for x in u)):
                break
        for i in range(n):
            v[i] += h * sum(minv[i][k] * (f[k] + u[k]) for k in range(n))
        for i in range(n):
            q[i] += h * v[i]
        for i in sorted(range(n), key=lambda i: -self.parents[i]):  # children first
            j = self.p[i]
            if j.min_stop != 0.0 or j.max_stop != 0.0:
                q_stop = min(max(q[i], j.min_stop), j.max_stop)
                into_stop = (q[i] <= j.min_stop and v[i] < 0.0) or (q[i] >= j.max_stop and v[i] > 0.0)
                q[i] = q_stop
                if into_stop:
                    parent = self.parents[i]
                    child = next((c for c in range(n) if self.parents[c] == i), -1)
                    if parent >= 0:  # inelastic impact between the two bodies: momentum kept, relative motion 0
                        jp, jc = self.p[parent].inertia, j.inertia
                        v[parent] = (jp * v[parent] + jc * (v[parent] + v[i])) / (jp + jc)
                    elif child >= 0:  # the ground stops the carrier; the carried body keeps its absolute velocity
                        v[child] += v[i]
                    v[i] = 0.0
        for i in range(n):
            self.feedback[i] = max(-self.fm[i], min(self.fm[i], u[i])) if motor[i] else 0.0


Scenario = Callable[[JointArray | NaiveChain, float], None]


def position_moves(sim: JointArray | NaiveChain, t: float) -> None:
    """Position target 1, then −0.5 at a lower speed."""
    if t == 0.0:
        sim.set_position(0, 1.0)
    if t == 0.5:
        sim.set_velocity(0, 1.0)
        sim.set_position(0, -0.5)


def velocity_then_force(sim: JointArray | NaiveChain, t: float) -> None:
    """Velocity control at −2, then a constant force, then position control again."""
    if t == 0.0:
        sim.set_position(0, -math.inf)
        sim.set_velocity(0, 2.0)
    if t == 0.4:
        sim.set_force(0, 3.0)
    if t == 0.7:
        sim.set_position(0, 0.2)


CASES = [
    (
        "spring_damper_friction_accel",
        [
            JointParams(
                spring_constant=8.0,
                damping_constant=0.7,
                static_friction=0.5,
                acceleration=20.0,
                max_force=6.0,
                inertia=0.3,
            )
        ],
        [-1],
        position_moves,
    ),
    (
        "soft_limits_stops_load",
        [JointParams(min_position=-0.4, max_position=0.8, min_stop=-0.45, max_stop=0.85, load=-1.0, max_force=4.0)],
        [-1],
        position_moves,
    ),
    (
        "gravity_velocity_force",
        [JointParams(gravity_load=2.0, damping_constant=0.2, max_force=5.0, acceleration=15.0, static_friction=0.3)],
        [-1],
        velocity_then_force,
    ),
    (
        "motor_carrying_spring_damper",
        [
            JointParams(max_force=8.0, acceleration=10.0, inertia=0.7),
            JointParams(
                max_force=0.0, inertia=0.4, spring_constant=30.0, damping_constant=1.0, max_stop=0.05, min_stop=-0.05
            ),
        ],
        [-1, 0],
        position_moves,
    ),
    (
        "two_motors_in_series",
        [
            JointParams(max_force=8.0, acceleration=10.0, inertia=0.7),
            JointParams(max_force=1.0, inertia=0.4, spring_constant=5.0, static_friction=0.3),
        ],
        [-1, 0],
        position_moves,
    ),
]


def compare(joints: list[JointParams], parents: list[int], scenario: Scenario, dt: float) -> tuple[float, float]:
    """Worst position and velocity differences over 1 s, the fast model stepped at dt (events on 1 ms ticks)."""
    fast = JointArray(joints, parents)
    slow = NaiveChain(joints, parents)
    ratio = round(0.001 / dt)
    worst_q = worst_v = 0.0
    lo = hi = slow.q[0]
    for n in range(1000):
        t = round(n * 0.001, 9)
        scenario(fast, t)
        scenario(slow, t)
        for _ in range(ratio):
            fast.step(dt)
        slow.step(0.001)
        worst_q = max(worst_q, float(np.max(np.abs(fast.positions - np.array(slow.q)))))
        worst_v = max(worst_v, float(np.max(np.abs(fast.velocities - np.array(slow.v)))))
        lo, hi = min(lo, slow.q[0]), max(hi, slow.q[0])
    assert hi - lo > 0.3  # the scenario really moved the joint
    return worst_q, worst_v


@pytest.mark.parametrize(("name", "joints", "parents", "scenario"), CASES, ids=[c[0] for c in CASES])
def test_matches_naive_reference(name: str, joints: list[JointParams], parents: list[int], scenario: Scenario) -> None:
    """At 1 kHz the models differ by O(h): the controller samples and the motor reaches Vc one substep later

    (e.g. an A-limited Vc reversal 1.5 ms apart gives 0.015 m/s for 0.45 s, 7e-3 in position).
    """
    worst_q, worst_v = compare(joints, parents, scenario, 0.001)
    assert worst_q < 1e-2, name
    assert worst_v < 5e-2, name


@pytest.mark.parametrize("case", [0, 3], ids=[CASES[0][0], CASES[3][0]])
def test_difference_to_reference_shrinks_with_the_step(case: int) -> None:
    """The difference is a discretisation error, not a modelling one: 10x smaller steps shrink it."""
    _name, joints, parents, scenario = CASES[case]
    coarse_q, _ = compare(joints, parents, scenario, 0.001)
    fine_q, _ = compare(joints, parents, scenario, 0.0001)
    assert fine_q < 0.4 * coarse_q  # ~10x (single joint), ~3x with the stop impacts of the pair
