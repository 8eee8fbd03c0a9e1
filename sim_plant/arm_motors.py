"""Webots motors on the coupled arm: each of the three joints in position, velocity or force control, one plant.

The motor law is the single joint's (:mod:`sim_plant._motor`): a velocity constraint with a force limit, whose
target velocity in position control is :func:`sim_plant._motor.position_vc` and whose control modes and substep bound
are :mod:`sim_plant._layout`'s. Here the three constraints act on the coupled arm of :mod:`sim_plant.arm` together;
what is the arm's own is the box-constrained problem, the RK4 integration and the motor columns. Every substep h
(≤ :data:`MAX_SUBSTEP_S`):

* each motor's target velocity Vc: position control ``Vc = P·(Pt − q)`` clipped to ±|Vd| (``position_vc``),
  velocity control Vd (stored with the sign of the infinite target applied, see :meth:`ArmPlant.set_velocity`);
* the motor torques u are those that bring the joint velocities to Vc at the end of the substep, q̇ + h·A⁻¹·(u + f
  − C − g) = Vc, each within ±Fm (the available motor force; 0 = passive, force control = the commanded force f
  only). With A's block structure the base is a scalar problem and the shoulder–elbow pair a 2×2 box-constrained
  convex problem min ½·uᵀHu − rᵀu (H = h·A⁻¹), solved exactly (the unconstrained optimum if inside the box, else
  the best of the four edges' optima) — as ODE's joint motors, an LCP, for three joints;
* u + f is held over the substep and the arm integrated by RK4.

No acceleration limit, no soft limits and no friction (the arm model has none). Pure numerics. The kernel calls and
inlines :mod:`sim_plant.arm`'s and :mod:`sim_plant._motor`'s cached kernels: after a change there, its numba cache
is stale (numba checks only the defining file); ``servo_node._kernel_cache`` hashes every ``sim_plant`` source and
drops the caches at the entry points and in the tests.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numba import njit

from sim_plant import arm
from sim_plant._layout import MAX_SUBSTEP_S as MAX_SUBSTEP_S
from sim_plant._layout import MODE_FORCE as MODE_FORCE
from sim_plant._layout import MODE_POSITION as MODE_POSITION
from sim_plant._layout import MODE_VELOCITY as MODE_VELOCITY
from sim_plant._layout import clip
from sim_plant._motor import position_vc
from sim_plant.arm import ArmParams

FloatArray = npt.NDArray[np.float64]

# ---- motor columns (motors[3, N_M]) -------------------------------------------------------------------------------
M_MODE = 0  # MODE_POSITION, MODE_VELOCITY or MODE_FORCE
M_TARGET = 1  # Pt (position control)
M_VELOCITY = 2  # Vd: signed in velocity control, |Vd| caps Vc in position control
M_MOTOR_FORCE = 3  # Fm, available motor torque [N·m] (0: passive)
M_P = 4  # P gain [1/s]
M_FORCE = 5  # commanded torque of force control [N·m]
M_FEEDBACK = 6  # motor torque of the last substep [N·m] (0 in force control)
N_M = 7


@njit(cache=True, nogil=True)
def _box2(h11: float, h12: float, h22: float, r1: float, r2: float, f1: float, f2: float) -> tuple[float, float]:
    """argmin ½·uᵀHu − rᵀu over |u1| ≤ f1, |u2| ≤ f2 (H symmetric positive definite), exactly."""
    det = h11 * h22 - h12 * h12
    u1 = (h22 * r1 - h12 * r2) / det
    u2 = (h11 * r2 - h12 * r1) / det
    if abs(u1) <= f1 and abs(u2) <= f2:
        return u1, u2
    best, b1, b2 = math.inf, 0.0, 0.0
    for edge in range(4):
        if edge < 2:  # u2 on a bound, u1 optimal along it
            v2 = f2 if edge == 0 else -f2
            v1 = clip((r1 - h12 * v2) / h11, -f1, f1)
        else:
            v1 = f1 if edge == 2 else -f1
            v2 = clip((r2 - h12 * v1) / h22, -f2, f2)
        cost = 0.5 * (h11 * v1 * v1 + 2.0 * h12 * v1 * v2 + h22 * v2 * v2) - r1 * v1 - r2 * v2
        if cost < best:
            best, b1, b2 = cost, v1, v2
    return b1, b2


@njit(cache=True, nogil=True)
def _target_velocity(motors: FloatArray, i: int, q: float) -> float:
    """Vc of motor i at position q (the single joint's law without soft limits and acceleration limit)."""
    if motors[i, M_MODE] == MODE_POSITION:
        return position_vc(motors[i, M_P], motors[i, M_TARGET], q, abs(motors[i, M_VELOCITY]))
    return motors[i, M_VELOCITY]


@njit(cache=True, nogil=True)
def step_motors(k: FloatArray, motors: FloatArray, x: FloatArray, tau: FloatArray, dt: float) -> None:
    """Advance the arm x = (q, q̇) by dt under its motors (in place); tau receives the applied joint torques."""
    n = max(1, math.ceil(dt / MAX_SUBSTEP_S - 1e-9))
    h = dt / n
    for _ in range(n):
        a11, a22, a23, a33 = arm._inertia(k, x[1], x[2])
        c1, c2, c3 = arm._velocity(k, x[1], x[2], x[3], x[4], x[5])
        _, g2, g3 = arm._gravity(k, x[1], x[2])
        f1 = motors[0, M_FORCE] if motors[0, M_MODE] == MODE_FORCE else 0.0
        f2 = motors[1, M_FORCE] if motors[1, M_MODE] == MODE_FORCE else 0.0
        f3 = motors[2, M_FORCE] if motors[2, M_MODE] == MODE_FORCE else 0.0
        lim1 = 0.0 if motors[0, M_MODE] == MODE_FORCE else motors[0, M_MOTOR_FORCE]
        lim2 = 0.0 if motors[1, M_MODE] == MODE_FORCE else motors[1, M_MOTOR_FORCE]
        lim3 = 0.0 if motors[2, M_MODE] == MODE_FORCE else motors[2, M_MOTOR_FORCE]
        # Velocities at the end of the substep without motor torque: v0 = q̇ + h·A⁻¹·(f − C − g).
        b1, b2, b3 = f1 - c1, f2 - c2 - g2, f3 - c3 - g3
        det = a22 * a33 - a23 * a23
        i22, i23, i33 = a33 / det, -a23 / det, a22 / det  # in-plane block of A⁻¹
        v01 = x[3] + h * b1 / a11
        v02 = x[4] + h * (i22 * b2 + i23 * b3)
        v03 = x[5] + h * (i23 * b2 + i33 * b3)
        u1 = clip((_target_velocity(motors, 0, x[0]) - v01) * a11 / h, -lim1, lim1)
        u2, u3 = _box2(h * i22, h * i23, h * i33, _target_velocity(motors, 1, x[1]) - v02,
                       _target_velocity(motors, 2, x[2]) - v03, lim2, lim3)
        motors[0, M_FEEDBACK], motors[1, M_FEEDBACK], motors[2, M_FEEDBACK] = u1, u2, u3
        tau[0], tau[1], tau[2] = u1 + f1, u2 + f2, u3 + f3
        arm._rk4_step(k, x, h, -1, 0.0, 0.0, tau, tau)  # held torques (its q_d argument is unused then)


@dataclasses.dataclass(frozen=True)
class ArmMotor:
    """One joint's motor (Webots Motor fields): velocity limit [rad/s], torque limit [N·m], position gain [1/s]."""

    max_velocity: float = 3.0
    max_force: float = 20.0
    control_p: float = 10.0

    def __post_init__(self) -> None:
        """Every field finite and ≥ 0; the error names the field."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0.0):
                raise ValueError(f"{f.name} must be finite and >= 0, got {v!r}")


class ArmPlant:
    """The coupled arm driven by three Webots motors (base, shoulder, elbow: joints 0, 1, 2); starts passive.

    Commands as Webots: :meth:`set_position` (±inf: velocity control), :meth:`set_velocity`,
    :meth:`set_motor_force` (the available torque, ≤ max_force; 0 makes the joint passive), :meth:`set_force`
    (force control, clipped to ±max_force). Not thread-safe (callers lock).
    """

    def __init__(self, params: ArmParams, motors: Sequence[ArmMotor] = (ArmMotor(),) * 3,
                 position: Sequence[float] = (0.0, 0.0, 0.0)) -> None:
        if len(motors) != 3:
            raise ValueError(f"three motors expected, got {len(motors)}")
        self.params = params
        self.motor_params = tuple(motors)
        self._k = arm._constants(params)
        self.state = np.concatenate([arm._vec3("position", position), np.zeros(3)])
        self.motors = np.zeros((3, N_M))
        self.motors[:, M_MODE] = MODE_FORCE  # passive: force control with zero torque
        for i, m in enumerate(motors):
            self.motors[i, M_P] = m.control_p
            self.motors[i, M_VELOCITY] = m.max_velocity
            self.motors[i, M_TARGET] = position[i]
        self.torques = np.zeros(3)
        """Joint torques applied in the last substep [N·m] (motor plus commanded)."""
        self.time = 0.0
        """Simulated time [s]."""

    @staticmethod
    def warm_up() -> None:
        """Compile or load the arm's numba kernels on a scratch plant (slow on a cold cache)."""
        scratch = ArmPlant(ArmParams())
        scratch.set_position(1, 0.1)
        scratch.set_velocity(1, 0.5)
        scratch.set_motor_force(1, 1.0)
        scratch.step(1e-3)
        scratch.set_force(1, 0.0)
        scratch.step(1e-3)

    def _joint(self, i: int) -> int:
        if not 0 <= i < 3:
            raise IndexError(f"joint index {i} out of range 0..2")
        return i

    def set_position(self, i: int, position: float) -> None:
        """Target position (position control; ±inf selects velocity control)."""
        i = self._joint(i)
        self.motors[i, M_TARGET] = position
        self.motors[i, M_MODE] = MODE_VELOCITY if math.isinf(position) else MODE_POSITION

    def set_velocity(self, i: int, velocity: float) -> None:
        """Vd, clipped to ±max_velocity; in velocity control the sign of an infinite target applies (Webots)."""
        i = self._joint(i)
        vmax = self.motor_params[i].max_velocity
        v = clip(velocity, -vmax, vmax)
        target = self.motors[i, M_TARGET]
        self.motors[i, M_VELOCITY] = -v if math.isinf(target) and target < 0.0 else v

    def set_motor_force(self, i: int, force: float) -> None:
        """Available motor torque, clipped to [0, max_force]."""
        i = self._joint(i)
        self.motors[i, M_MOTOR_FORCE] = min(abs(force), self.motor_params[i].max_force)

    def set_force(self, i: int, force: float) -> None:
        """Force control: apply this torque (clipped to ±max_force); set_position returns to position control."""
        i = self._joint(i)
        fmax = self.motor_params[i].max_force
        self.motors[i, M_FORCE] = clip(force, -fmax, fmax)
        self.motors[i, M_MODE] = MODE_FORCE

    def step(self, dt: float) -> None:
        """Advance by dt [s] > 0 (substeps of at most :data:`MAX_SUBSTEP_S`)."""
        if not (math.isfinite(dt) and dt > 0.0):
            raise ValueError(f"dt must be finite and > 0, got {dt!r}")
        step_motors(self._k, self.motors, self.state, self.torques, float(dt))
        self.time += dt

    @property
    def positions(self) -> FloatArray:
        """q [rad] (a copy)."""
        return self.state[:3].copy()

    @property
    def velocities(self) -> FloatArray:
        """q̇ [rad/s] (a copy)."""
        return self.state[3:].copy()

    @property
    def motor_force_feedbacks(self) -> FloatArray:
        """The motors' torques of the last substep [N·m] (0 in force control)."""
        return self.motors[:, M_FEEDBACK].copy()
