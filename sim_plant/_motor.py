"""The motor of a joint: the Webots controller's target velocity Vc, the velocity constraint with its force limit
(and static friction for a passive joint), the substep length it needs, and the hard stops.

Shared with the coupled arm's motors (:mod:`sim_plant.arm_motors`): the position-control law
:func:`position_vc` on plain floats (and :func:`~sim_plant._layout.clip`), which the single joint's
:func:`webots_vc` uses too. The functions taking ``params``/``state`` are the single joint's array layout.
"""

from __future__ import annotations

import math

from numba import njit

from ._layout import (
    MAX_SUBSTEP_S,
    MODE_FORCE,
    P_MAX_POSITION,
    P_MAX_STOP,
    P_MIN_POSITION,
    P_MIN_STOP,
    P_STATIC_FRICTION,
    S_ACCELERATION_LIMIT,
    S_CONTROL_MODE,
    S_CONTROL_P,
    S_FORCE_COMMAND,
    S_MOTOR_FORCE,
    S_TARGET_POSITION,
    S_TARGET_VELOCITY,
    S_VC,
    SUBSTEP_OMEGA_MAX,
    SUBSTEP_P_MAX,
    FloatArray,
    clip,
)


# ---- controller ---------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def position_vc(p: float, target: float, q: float, vmax: float) -> float:
    """Position control's target velocity: Vc = P·(target − q) clipped to ±vmax (vmax = |Vd| ≥ 0)."""
    return clip(p * (target - q), -vmax, vmax)


@njit(cache=True, nogil=True, error_model="numpy")
def webots_vc(
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
            vc = position_vc(p, hi if direction > 0.0 else lo, q, vmax)
        else:
            vc = direction * vmax
    else:
        if limited:
            target = clip(target, lo, hi)
        vc = position_vc(p, target, q, vmax)
    if a >= 0.0:
        vc = vc_prev + clip(vc - vc_prev, -a * h, a * h)
    return vc


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def controller_velocity(params: FloatArray, state: FloatArray, i: int, q: float, h: float) -> float:
    """Run joint i's Webots controller for one substep; stores and returns Vc."""
    vc = webots_vc(
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
def motor_constraint(
    params: FloatArray, state: FloatArray, i: int, q: float, h: float
) -> tuple[float, float, float, bool]:
    """This substep's (commanded force, constraint target velocity, constraint force limit, motor active)."""
    fm = state[i, S_MOTOR_FORCE]
    fs = params[i, P_STATIC_FRICTION]
    if state[i, S_CONTROL_MODE] == MODE_FORCE:
        return clip(state[i, S_FORCE_COMMAND], -fm, fm), 0.0, fs, False
    vc = controller_velocity(params, state, i, q, h)
    if fm > 0.0:
        return 0.0, vc, max(fm, fs), True
    return 0.0, 0.0, fs, False


@njit(cache=True, nogil=True, error_model="numpy")
def substep_count(dt: float, p: float, omega2: float) -> int:
    """Number n of internal substeps of dt [s] so that h = dt/n ≤ MAX_SUBSTEP_S, P·h ≤ 0.1 and ω·h ≤ 0.5.

    P is the active P gain (0 in force control) and ω² [1/s²] the stiffness of the joint or chain; the common case
    n = 1 is decided with multiplications only (this runs for every joint on every step).
    """
    if (
        dt <= MAX_SUBSTEP_S
        and p * dt <= SUBSTEP_P_MAX
        and omega2 * dt * dt <= SUBSTEP_OMEGA_MAX * SUBSTEP_OMEGA_MAX
    ):
        return 1
    rate = max(1.0 / MAX_SUBSTEP_S, p / SUBSTEP_P_MAX, math.sqrt(omega2) / SUBSTEP_OMEGA_MAX)
    n: int = math.ceil(dt * rate * (1.0 - 1e-12))
    return n if n > 1 else 1


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def substep_length(params: FloatArray, state: FloatArray, i: int, omega2: float, dt: float) -> tuple[int, float]:
    """Number and length [s] of internal substeps of dt for joint i (group stiffness ω² [1/s²])."""
    p = 0.0 if state[i, S_CONTROL_MODE] == MODE_FORCE else state[i, S_CONTROL_P]
    n = substep_count(dt, p, omega2)
    return n, dt / n


@njit(cache=True, nogil=True, error_model="numpy")
def stop_scalar(lo: float, hi: float, q: float, v: float) -> tuple[float, float]:
    """Hard stops [lo, hi] (both zero = off) on (q, v): clip q, remove velocity into the stop."""
    if lo == 0.0 and hi == 0.0:
        return q, v
    if q <= lo:
        return lo, (v if v > 0.0 else 0.0)
    if q >= hi:
        return hi, (v if v < 0.0 else 0.0)
    return q, v


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def hard_stop(params: FloatArray, i: int, q: float, v: float) -> tuple[float, float, bool]:
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

