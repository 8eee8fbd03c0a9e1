"""Numba kernels of the simulated servo joints: plain float64 arrays in, no allocation per step.

Array layout (documented contract; other numba code, e.g. the servo node's nogil control loop, uses it directly):

* ``params[n_joints, N_PARAMS]`` — constant description of each joint, indexed by the ``P_*`` constants.
* ``state[n_joints, N_STATE]`` — mutable state and commands of each joint, indexed by the ``S_*`` constants.

Units: rotational joints use rad, rad/s, rad/s², N·m, kg·m²; linear joints m, m/s, m/s², N, kg. The maths is the same.

Model of one joint (a body of inertia J on a 1-DOF joint relative to its parent body or the ground)::

    J·q'' = −K·q − B·q' + u_motor + f_command + load + gravity_load·sin(q)

* Webots position control, evaluated every internal substep h: ``Vc = P·(Pt − q)`` clipped to ±|Vd|; if A ≠ −1 the
  change of Vc per substep is limited to A·h.  Velocity control: target position ±inf, then ``Vc = ±Vd`` (sign of the
  target times the signed set velocity), still subject to A.  Soft limits clip the target.
* The motor (ODE joint-motor semantics) is a velocity constraint: ``u_motor`` is the constant force that makes the
  joint velocity equal Vc at the end of the substep given every other force, clipped to ±max(Fm, static_friction)
  (Webots: "the friction is the larger of maxForce and staticFriction").  A passive joint (Fm = 0, or force
  control) keeps a velocity-0 constraint limited to ±static_friction, i.e. static/Coulomb friction.
* Force control: ``f_command`` clipped to ±Fm is applied as a force; the P-controller and the motor are off.
* Integration: spring, damper and inertia form a linear system that is integrated *exactly* per substep with the
  matrix exponential (cached per joint and substep length); the motor/friction, commanded force, constant load and
  gravity load are held constant over the substep (zero-order hold).  The undamped spring therefore conserves energy
  to round-off and the spring-damper matches its closed-form solution.
* Hard stops: after each substep the position is clipped to [min_stop, max_stop] and velocity into the stop is
  removed (inelastic stop), so no force can pass a stop.

Serial coupling (a joint carried by another, e.g. a motor joint carrying a spring-damper joint): the child coordinate
q_c is relative to the parent body, both move along the same axis, so the absolute coordinates are x_p = q_p and
x_c = q_p + q_c.  The joint-space mass matrix is ``M = [[J_p + J_c, J_c], [J_c, J_c]]`` and
``M·q'' = −K·q − B·q' + u`` with diagonal K, B and u the joint forces (a child joint force reacts on the parent body;
external loads on the child body act on both coordinates).  The 4-dimensional linear part is again integrated exactly
and both motor constraints are solved together (a 2×2 box-constrained problem, solved by enumeration).  Supported
topology: chains of depth two (a root joint with at most one child that has no child); the Python wrapper validates
that and fills ``P_CHILD``.

Stepping paths, all giving the same results bit for bit (``tests/sim_plant/test_fast_paths.py``): ``step_joints``
runs a call-free lean loop over the common case (uncoupled joint, one substep, cached matrices valid for dt, no
gravity load) and the general path (substeps, cache refresh, sin, chains) for the rest; ``step_joints_parallel``
does the same over numba threads in blocks of ``PARALLEL_BLOCK`` joints; ``step_joints_general`` is the general path
for every joint (the reference).

Numba caveat for callers: ``cache=True`` caches are invalidated by changes to the caller's own file only, so a
cached ``@njit`` function elsewhere that calls these kernels keeps stale machine code after this file changes
(clear its ``__pycache__/*.nbi``/``*.nbc`` or bump its source).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numba import njit, prange

FloatArray = npt.NDArray[np.float64]

# ---- params columns -------------------------------------------------------------------------------------------
P_KIND = 0  # 0 = rotational (rad, N·m), 1 = linear (m, N); metadata only
P_INERTIA = 1  # [kg·m²] or [kg], > 0
P_MAX_VELOCITY = 2  # velocity limit [rad/s] or [m/s]; set velocities are clipped to it
P_MAX_FORCE = 3  # largest available motor force [N·m] or [N]
P_CONTROL_P = 4  # initial P gain [1/s]
P_ACCELERATION = 5  # initial acceleration limit A [rad/s²] or [m/s²]; −1 = unlimited
P_POSITION = 6  # initial position
P_MIN_POSITION = 7  # soft limits (clip the target); both zero = off
P_MAX_POSITION = 8
P_MIN_STOP = 9  # hard stops (≤ 0 and ≥ 0); both zero = off
P_MAX_STOP = 10
P_SPRING_CONSTANT = 11  # K [N·m/rad] or [N/m]; rest position 0
P_DAMPING_CONSTANT = 12  # B [N·m·s/rad] or [N·s/m]
P_STATIC_FRICTION = 13  # [N·m] or [N]
P_LOAD = 14  # constant external force on the body [N·m] or [N]
P_GRAVITY_LOAD = 15  # amplitude G of the load G·sin(x) on the body, x its absolute coordinate [N·m] or [N]
P_PARENT = 16  # index of the joint carrying this one, −1 = ground
P_CHILD = 17  # index of the joint carried by this one, −1 = none (derived from P_PARENT by the wrapper)
N_PARAMS = 18

# ---- state columns --------------------------------------------------------------------------------------------
S_POSITION = 0
S_VELOCITY = 1
S_ACCELERATION = 2  # mean acceleration over the last internal substep
S_MOTOR_FORCE_FEEDBACK = 3  # force the motor used in the last substep (0 in force control / passive)
S_CONTROL_MODE = 4  # MODE_POSITION, MODE_VELOCITY or MODE_FORCE
S_TARGET_POSITION = 5  # Pt (±inf in velocity control)
S_TARGET_VELOCITY = 6  # Vd, signed (sign used in velocity control, |Vd| caps Vc in position control)
S_ACCELERATION_LIMIT = 7  # A, −1 = unlimited
S_MOTOR_FORCE = 8  # currently available motor force Fm (≤ max_force)
S_CONTROL_P = 9  # P
S_FORCE_COMMAND = 10  # force of set_force (force control)
S_VC = 11  # current motor target velocity Vc (the controller's output of the last substep)
S_TIME = 12  # simulated time [s]
S_CACHE_H = 13  # substep length of the cached transition matrices; 0 = invalid (set 0 after editing params)
S_CACHE = 14  # private: Φ (row-major, 2×2 or 4×4) then Γ (2×1 or 4×2) of the exact integrator
N_CACHE = 24
N_STATE = S_CACHE + N_CACHE

MODE_POSITION = 0.0
MODE_VELOCITY = 1.0
MODE_FORCE = 2.0

MAX_SUBSTEP_S = 1e-3  # internal substep bound [s]
PARALLEL_BLOCK = 256  # joints per block of step_joints_parallel
_P_SUBSTEP_FACTOR = 0.1  # P·h ≤ this
_OMEGA_SUBSTEP_FACTOR = 0.5  # ω·h ≤ this keeps the motor's velocity response positive and accurate


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _clip(x: float, lo: float, hi: float) -> float:
    """Clip x into [lo, hi]."""
    return lo if x < lo else (hi if x > hi else x)


# ---- commands (callable from other numba code; inlined there, so a 1 kHz loop over 1000 joints stays cheap) -----
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def command_position(params: FloatArray, state: FloatArray, i: int, position: float) -> None:
    """Webots set_position: target position (±inf selects velocity control); restores position control."""
    state[i, S_TARGET_POSITION] = position
    state[i, S_CONTROL_MODE] = MODE_VELOCITY if math.isinf(position) else MODE_POSITION


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def set_desired_velocity(params: FloatArray, state: FloatArray, i: int, velocity: float) -> None:
    """Webots set_velocity: the desired velocity Vd (signed), clipped to ±max_velocity; mode unchanged."""
    vmax = params[i, P_MAX_VELOCITY]
    state[i, S_TARGET_VELOCITY] = _clip(velocity, -vmax, vmax)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def command_velocity(params: FloatArray, state: FloatArray, i: int, velocity: float) -> None:
    """Velocity control: target +inf and Vd = velocity (sign included, clipped to ±max_velocity)."""
    command_position(params, state, i, math.inf)
    set_desired_velocity(params, state, i, velocity)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def command_force(params: FloatArray, state: FloatArray, i: int, force: float) -> None:
    """Webots set_force: apply force (clipped to ±Fm at each substep) until the next position command."""
    state[i, S_FORCE_COMMAND] = force
    state[i, S_CONTROL_MODE] = MODE_FORCE


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def command_acceleration(params: FloatArray, state: FloatArray, i: int, acceleration: float) -> None:
    """Webots set_acceleration: limit A of the change rate of Vc; any negative value means unlimited (−1)."""
    state[i, S_ACCELERATION_LIMIT] = acceleration if acceleration >= 0.0 else -1.0


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def command_motor_force(params: FloatArray, state: FloatArray, i: int, force: float) -> None:
    """Webots set_motor_force: available motor force, clipped to [0, max_force]."""
    state[i, S_MOTOR_FORCE] = _clip(force, 0.0, params[i, P_MAX_FORCE])


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def command_control_p(params: FloatArray, state: FloatArray, i: int, p: float) -> None:
    """Webots set_control_p: the P gain of the position controller (negative values become 0)."""
    state[i, S_CONTROL_P] = p if p > 0.0 else 0.0


@njit(cache=True, nogil=True, error_model="numpy")
def reset_state(params: FloatArray, state: FloatArray, i: int) -> None:
    """Initialise joint i from its params: at rest at the initial position, holding it under position control."""
    for c in range(N_STATE):
        state[i, c] = 0.0
    state[i, S_POSITION] = params[i, P_POSITION]
    state[i, S_CONTROL_MODE] = MODE_POSITION
    state[i, S_TARGET_POSITION] = params[i, P_POSITION]
    state[i, S_TARGET_VELOCITY] = params[i, P_MAX_VELOCITY]
    state[i, S_ACCELERATION_LIMIT] = params[i, P_ACCELERATION]
    state[i, S_MOTOR_FORCE] = params[i, P_MAX_FORCE]
    state[i, S_CONTROL_P] = params[i, P_CONTROL_P]


# ---- exact linear integrator --------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _matmul(a: FloatArray, b: FloatArray, out: FloatArray) -> None:
    """out = a @ b for small square matrices (no BLAS needed)."""
    n = a.shape[0]
    for r in range(n):
        for c in range(n):
            s = 0.0
            for k in range(n):
                s += a[r, k] * b[k, c]
            out[r, c] = s


@njit(cache=True, nogil=True, error_model="numpy")
def _expm(a: FloatArray) -> FloatArray:
    """Matrix exponential by scaling and squaring of a Taylor series (accurate to round-off for small matrices)."""
    n = a.shape[0]
    norm = 0.0
    for r in range(n):
        s = 0.0
        for c in range(n):
            s += abs(a[r, c])
        norm = max(norm, s)
    squarings = 0
    while norm > 0.125:
        norm *= 0.5
        squarings += 1
    x = a * (0.5**squarings)
    result = np.eye(n)
    term = np.eye(n)
    tmp = np.empty((n, n))
    for k in range(1, 19):
        _matmul(term, x, tmp)
        term[:, :] = tmp / k
        result += term
    for _ in range(squarings):
        _matmul(result, result, tmp)
        result[:, :] = tmp
    return result


@njit(cache=True, nogil=True, error_model="numpy")
def _update_cache_single(params: FloatArray, state: FloatArray, i: int, h: float) -> None:
    """Cache Φ = exp(A·h), Γ = ∫exp(A·s)ds·b of J·q'' = −K·q − B·q' + f for joint i, with 1/Γ_v and 1/h."""
    inv_j = 1.0 / params[i, P_INERTIA]
    aug = np.zeros((3, 3))
    aug[0, 1] = h
    aug[1, 0] = -params[i, P_SPRING_CONSTANT] * inv_j * h
    aug[1, 1] = -params[i, P_DAMPING_CONSTANT] * inv_j * h
    aug[1, 2] = inv_j * h
    e = _expm(aug)
    c = S_CACHE
    state[i, c + 0] = e[0, 0]
    state[i, c + 1] = e[0, 1]
    state[i, c + 2] = e[1, 0]
    state[i, c + 3] = e[1, 1]
    state[i, c + 4] = e[0, 2]
    state[i, c + 5] = e[1, 2]
    state[i, c + 6] = 1.0 / e[1, 2] if e[1, 2] > 0.0 else 0.0  # 0: no motor/friction (cannot happen for h > 0)
    state[i, c + 7] = 1.0 / h
    state[i, S_CACHE_H] = h


@njit(cache=True, nogil=True, error_model="numpy")
def _update_cache_pair(params: FloatArray, state: FloatArray, p: int, c: int, h: float) -> None:
    """Cache the 4×4 Φ and 4×2 Γ of the parent p / child c chain on the parent's state row."""
    jp = params[p, P_INERTIA]
    jc = params[c, P_INERTIA]
    # M⁻¹ of M = [[jp + jc, jc], [jc, jc]]
    minv = np.array([[1.0 / jp, -1.0 / jp], [-1.0 / jp, 1.0 / jp + 1.0 / jc]])
    k = (params[p, P_SPRING_CONSTANT], params[c, P_SPRING_CONSTANT])
    b = (params[p, P_DAMPING_CONSTANT], params[c, P_DAMPING_CONSTANT])
    aug = np.zeros((6, 6))
    aug[0, 2] = h
    aug[1, 3] = h
    for r in range(2):
        for col in range(2):
            aug[2 + r, col] = -minv[r, col] * k[col] * h
            aug[2 + r, 2 + col] = -minv[r, col] * b[col] * h
            aug[2 + r, 4 + col] = minv[r, col] * h
    e = _expm(aug)
    base = S_CACHE
    for r in range(4):
        for col in range(4):
            state[p, base + 4 * r + col] = e[r, col]
    for r in range(4):
        for col in range(2):
            state[p, base + 16 + 2 * r + col] = e[r, 4 + col]
    state[p, S_CACHE_H] = h


# ---- controller ---------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _webots_vc(
    target: float, vd: float, lo: float, hi: float, p: float, a: float, vc_prev: float, q: float, h: float
) -> float:
    """Webots servo controller: Vc = P·(Pt − q) clipped to ±|Vd|, its change per substep limited to A·h (A ≥ 0).

    Target ±inf is velocity control (Vc = ±Vd, sign of target times sign of Vd); soft limits [lo, hi] (both zero =
    off) clip the target, and in velocity control make it position control towards the limit ahead.
    """
    limited = lo != 0.0 or hi != 0.0
    vmax = abs(vd)
    if math.isinf(target):
        direction = (1.0 if target > 0.0 else -1.0) * (1.0 if vd >= 0.0 else -1.0)
        if limited:
            vc = _clip(p * ((hi if direction > 0.0 else lo) - q), -vmax, vmax)
        else:
            vc = direction * vmax
    else:
        if limited:
            target = _clip(target, lo, hi)
        vc = _clip(p * (target - q), -vmax, vmax)
    if a >= 0.0:
        vc = vc_prev + _clip(vc - vc_prev, -a * h, a * h)
    return vc


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _controller_velocity(params: FloatArray, state: FloatArray, i: int, q: float, h: float) -> float:
    """Run joint i's Webots controller for one substep; stores and returns Vc."""
    vc = _webots_vc(
        state[i, S_TARGET_POSITION],
        state[i, S_TARGET_VELOCITY],
        params[i, P_MIN_POSITION],
        params[i, P_MAX_POSITION],
        state[i, S_CONTROL_P],
        state[i, S_ACCELERATION_LIMIT],
        state[i, S_VC],
        q,
        h,
    )
    state[i, S_VC] = vc
    return vc


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _drive(params: FloatArray, state: FloatArray, i: int, q: float, h: float) -> tuple[float, float, float, bool]:
    """This substep's (commanded force, constraint target velocity, constraint force limit, motor active)."""
    fm = state[i, S_MOTOR_FORCE]
    fs = params[i, P_STATIC_FRICTION]
    if state[i, S_CONTROL_MODE] == MODE_FORCE:
        return _clip(state[i, S_FORCE_COMMAND], -fm, fm), 0.0, fs, False
    vc = _controller_velocity(params, state, i, q, h)
    if fm > 0.0:
        return 0.0, vc, max(fm, fs), True
    return 0.0, 0.0, fs, False


@njit(cache=True, nogil=True, error_model="numpy")
def _substep_count(dt: float, p: float, omega2: float) -> int:
    """Number n of internal substeps of dt [s] so that h = dt/n ≤ MAX_SUBSTEP_S, P·h ≤ 0.1 and ω·h ≤ 0.5.

    P is the active P gain (0 in force control) and ω² [1/s²] the stiffness of the joint or chain; the common case
    n = 1 is decided with multiplications only (this runs for every joint on every step).
    """
    if (
        dt <= MAX_SUBSTEP_S
        and p * dt <= _P_SUBSTEP_FACTOR
        and omega2 * dt * dt <= _OMEGA_SUBSTEP_FACTOR * _OMEGA_SUBSTEP_FACTOR
    ):
        return 1
    rate = max(1.0 / MAX_SUBSTEP_S, p / _P_SUBSTEP_FACTOR, math.sqrt(omega2) / _OMEGA_SUBSTEP_FACTOR)
    n: int = math.ceil(dt * rate * (1.0 - 1e-12))
    return n if n > 1 else 1


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _substep_length(params: FloatArray, state: FloatArray, i: int, omega2: float, dt: float) -> tuple[int, float]:
    """Number and length [s] of internal substeps of dt for joint i (group stiffness ω² [1/s²])."""
    p = 0.0 if state[i, S_CONTROL_MODE] == MODE_FORCE else state[i, S_CONTROL_P]
    n = _substep_count(dt, p, omega2)
    return n, dt / n


@njit(cache=True, nogil=True, error_model="numpy")
def _stop_scalar(lo: float, hi: float, q: float, v: float) -> tuple[float, float]:
    """Hard stops [lo, hi] (both zero = off) on (q, v): clip q, remove velocity into the stop."""
    if lo == 0.0 and hi == 0.0:
        return q, v
    if q <= lo:
        return lo, (v if v > 0.0 else 0.0)
    if q >= hi:
        return hi, (v if v < 0.0 else 0.0)
    return q, v


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _stop(params: FloatArray, i: int, q: float, v: float) -> tuple[float, float, bool]:
    """Apply joint i's hard stops to (q, v): clip q and remove velocity into the stop; flag whether one was hit."""
    lo = params[i, P_MIN_STOP]
    hi = params[i, P_MAX_STOP]
    if lo == 0.0 and hi == 0.0:
        return q, v, False
    if q <= lo:
        return lo, (v if v > 0.0 else 0.0), True
    if q >= hi:
        return hi, (v if v < 0.0 else 0.0), True
    return q, v, False


# ---- stepping -----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _solve_box2(
    g00: float, g01: float, g10: float, g11: float, r0: float, r1: float, lim0: float, lim1: float
) -> tuple[float, float]:
    """Solve G·u = r for u within the boxes |u_j| ≤ lim_j (lim 0 = inactive), complementary at the bounds.

    A bounded component must push the way its residual wants (mixed LCP of the two velocity constraints); the 9
    active-set combinations are tried in order, free ones first.
    """
    best0 = 0.0
    best1 = 0.0
    best_err = math.inf
    for s0 in (0, -1, 1):
        if lim0 <= 0.0 and s0 != 0:
            continue
        for s1 in (0, -1, 1):
            if lim1 <= 0.0 and s1 != 0:
                continue
            u0 = 0.0
            u1 = 0.0
            if lim0 > 0.0 and s0 != 0:
                u0 = s0 * lim0
            if lim1 > 0.0 and s1 != 0:
                u1 = s1 * lim1
            free0 = lim0 > 0.0 and s0 == 0
            free1 = lim1 > 0.0 and s1 == 0
            if free0 and free1:
                det = g00 * g11 - g01 * g10
                if det == 0.0:
                    continue
                u0 = (r0 * g11 - g01 * r1) / det
                u1 = (g00 * r1 - g10 * r0) / det
            elif free0:
                u0 = (r0 - g01 * u1) / g00
            elif free1:
                u1 = (r1 - g10 * u0) / g11
            # feasibility: free components within their box; bounded ones pushing the way the residual wants
            res0 = r0 - g00 * u0 - g01 * u1
            res1 = r1 - g10 * u0 - g11 * u1
            err = 0.0
            if free0:
                err += max(0.0, abs(u0) - lim0) / lim0
            elif s0 != 0:
                err += max(0.0, -s0 * res0) / (abs(r0) + g00 * lim0)
            if free1:
                err += max(0.0, abs(u1) - lim1) / lim1
            elif s1 != 0:
                err += max(0.0, -s1 * res1) / (abs(r1) + g11 * lim1)
            if err < best_err:
                best_err = err
                best0 = u0
                best1 = u1
                if err <= 1e-12:
                    return _clip(best0, -lim0, lim0), _clip(best1, -lim1, lim1)
    return _clip(best0, -lim0, lim0), _clip(best1, -lim1, lim1)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _row(state: FloatArray, p: int, r: int, z0: float, z1: float, z2: float, z3: float, u0: float, u1: float) -> float:
    """Row r of Φ·z + Γ·u from the pair cache on state row p."""
    b = S_CACHE + 4 * r
    g = S_CACHE + 16 + 2 * r
    return (
        state[p, b] * z0
        + state[p, b + 1] * z1
        + state[p, b + 2] * z2
        + state[p, b + 3] * z3
        + state[p, g] * u0
        + state[p, g + 1] * u1
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _step_pair(params: FloatArray, state: FloatArray, p: int, c: int, dt: float) -> None:
    """Advance the chain of parent joint p carrying child joint c by dt [s] (exact coupled linear part)."""
    jp = params[p, P_INERTIA]
    jc = params[c, P_INERTIA]
    omega2 = params[p, P_SPRING_CONSTANT] / jp + params[c, P_SPRING_CONSTANT] * (1.0 / jp + 1.0 / jc)
    n_p, _h = _substep_length(params, state, p, omega2, dt)
    n_c, _h = _substep_length(params, state, c, omega2, dt)
    n = max(n_p, n_c)
    h = dt / n
    if state[p, S_CACHE_H] != h:
        _update_cache_pair(params, state, p, c, h)
    base = S_CACHE
    z0 = state[p, S_POSITION]
    z1 = state[c, S_POSITION]
    z2 = state[p, S_VELOCITY]
    z3 = state[c, S_VELOCITY]
    vp_prev = z2
    vc_prev = z3
    fb_p = 0.0
    fb_c = 0.0
    # velocity response of the joint velocities (rows 2, 3 of Γ) to the two joint forces
    g00 = state[p, base + 20]
    g01 = state[p, base + 21]
    g10 = state[p, base + 22]
    g11 = state[p, base + 23]
    for _ in range(n):
        fcmd_p, vt_p, lim_p, on_p = _drive(params, state, p, z0, h)
        fcmd_c, vt_c, lim_c, on_c = _drive(params, state, c, z1, h)
        ext_p = params[p, P_LOAD]
        if params[p, P_GRAVITY_LOAD] != 0.0:
            ext_p += params[p, P_GRAVITY_LOAD] * math.sin(z0)
        ext_c = params[c, P_LOAD]
        if params[c, P_GRAVITY_LOAD] != 0.0:
            ext_c += params[c, P_GRAVITY_LOAD] * math.sin(z0 + z1)
        # generalised forces: a force on the child body acts on both coordinates
        u0 = fcmd_p + ext_p + ext_c
        u1 = fcmd_c + ext_c
        n0 = _row(state, p, 0, z0, z1, z2, z3, u0, u1)
        n1 = _row(state, p, 1, z0, z1, z2, z3, u0, u1)
        n2 = _row(state, p, 2, z0, z1, z2, z3, u0, u1)
        n3 = _row(state, p, 3, z0, z1, z2, z3, u0, u1)
        m0, m1 = _solve_box2(g00, g01, g10, g11, vt_p - n2, vt_c - n3, lim_p, lim_c)
        n0 += state[p, base + 16] * m0 + state[p, base + 17] * m1
        n1 += state[p, base + 18] * m0 + state[p, base + 19] * m1
        n2 += g00 * m0 + g01 * m1
        n3 += g10 * m0 + g11 * m1
        # hard stops: child first (inelastic, momentum conserving), then parent (ground absorbs), child again
        q1, v1, hit = _stop(params, c, n1, n3)
        if hit and v1 != n3:
            n2 = (jp * n2 + jc * (n2 + n3)) / (jp + jc)
        n1 = q1
        n3 = v1
        q0, v0, hit = _stop(params, p, n0, n2)
        if hit and v0 != n2:
            n3 += n2 - v0  # the child keeps its absolute velocity
        n0 = q0
        n2 = v0
        n1, n3, hit = _stop(params, c, n1, n3)
        vp_prev = z2
        vc_prev = z3
        z0, z1, z2, z3 = n0, n1, n2, n3
        fb_p = _clip(m0, -state[p, S_MOTOR_FORCE], state[p, S_MOTOR_FORCE]) if on_p else 0.0
        fb_c = _clip(m1, -state[c, S_MOTOR_FORCE], state[c, S_MOTOR_FORCE]) if on_c else 0.0
    state[p, S_POSITION] = z0
    state[c, S_POSITION] = z1
    state[p, S_VELOCITY] = z2
    state[c, S_VELOCITY] = z3
    state[p, S_ACCELERATION] = (z2 - vp_prev) / h
    state[c, S_ACCELERATION] = (z3 - vc_prev) / h
    state[p, S_MOTOR_FORCE_FEEDBACK] = fb_p
    state[c, S_MOTOR_FORCE_FEEDBACK] = fb_c
    state[p, S_TIME] += dt
    state[c, S_TIME] += dt


@njit(cache=True, nogil=True, error_model="numpy")
def _step_single(params: FloatArray, state: FloatArray, i: int, dt: float) -> None:
    """Advance uncoupled joint i by dt [s]: the general path (any substep count, cache refresh, gravity load)."""
    inertia = params[i, P_INERTIA]
    force_mode = state[i, S_CONTROL_MODE] == MODE_FORCE
    p = state[i, S_CONTROL_P]
    spring = params[i, P_SPRING_CONSTANT]
    p_active = 0.0 if force_mode else p
    n = 1
    h = dt
    if not (
        dt <= MAX_SUBSTEP_S
        and p_active * dt <= _P_SUBSTEP_FACTOR
        and spring * dt * dt <= _OMEGA_SUBSTEP_FACTOR * _OMEGA_SUBSTEP_FACTOR * inertia
    ):
        n = _substep_count(dt, p_active, spring / inertia)
        h = dt / n
    if state[i, S_CACHE_H] != h:
        _update_cache_single(params, state, i, h)
    c = S_CACHE
    f00 = state[i, c + 0]
    f01 = state[i, c + 1]
    f10 = state[i, c + 2]
    f11 = state[i, c + 3]
    g0 = state[i, c + 4]
    g1 = state[i, c + 5]
    inv_g1 = state[i, c + 6]
    inv_h = state[i, c + 7]
    load = params[i, P_LOAD]
    gravity = params[i, P_GRAVITY_LOAD]
    fm = state[i, S_MOTOR_FORCE]
    fs = params[i, P_STATIC_FRICTION]
    f_cmd = _clip(state[i, S_FORCE_COMMAND], -fm, fm) if force_mode else 0.0
    motor_on = fm > 0.0 and not force_mode
    limit = max(fm, fs) if motor_on else fs
    target = state[i, S_TARGET_POSITION]
    vd = state[i, S_TARGET_VELOCITY]
    lo = params[i, P_MIN_POSITION]
    hi = params[i, P_MAX_POSITION]
    a = state[i, S_ACCELERATION_LIMIT]
    stop_lo = params[i, P_MIN_STOP]
    stop_hi = params[i, P_MAX_STOP]
    vc = state[i, S_VC]
    q = state[i, S_POSITION]
    v = state[i, S_VELOCITY]
    v_prev = v
    u = 0.0
    for _ in range(n):
        f = f_cmd + load
        if gravity != 0.0:
            f += gravity * math.sin(q)
        v_target = 0.0
        if not force_mode:
            vc = _webots_vc(target, vd, lo, hi, p, a, vc, q, h)
            if motor_on:
                v_target = vc
        q_new = f00 * q + f01 * v + g0 * f
        v_new = f10 * q + f11 * v + g1 * f
        u = 0.0
        if limit > 0.0:
            u = _clip((v_target - v_new) * inv_g1, -limit, limit)
            q_new += g0 * u
            v_new += g1 * u
        v_prev = v
        q, v = _stop_scalar(stop_lo, stop_hi, q_new, v_new)
    state[i, S_POSITION] = q
    state[i, S_VELOCITY] = v
    state[i, S_VC] = vc
    state[i, S_ACCELERATION] = (v - v_prev) * inv_h
    state[i, S_MOTOR_FORCE_FEEDBACK] = _clip(u, -fm, fm) if motor_on else 0.0
    state[i, S_TIME] += dt


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _lean_ok(
    parent: float, child: float, gravity: float, cache_h: float, mode: float, p: float, k: float, j: float, dt: float
) -> bool:
    """Whether an uncoupled joint takes the lean path for dt: one substep, cache valid for h = dt, no gravity load.

    Its inputs (params, mode, P, cached h) are not changed by stepping, so the answer is the same before and after
    the joint's lean step; ``_step_rest`` relies on that to find the joints the lean loop left.  Scalar arguments on
    purpose: a numba-inlined helper taking the arrays costs an NRT incref/decref pair per call.
    """
    p_active = 0.0 if mode == MODE_FORCE else p
    return (
        parent < 0.0
        and child < 0.0
        and gravity == 0.0
        and cache_h == dt
        and dt <= MAX_SUBSTEP_S
        and p_active * dt <= _P_SUBSTEP_FACTOR
        and k * dt * dt <= _OMEGA_SUBSTEP_FACTOR * _OMEGA_SUBSTEP_FACTOR * j
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _step_lean(params: FloatArray, state: FloatArray, start: int, stop: int, dt: float) -> bool:
    """Advance the joints start..stop−1 that are ``_lean_ok`` by dt [s]; True if any other joint is in the range.

    The loop body is ``_step_single``'s arithmetic for n = 1, bit for bit, written inline and free of calls: a
    possible call, even a rare one, makes the compiler spill the loop's live values around it, and numba-inlined
    helpers taking the arrays add reference counting per joint.  This loop is the plant's hot path.
    """
    rest = False
    for i in range(start, stop):
        mode = state[i, S_CONTROL_MODE]
        p = state[i, S_CONTROL_P]
        if not _lean_ok(
            params[i, P_PARENT],
            params[i, P_CHILD],
            params[i, P_GRAVITY_LOAD],
            state[i, S_CACHE_H],
            mode,
            p,
            params[i, P_SPRING_CONSTANT],
            params[i, P_INERTIA],
            dt,
        ):
            rest = True
            continue
        force_mode = mode == MODE_FORCE
        c = S_CACHE
        f00 = state[i, c + 0]
        f01 = state[i, c + 1]
        f10 = state[i, c + 2]
        f11 = state[i, c + 3]
        g0 = state[i, c + 4]
        g1 = state[i, c + 5]
        inv_g1 = state[i, c + 6]
        inv_h = state[i, c + 7]
        fm = state[i, S_MOTOR_FORCE]
        fs = params[i, P_STATIC_FRICTION]
        f = (_clip(state[i, S_FORCE_COMMAND], -fm, fm) if force_mode else 0.0) + params[i, P_LOAD]
        motor_on = fm > 0.0 and not force_mode
        limit = max(fm, fs) if motor_on else fs
        vc = state[i, S_VC]
        q = state[i, S_POSITION]
        v = state[i, S_VELOCITY]
        v_target = 0.0
        if not force_mode:
            vc = _webots_vc(
                state[i, S_TARGET_POSITION],
                state[i, S_TARGET_VELOCITY],
                params[i, P_MIN_POSITION],
                params[i, P_MAX_POSITION],
                p,
                state[i, S_ACCELERATION_LIMIT],
                vc,
                q,
                dt,
            )
            if motor_on:
                v_target = vc
        q_new = f00 * q + f01 * v + g0 * f
        v_new = f10 * q + f11 * v + g1 * f
        u = 0.0
        if limit > 0.0:
            u = _clip((v_target - v_new) * inv_g1, -limit, limit)
            q_new += g0 * u
            v_new += g1 * u
        q_new, v_new = _stop_scalar(params[i, P_MIN_STOP], params[i, P_MAX_STOP], q_new, v_new)
        state[i, S_POSITION] = q_new
        state[i, S_VELOCITY] = v_new
        state[i, S_VC] = vc
        state[i, S_ACCELERATION] = (v_new - v) * inv_h
        state[i, S_MOTOR_FORCE_FEEDBACK] = _clip(u, -fm, fm) if motor_on else 0.0
        state[i, S_TIME] += dt
    return rest


@njit(cache=True, nogil=True, error_model="numpy")
def _step_rest(params: FloatArray, state: FloatArray, start: int, stop: int, dt: float) -> None:
    """Advance the joints start..stop−1 that ``_step_lean`` left (a chain with its root) by dt: the general path."""
    for i in range(start, stop):
        if params[i, P_PARENT] >= 0.0 or _lean_ok(
            params[i, P_PARENT],
            params[i, P_CHILD],
            params[i, P_GRAVITY_LOAD],
            state[i, S_CACHE_H],
            state[i, S_CONTROL_MODE],
            state[i, S_CONTROL_P],
            params[i, P_SPRING_CONSTANT],
            params[i, P_INERTIA],
            dt,
        ):
            continue  # a child (stepped with its parent) or already stepped by _step_lean
        child = int(params[i, P_CHILD])
        if child >= 0:
            _step_pair(params, state, i, child, dt)
        else:
            _step_single(params, state, i, dt)


@njit(cache=True, nogil=True, error_model="numpy")
def step_joints_general(params: FloatArray, state: FloatArray, dt: float) -> None:
    """``step_joints`` with the general path for every joint (no lean loop): the reference the fast paths match."""
    if not dt > 0.0:
        return
    for i in range(params.shape[0]):
        if params[i, P_PARENT] >= 0.0:
            continue
        child = int(params[i, P_CHILD])
        if child >= 0:
            _step_pair(params, state, i, child, dt)
        else:
            _step_single(params, state, i, dt)


@njit(cache=True, nogil=True, error_model="numpy")
def step_joints(params: FloatArray, state: FloatArray, dt: float) -> None:
    """Advance every joint (serial chains together) by dt [s]; dt ≤ 0 does nothing.

    Two passes: a call-free loop over the common case (``_lean_ok``: uncoupled, one substep, valid cache, no gravity
    load), then, only if some joint did not qualify, the general path for the others (substeps, cache refresh, sin,
    chains).  Joints are independent apart from chains, so the order changes no result.  Serial, for the control
    loop's ``nogil`` thread; ``step_joints_parallel`` spreads large arrays over threads.
    """
    if not dt > 0.0:
        return
    n = params.shape[0]
    if _step_lean(params, state, 0, n, dt):
        _step_rest(params, state, 0, n, dt)


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def step_joints_parallel(params: FloatArray, state: FloatArray, dt: float) -> None:
    """``step_joints`` spread over numba's threads in blocks of ``PARALLEL_BLOCK`` joints; the same results bit for bit.

    A chain is stepped by the block holding its root, wherever the child's row is, so no row is touched by two
    blocks.  Worth it for large arrays only (a parallel launch costs microseconds); numba's thread count, not this
    kernel, decides how many blocks run at once, and any threading layer (workqueue included) works.
    """
    if not dt > 0.0:
        return
    n = params.shape[0]
    blocks = (n + PARALLEL_BLOCK - 1) // PARALLEL_BLOCK
    rest = np.zeros(blocks, dtype=np.bool_)
    for b in prange(blocks):
        rest[b] = _step_lean(params, state, b * PARALLEL_BLOCK, min(n, (b + 1) * PARALLEL_BLOCK), dt)
    if rest.any():
        for b in prange(blocks):
            if rest[b]:
                _step_rest(params, state, b * PARALLEL_BLOCK, min(n, (b + 1) * PARALLEL_BLOCK), dt)
