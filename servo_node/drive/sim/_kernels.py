"""The numba half of the embedded drive (link shape ``DRIVE_SIM``): one ``sim_plant`` joint in the loop.

:func:`measure` steps the joint to the tick's time and reads it; :func:`command` sets the motor (velocity control
with the force limit, force control, or passive). The Python half is :class:`~._drive.SimDrive`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sim_plant._kernels import (
    MODE_FORCE,
    S_ACCELERATION,
    S_CONTROL_MODE,
    S_FORCE_COMMAND,
    S_MOTOR_FORCE,
    S_MOTOR_FORCE_FEEDBACK,
    S_POSITION,
    S_VELOCITY,
    command_force,
    command_motor_force,
    command_velocity,
    step_joints,
)

from .._base import DriveArrays
from .._measurement import M_A, M_AGE, M_F, M_FRESH, M_P, M_V


@njit(cache=True, nogil=True)
def measure(d: DriveArrays, dt: float, meas: np.ndarray) -> None:
    """Step the joint by ``dt`` [second] (zero-order hold of the last command) and read (p, v, a, f)."""
    if dt > 0.0:
        step_joints(d.params, d.state, dt)
    s = d.state
    meas[M_P] = s[0, S_POSITION]
    meas[M_V] = s[0, S_VELOCITY]
    meas[M_A] = s[0, S_ACCELERATION]
    if s[0, S_CONTROL_MODE] == MODE_FORCE:
        fm = s[0, S_MOTOR_FORCE]
        meas[M_F] = min(max(s[0, S_FORCE_COMMAND], -fm), fm)
    else:
        meas[M_F] = s[0, S_MOTOR_FORCE_FEEDBACK]
    meas[M_FRESH] = 1.0
    meas[M_AGE] = 0.0


@njit(cache=True, nogil=True)
def command(d: DriveArrays, engaged: bool, torque: bool, v_cmd: float, f_cmd: float, f_lim: float) -> None:
    """Velocity (``torque`` False) or force command within ``f_lim``; disengaged: no motor force (passive)."""
    if not engaged:
        command_force(d.params, d.state, 0, 0.0)
        return
    command_motor_force(d.params, d.state, 0, f_lim)
    if torque:
        command_force(d.params, d.state, 0, f_cmd)
    else:
        command_velocity(d.params, d.state, 0, v_cmd)

