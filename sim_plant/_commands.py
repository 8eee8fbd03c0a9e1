"""The joint commands (Webots Servo semantics), callable from other numba code and inlined there, so a 1 kHz loop
over 1000 joints stays cheap.
"""

from __future__ import annotations

import math

from numba import njit

from ._layout import (
    MODE_FORCE,
    MODE_POSITION,
    MODE_VELOCITY,
    N_STATE,
    P_ACCELERATION,
    P_CONTROL_P,
    P_MAX_FORCE,
    P_MAX_VELOCITY,
    P_POSITION,
    S_ACCELERATION_LIMIT,
    S_CONTROL_MODE,
    S_CONTROL_P,
    S_FORCE_COMMAND,
    S_MOTOR_FORCE,
    S_POSITION,
    S_TARGET_POSITION,
    S_TARGET_VELOCITY,
    FloatArray,
    clip,
)


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
    state[i, S_TARGET_VELOCITY] = clip(velocity, -vmax, vmax)


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
    state[i, S_MOTOR_FORCE] = clip(force, 0.0, params[i, P_MAX_FORCE])


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

