"""The coupled 3-DOF arm of the Webots paper (Mandić & Lazarević): A(q)·q̈ + C(q, q̇) + g(q) = Q.

Conventions (as the paper and ``docs/hanoi.md``): q1 turns the arm about the vertical axis, q2 is the shoulder
angle from the upward vertical, q3 the elbow angle relative to the upper arm; q = 0 is the arm straight up, a
positive q2 or q3 tilts the next link away from the base axis, gravity acts downward. The shoulder axis is
horizontal and meets the base axis. Each link is a rigid body with its centre of mass on the link axis and principal
inertias about that centre (about the joint axis, along the link, the third axis); a point mass at the hand
(``hand_mass`` at ``hand_distance`` from the elbow) stands for wrist, gripper and load.

Lagrange's equations (derived in ``docs/arm.md``) with the shorthands s2 = sin q2, c23 = cos(q2 + q3), …:

* forearm plus hand about the elbow: first moment S = m2·a2 + mh·d, inertia J2 = I2j + m2·a2² + mh·d²;
* upper arm about the shoulder carrying the rest as a mass at the elbow: J1 = I1j + m1·a1² + (m2 + mh)·L1²;
* A11 = I0 + α1·c2² + β1·s2² + α2·c23² + β2·s23² + 2·L1·S·s2·s23 with α1 = I1a, β1 = I1t + m1·a1² + (m2+mh)·L1²,
  α2 = I2a, β2 = I2t + m2·a2² + mh·d²; A22 = J1 + J2 + 2·L1·S·c3, A23 = J2 + L1·S·c3, A33 = J2, A12 = A13 = 0
  (the yaw velocity of every point is normal to the arm's plane, the in-plane velocities lie in it);
* C (the paper's Σ Γ q̇ q̇): C1 = (A11,2·q̇2 + A11,3·q̇3)·q̇1, C2 = −½·A11,2·q̇1² − L1·S·s3·(2·q̇2·q̇3 + q̇3²),
  C3 = −½·A11,3·q̇1² + L1·S·s3·q̇2², where A11,2 = (β1 − α1)·sin 2q2 + (β2 − α2)·sin 2q23 + 2·L1·S·sin(2q2 + q3)
  and A11,3 = (β2 − α2)·sin 2q23 + 2·L1·S·s2·c23;
* Π = g·((m1·a1 + (m2+mh)·L1)·c2 + S·c23) (zero at the shoulder's height), g(q) = ∂Π/∂q.

The kernels take the derived constants in one float64 array (``_K_*``, built by :func:`_constants`) and plain
floats; the integrator is the classical fixed-step RK4 on scalars (no allocation per step). Pure numerics.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
import numpy.typing as npt
from numba import njit

FloatArray = npt.NDArray[np.float64]
Law = Literal["ct", "pdg", "pd"]
LAWS: dict[str, int] = {"ct": 0, "pdg": 1, "pd": 2}
"""Control laws of :func:`simulate` and their kernel codes: computed torque, PD + gravity compensation, PD."""

# ---- derived constants (indices into the array of _constants) --------------------------------------------------
_K_I0 = 0  # base inertia about the vertical [kg·m²]
_K_A1 = 1  # α1 = I1 along the link
_K_B1 = 2  # β1 = I1 third + m1·a1² + (m2 + mh)·L1²
_K_A2 = 3  # α2 = I2 along the link
_K_B2 = 4  # β2 = I2 third + m2·a2² + mh·d²
_K_J1 = 5  # upper arm (with the rest as a mass at the elbow) about the shoulder axis
_K_J2 = 6  # forearm + hand about the elbow axis
_K_LS = 7  # L1·S
_K_G2 = 8  # g·(m1·a1 + (m2 + mh)·L1) [N·m]
_K_G3 = 9  # g·S [N·m]
_N_K = 10


@dataclasses.dataclass(frozen=True)
class ArmParams:
    """Masses [kg], lengths [m] and inertias [kg·m²] of the arm; the defaults are the Hanoi cell's arm.

    Lengths are the cell's (``examples/hanoi/kinematics.py``: upper arm 0.32 m, forearm 0.28 m to the wrist axis);
    the masses and inertias are ours (the paper prints none): aluminium links of about 1.5 and 0.9 kg as slender
    rods (m·L²/12 about the centre, a thin tube along the link), a 0.02 kg·m² turntable, and 0.5 kg of wrist, gripper
    and box lumped at the wrist axis. ``*_inertia`` = (about the joint axis, along the link, third axis), about the
    link's centre of mass, which lies ``*_com`` from the link's joint.
    """

    g: float = 9.81
    base_inertia: float = 0.02
    upper_mass: float = 1.5
    upper_length: float = 0.32
    upper_com: float = 0.16
    upper_inertia: tuple[float, float, float] = (0.0128, 0.0007, 0.0128)
    fore_mass: float = 0.9
    fore_length: float = 0.28
    fore_com: float = 0.13
    fore_inertia: tuple[float, float, float] = (0.0059, 0.0003, 0.0059)
    hand_mass: float = 0.5
    hand_distance: float = 0.28

    def __post_init__(self) -> None:
        """Validate every field; the error names the offending one."""
        scalars = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.endswith("inertia")}
        scalars["base_inertia"] = self.base_inertia
        for name, value in scalars.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
            if value < 0.0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        for name in ("base_inertia", "upper_length", "fore_length"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("upper_inertia", "fore_inertia"):
            value = getattr(self, name)
            if len(value) != 3 or any(not (math.isfinite(v) and v >= 0.0) for v in value):
                raise ValueError(f"{name} must be three finite numbers >= 0, got {value!r}")
        if not (self.upper_com <= self.upper_length and self.fore_com <= self.fore_length):
            raise ValueError("a link's centre of mass must lie on the link (com <= length)")
        if not self.upper_inertia[0] + self.upper_mass * self.upper_com**2 > 0.0:
            raise ValueError("the upper arm needs inertia about the shoulder axis (upper_com or upper_inertia[0] > 0)")
        if not self.fore_inertia[0] + self.fore_mass * self.fore_com**2 + self.hand_mass * self.hand_distance**2 > 0.0:
            raise ValueError("forearm and hand need inertia about the elbow axis (fore_inertia[0], fore_com or hand)")


def _constants(p: ArmParams) -> FloatArray:
    """The derived constants the kernels use (``_K_*``)."""
    m1, a1, l1 = p.upper_mass, p.upper_com, p.upper_length
    m2, a2, mh, d = p.fore_mass, p.fore_com, p.hand_mass, p.hand_distance
    s = m2 * a2 + mh * d
    k = np.zeros(_N_K)
    k[_K_I0] = p.base_inertia
    k[_K_A1] = p.upper_inertia[1]
    k[_K_B1] = p.upper_inertia[2] + m1 * a1 * a1 + (m2 + mh) * l1 * l1
    k[_K_A2] = p.fore_inertia[1]
    k[_K_B2] = p.fore_inertia[2] + m2 * a2 * a2 + mh * d * d
    k[_K_J1] = p.upper_inertia[0] + m1 * a1 * a1 + (m2 + mh) * l1 * l1
    k[_K_J2] = p.fore_inertia[0] + m2 * a2 * a2 + mh * d * d
    k[_K_LS] = l1 * s
    k[_K_G2] = p.g * (m1 * a1 + (m2 + mh) * l1)
    k[_K_G3] = p.g * s
    return k


# ---- kernels on scalars ------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def _inertia(k: FloatArray, q2: float, q3: float) -> tuple[float, float, float, float]:
    """(A11, A22, A23, A33) at (q2, q3); A12 = A13 = 0."""
    s2, c2 = math.sin(q2), math.cos(q2)
    s23, c23 = math.sin(q2 + q3), math.cos(q2 + q3)
    ls_c3 = k[_K_LS] * math.cos(q3)
    a11 = (k[_K_I0] + k[_K_A1] * c2 * c2 + k[_K_B1] * s2 * s2 + k[_K_A2] * c23 * c23 + k[_K_B2] * s23 * s23
           + 2.0 * k[_K_LS] * s2 * s23)
    return a11, k[_K_J1] + k[_K_J2] + 2.0 * ls_c3, k[_K_J2] + ls_c3, k[_K_J2]


@njit(cache=True, nogil=True, inline="always")
def _velocity(k: FloatArray, q2: float, q3: float, w1: float, w2: float, w3: float) -> tuple[float, float, float]:
    """The paper's C(q, q̇): Coriolis and centrifugal torques."""
    q23 = q2 + q3
    d2 = ((k[_K_B1] - k[_K_A1]) * math.sin(2.0 * q2) + (k[_K_B2] - k[_K_A2]) * math.sin(2.0 * q23)
          + 2.0 * k[_K_LS] * math.sin(2.0 * q2 + q3))  # ∂A11/∂q2
    d3 = (k[_K_B2] - k[_K_A2]) * math.sin(2.0 * q23) + 2.0 * k[_K_LS] * math.sin(q2) * math.cos(q23)  # ∂A11/∂q3
    ls_s3 = k[_K_LS] * math.sin(q3)
    c1 = (d2 * w2 + d3 * w3) * w1
    c2 = -0.5 * d2 * w1 * w1 - ls_s3 * (2.0 * w2 * w3 + w3 * w3)
    c3 = -0.5 * d3 * w1 * w1 + ls_s3 * w2 * w2
    return c1, c2, c3


@njit(cache=True, nogil=True, inline="always")
def _gravity(k: FloatArray, q2: float, q3: float) -> tuple[float, float, float]:
    """g(q) = ∂Π/∂q: the torques that hold the arm still at q."""
    g3 = -k[_K_G3] * math.sin(q2 + q3)
    return 0.0, -k[_K_G2] * math.sin(q2) + g3, g3


@njit(cache=True, nogil=True)
def _law(k: FloatArray, law: int, kp: float, kd: float, qd1: float, qd2: float, qd3: float,
         q1: float, q2: float, q3: float, w1: float, w2: float, w3: float) -> tuple[float, float, float]:
    """Joint torques Q of the law at the state; e = q_d − q, ė = −q̇ (a step target, no derivative impulse)."""
    v1 = kp * (qd1 - q1) - kd * w1
    v2 = kp * (qd2 - q2) - kd * w2
    v3 = kp * (qd3 - q3) - kd * w3
    if law == 2:
        return v1, v2, v3
    _, gr2, gr3 = _gravity(k, q2, q3)
    if law == 1:
        return v1, v2 + gr2, v3 + gr3
    a11, a22, a23, a33 = _inertia(k, q2, q3)
    c1, c2, c3 = _velocity(k, q2, q3, w1, w2, w3)
    return a11 * v1 + c1, a22 * v2 + a23 * v3 + c2 + gr2, a23 * v2 + a33 * v3 + c3 + gr3


@njit(cache=True, nogil=True)
def _stage(k: FloatArray, law: int, kp: float, kd: float, qd: FloatArray, hold: FloatArray,
           q1: float, q2: float, q3: float, w1: float, w2: float, w3: float) -> tuple[float, float, float]:
    """q̈ = A⁻¹·(Q − C − g) at one state, Q the held torques (law < 0) or the law's there; A, C, g evaluated once.
    The yaw row is solved alone, the in-plane 2×2 block by Cramer's rule."""
    a11, a22, a23, a33 = _inertia(k, q2, q3)
    c1, c2, c3 = _velocity(k, q2, q3, w1, w2, w3)
    _, gr2, gr3 = _gravity(k, q2, q3)
    if law < 0:
        t1, t2, t3 = hold[0], hold[1], hold[2]
    else:
        v1, v2, v3 = kp * (qd[0] - q1) - kd * w1, kp * (qd[1] - q2) - kd * w2, kp * (qd[2] - q3) - kd * w3
        if law == 0:
            t1, t2, t3 = a11 * v1 + c1, a22 * v2 + a23 * v3 + c2 + gr2, a23 * v2 + a33 * v3 + c3 + gr3
        elif law == 1:
            t1, t2, t3 = v1, v2 + gr2, v3 + gr3
        else:
            t1, t2, t3 = v1, v2, v3
    r1, r2, r3 = t1 - c1, t2 - c2 - gr2, t3 - c3 - gr3
    det = a22 * a33 - a23 * a23
    return r1 / a11, (a33 * r2 - a23 * r3) / det, (a22 * r3 - a23 * r2) / det


@njit(cache=True, nogil=True)
def _rk4_step(k: FloatArray, x: FloatArray, h: float, law: int, kp: float, kd: float, qd: FloatArray,
              hold: FloatArray) -> None:
    """Advance x = (q1, q2, q3, q̇1, q̇2, q̇3) by h in place; law < 0 holds the torques ``hold``, else evaluates
    the law at every RK4 stage (the continuous law)."""
    q1, q2, q3, w1, w2, w3 = x[0], x[1], x[2], x[3], x[4], x[5]
    a1, a2, a3 = _stage(k, law, kp, kd, qd, hold, q1, q2, q3, w1, w2, w3)
    hh = 0.5 * h
    u1, u2, u3 = w1 + hh * a1, w2 + hh * a2, w3 + hh * a3
    b1, b2, b3 = _stage(k, law, kp, kd, qd, hold, q1 + hh * w1, q2 + hh * w2, q3 + hh * w3, u1, u2, u3)
    sq1, sq2, sq3 = w1 + 2.0 * u1, w2 + 2.0 * u2, w3 + 2.0 * u3
    sw1, sw2, sw3 = a1 + 2.0 * b1, a2 + 2.0 * b2, a3 + 2.0 * b3
    p1, p2, p3 = q1 + hh * u1, q2 + hh * u2, q3 + hh * u3
    u1, u2, u3 = w1 + hh * b1, w2 + hh * b2, w3 + hh * b3
    c1, c2, c3 = _stage(k, law, kp, kd, qd, hold, p1, p2, p3, u1, u2, u3)
    sq1, sq2, sq3 = sq1 + 2.0 * u1, sq2 + 2.0 * u2, sq3 + 2.0 * u3
    sw1, sw2, sw3 = sw1 + 2.0 * c1, sw2 + 2.0 * c2, sw3 + 2.0 * c3
    p1, p2, p3 = q1 + h * u1, q2 + h * u2, q3 + h * u3
    u1, u2, u3 = w1 + h * c1, w2 + h * c2, w3 + h * c3
    d1, d2, d3 = _stage(k, law, kp, kd, qd, hold, p1, p2, p3, u1, u2, u3)
    h6 = h / 6.0
    x[0] = q1 + h6 * (sq1 + u1)
    x[1] = q2 + h6 * (sq2 + u2)
    x[2] = q3 + h6 * (sq3 + u3)
    x[3] = w1 + h6 * (sw1 + d1)
    x[4] = w2 + h6 * (sw2 + d2)
    x[5] = w3 + h6 * (sw3 + d3)


@njit(cache=True, nogil=True)
def _simulate(k: FloatArray, law: int, kp: float, kd: float, qd: FloatArray, x: FloatArray, dt: float,
              hold_steps: int, out_x: FloatArray, out_tau: FloatArray) -> None:
    """Fill out_x[n] (state) and out_tau[n] (torque) for n = 0..N: hold_steps = 0 evaluates the law continuously,
    hold_steps ≥ 1 samples it every hold_steps steps of dt and holds it (zero-order hold)."""
    hold = np.zeros(3)
    for n in range(out_x.shape[0]):
        if hold_steps == 0 or n % hold_steps == 0:
            t1, t2, t3 = _law(k, law, kp, kd, qd[0], qd[1], qd[2], x[0], x[1], x[2], x[3], x[4], x[5])
            hold[0], hold[1], hold[2] = t1, t2, t3
        out_x[n, :] = x
        out_tau[n, :] = hold
        if n + 1 < out_x.shape[0]:
            _rk4_step(k, x, dt, law if hold_steps == 0 else -1, kp, kd, qd, hold)


# ---- typed public API --------------------------------------------------------------------------------------------
def _vec3(name: str, v: npt.ArrayLike) -> FloatArray:
    """A finite float64 3-vector, or ValueError naming the argument."""
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    if a.shape != (3,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be three finite numbers, got {v!r}")
    return a


def mass_matrix(params: ArmParams, q: npt.ArrayLike) -> FloatArray:
    """The inertia matrix A(q) (3×3, symmetric positive definite) [kg·m²]."""
    q = _vec3("q", q)
    a11, a22, a23, a33 = _inertia(_constants(params), q[1], q[2])
    return np.array([[a11, 0.0, 0.0], [0.0, a22, a23], [0.0, a23, a33]])


def velocity_terms(params: ArmParams, q: npt.ArrayLike, qdot: npt.ArrayLike) -> FloatArray:
    """The paper's vector C(q, q̇) = Σ Γ q̇ q̇ [N·m] (Christoffel symbols of A)."""
    q, w = _vec3("q", q), _vec3("qdot", qdot)
    return np.array(_velocity(_constants(params), q[1], q[2], w[0], w[1], w[2]))


def gravity(params: ArmParams, q: npt.ArrayLike) -> FloatArray:
    """g(q) = ∂Π/∂q [N·m]: the joint torques that hold the arm still at q."""
    q = _vec3("q", q)
    return np.array(_gravity(_constants(params), q[1], q[2]))


def energy(params: ArmParams, q: npt.ArrayLike, qdot: npt.ArrayLike) -> float:
    """Kinetic plus potential energy [J], the potential zero with every centre of mass at the shoulder's height."""
    q, w = _vec3("q", q), _vec3("qdot", qdot)
    k = _constants(params)
    potential = k[_K_G2] * math.cos(q[1]) + k[_K_G3] * math.cos(q[1] + q[2])
    return float(0.5 * w @ mass_matrix(params, q) @ w + potential)


def simulate(
    params: ArmParams,
    law: Law,
    q0: npt.ArrayLike,
    qdot0: npt.ArrayLike,
    q_target: npt.ArrayLike,
    t_end: float,
    dt: float,
    control_period: float | None = None,
    kp: float = 36.0,
    kd: float = 12.0,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Step response of the arm under a control law, fixed-step RK4 of dt: arrays (t, q, qdot, torque).

    The law (``"ct"``: Q = A(K_P·e + K_D·ė) + C + g; ``"pdg"``: Q = K_P·e + K_D·ė + g; ``"pd"``: K_P·e + K_D·ė)
    takes e = q_target − q and ė = −q̇ (the step is applied without its derivative impulse).
    ``control_period=None`` evaluates it continuously (at every RK4 stage); a period, a whole multiple of dt,
    samples it at t = 0, period, 2·period, … and holds it (a servo loop). ``torque[n]`` is the torque at t[n]
    (continuous) or the one held from t[n] on. ``t`` has round(t_end/dt) + 1 samples.
    """
    if law not in LAWS:
        raise ValueError(f"law must be one of {sorted(LAWS)}, got {law!r}")
    for name, v in (("t_end", t_end), ("dt", dt), ("kp", kp), ("kd", kd)):
        if not math.isfinite(v) or v < 0.0:
            raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
    if not dt > 0.0:
        raise ValueError(f"dt must be > 0, got {dt!r}")
    hold_steps = 0
    if control_period is not None:
        hold_steps = round(control_period / dt)
        if hold_steps < 1 or abs(hold_steps * dt - control_period) > 1e-9 * control_period:
            raise ValueError(f"control_period must be a whole multiple of dt, got {control_period!r} and {dt!r}")
    n = round(t_end / dt)
    x = np.concatenate([_vec3("q0", q0), _vec3("qdot0", qdot0)])
    out_x = np.empty((n + 1, 6))
    out_tau = np.empty((n + 1, 3))
    _simulate(_constants(params), LAWS[law], float(kp), float(kd), _vec3("q_target", q_target), x, float(dt),
              hold_steps, out_x, out_tau)
    return np.arange(n + 1, dtype=np.float64) * dt, out_x[:, :3].copy(), out_x[:, 3:].copy(), out_tau
