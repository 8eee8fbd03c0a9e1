"""The numba half of the embedded drive (link shape ``DRIVE_SIM``): one ``sim_plant`` joint in the loop.

:func:`measure` steps the joint to the tick's time and reads it; :func:`command` sets the motor (velocity control
with the force limit, force control, or passive). The Python half is :class:`~._drive.SimDrive`.

A velocity command is reached *over the coming period*, as the loop's velocity law assumes (its feed-forward is the
velocity the reference has at the period's end, :mod:`servo_node.control._law`): the motor's target velocity
ramps there at the Webots acceleration limit |Δv|/period (or the joint's own ``sim.acceleration``, if lower), so
the joint's position advances by the mean of the two velocities over the period whatever the number of substeps
the period is stepped in. Left unlimited, the motor reached the command in its first substep and held it: with one
substep per period the same, but a period stepped in two or more (a loop slower than 1 kHz, a late tick, or a
1 ms period that rounding made a hair longer than the 1 ms substep) ran a·(T − h)/2 ahead of an accelerating
reference per tick, a tracking error a·(T − h)/(2k) that came and went with the ticks' lengths, different on
every node of a coordinated move.

The joint is stepped over the time since the last tick with the last command held, as a drive runs on at the last
velocity it was given. Like a drive's command watchdog, the embedded drive holds a command for at most
:func:`watchdog_s` and then brakes (zero velocity within the motor force in use) until the next command: a loop
stalled for longer (its process stopped or starved on the monotonic clock) finds its joint braked near where the
stall began, not run on for the whole stall (0.6 s at 2 rad/s ran a joint 1.1 rad past its target).
"""

from __future__ import annotations

import numpy as np

from sim_plant._kernels import (
    MODE_FORCE,
    P_ACCELERATION,
    S_ACCELERATION,
    S_CONTROL_MODE,
    S_FORCE_COMMAND,
    S_MOTOR_FORCE,
    S_MOTOR_FORCE_FEEDBACK,
    S_POSITION,
    S_VC,
    S_VELOCITY,
    command_acceleration,
    command_force,
    command_motor_force,
    command_velocity,
    step_joints,
)

from ..._jit import tick_jit
from .._base import DriveArrays
from .._measurement import M_A, M_AGE, M_F, M_FRESH, M_P, M_TAKING, M_V

WATCHDOG_S = 0.05
"""The embedded drive holds a command for at least this long [second] (or :data:`WATCHDOG_PERIODS` loop periods)."""
WATCHDOG_PERIODS = 5.0


@tick_jit
def watchdog_s(period: float) -> float:
    """How long the embedded drive holds a command before it brakes [second], for a loop of this ``period``."""
    return max(WATCHDOG_S, WATCHDOG_PERIODS * period)


@tick_jit
def measure(d: DriveArrays, dt: float, period: float, meas: np.ndarray) -> None:
    """Step the joint by ``dt`` [second] (zero-order hold of the last command, then the watchdog's brake when
    ``dt`` exceeds :func:`watchdog_s`) and read (p, v, a, f)."""
    hold = watchdog_s(period)
    s = d.state
    passive = s[0, S_CONTROL_MODE] == MODE_FORCE and s[0, S_FORCE_COMMAND] == 0.0
    if dt > hold and not passive:
        step_joints(d.params, s, hold)
        command_acceleration(d.params, s, 0, d.params[0, P_ACCELERATION])  # The joint's own limit, not a ramp.
        command_velocity(d.params, s, 0, 0.0)  # The watchdog: zero velocity within the motor force in use.
        step_joints(d.params, s, dt - hold)
    elif dt > 0.0:
        step_joints(d.params, s, dt)
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
    meas[M_TAKING] = 1.0


@tick_jit
def command(d: DriveArrays, engaged: bool, torque: bool, v_cmd: float, f_cmd: float, f_lim: float,
            period: float) -> None:
    """Velocity (``torque`` False, reached over ``period``: see the module docstring) or force command within
    ``f_lim``; disengaged: no motor force (passive)."""
    s = d.state
    if not engaged:
        command_force(d.params, s, 0, 0.0)
        return
    command_motor_force(d.params, s, 0, f_lim)
    if torque:
        command_force(d.params, s, 0, f_cmd)
        return
    if s[0, S_CONTROL_MODE] == MODE_FORCE:
        s[0, S_VC] = s[0, S_VELOCITY]  # Out of force control: the ramp starts from the joint's velocity.
    ramp = abs(v_cmd - s[0, S_VC]) / period if period > 0.0 else -1.0
    own = d.params[0, P_ACCELERATION]
    command_acceleration(d.params, s, 0, ramp if own < 0.0 or ramp < 0.0 else min(ramp, own))
    command_velocity(d.params, s, 0, v_cmd)

