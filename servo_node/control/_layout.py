"""Index constants of the control loop's arrays, and the typed bundle the kernels take.

Every array is float64. ``cmd`` (written by the node) and ``out`` (written by the loop) are seqlocked: the writer
makes the sequence number odd, writes the fields, then makes it even; a reader retries while it is odd or changed
under it. So neither side ever blocks the other, and the numba loop never needs the GIL. Each shared array has
exactly one writer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..drive._base import DriveArrays

# ---- cmd: node -> loop (seqlocked; the node is the only writer)
C_SEQ = 0
C_MODE = 1
C_PT = 2  # target position
C_VT = 3  # target velocity
C_VMIN = 4
C_VMAX = 5
C_AMIN = 6
C_AMAX = 7
C_JMAX = 8
C_FLIM = 9  # force/torque limit
C_RX_T = 10  # reception time of the setpoint [second, loop clock]; the deadman counts from it
C_QUIT = 11  # nonzero ends the real-time loop
N_CMD = 12

MODE_IDLE = 0.0
MODE_POSITION = 1.0
MODE_VELOCITY = 2.0
MODE_STOP = 3.0  # jerk-limited stop to zero velocity, hold until at rest, then disengage
MODE_DISENGAGE = 4.0  # no force at once

# ---- cfg: fixed for the life of a loop
K_LAW = 0  # LAW_VELOCITY or LAW_TORQUE
K_VELOCITY_GAIN = 1  # [1/s]
K_KP = 2
K_KD = 3
K_INERTIA = 4
K_PERIOD = 5  # [second]
K_DRIVE = 6  # drive kind (drive._base.DRIVE_*)
K_FEEDBACK_TIMEOUT = 7  # [second]
K_STEPPED = 8  # 1: loop time advances exactly one period per tick (simulation time), paced by the wall clock
K_ARRIVAL_TOLERANCE = 9  # |p - p_target| that counts as arrived
K_REST_VELOCITY = 10  # |v| below which the joint is at rest and a stop may remove the force
K_STOP_HOLD_MAX = 11  # after a stop's plan, the longest hold waiting for rest before STOP_TIMEOUT [second]
K_ENV_V = 12  # envelope: |v| limit of any reference
K_ENV_A = 13  # envelope: |a| limit
K_ENV_J = 14  # envelope: |j| limit
K_ENV_F = 15  # envelope: force/torque limit
K_STOP_A = 16  # least deceleration of every stop
K_STOP_J = 17  # least jerk of every stop
K_FE_WINDOW = 18  # following-error window |p_ref - p|
K_FE_TIME = 19  # following error beyond the window for longer than this is an error [second]
K_DEADMAN = 20  # setpoint age that expires the command [second]
K_REST_TICKS = 21  # consecutive ticks at rest that end a stop
N_CFG = 22

LAW_VELOCITY = 0.0
LAW_TORQUE = 1.0

# ---- st: loop-private state
ST_CMD_SEQ = 0  # last command sequence taken
ST_MODE = 1  # active mode (MODE_*)
ST_T0 = 2  # start time of the active profile [second]
ST_ENGAGED = 3  # 1 while the drive is commanded
ST_PREV_T = 4
ST_ERROR = 5  # errors.ErrorCode
ST_ERROR_COUNT = 6
ST_FLIM = 7
ST_TICKS = 8
ST_STARTED_T = 9
ST_TRACK_MAX = 10  # largest |p_ref - p| since the plan started
ST_SETTLED = 11  # time from plan start to arrival [second]; NaN until then
ST_STOP_TOOK = 12  # last stop: its start to disengagement [second]
ST_STOP_PLANNED = 13  # last stop: planned duration [second]
ST_STOP_BOUND = 14  # last stop: bound on its duration including the hold, computed when it started [second]
ST_STOP_T0 = 15  # last stop: start time [second]
ST_REST_TICKS = 16  # consecutive ticks at rest during the hold
ST_FE_SINCE = 17  # time the following error first exceeded the window; NaN while within
ST_EXPIRED = 18  # 1 after the deadman expired the command (until a fresh command)
ST_EXPIRED_AFTER = 19  # age of the last setpoint when it expired [second]
ST_PRE_BRAKE = 20  # 1 while a position plan waits for its envelope brake (the start was outside its limits)
ST_LIMITED = 21  # 1 if the active command's limits were clipped into the envelope
ST_DECEL = 22  # deceleration magnitude of the active command (a stop uses at least this)
ST_JERK = 23  # jerk of the active command
ST_EXPIRED_AT = 24  # loop time the command expired [second]
N_ST = 25

# ---- act: the command in force (a copy of cmd's fields when it was applied, limits clipped to the envelope)
N_ACT = N_CMD

# ---- meas: the drive's measured state this tick
M_P = 0
M_V = 1
M_A = 2
M_F = 3
M_FRESH = 4  # 1 while the drive's feedback is within the feedback timeout (0 silent too long, −1 not heard yet)
M_AGE = 5  # age of the measurement [second] (0 for the embedded joint)
N_MEAS = 6

# ---- out: loop -> node (seqlocked; the loop is the only writer)
O_SEQ = 0
O_TIME = 1  # loop time of this sample [second]
O_PREF = 2
O_VREF = 3
O_AREF = 4
O_P = 5  # measured
O_V = 6
O_A = 7
O_F = 8  # drive force/torque in use
O_PLAN_STATUS = 9
O_REPAIRED = 10
O_DURATION = 11  # planned duration [second]
O_ERROR = 12  # errors.ErrorCode
O_TICKS = 13
O_ENGAGED = 14
O_DEMAND = 15  # |force| / limit
O_ERROR_COUNT = 16
O_CMD_SEQ = 17  # command sequence number the sample reflects
O_MODE = 18
O_PLAN_T0 = 19  # loop time the active plan started [second]
O_VCMD = 20
O_FCMD = 21
O_TRACK_MAX = 22  # largest |p_ref - p| since the plan started
O_SETTLED = 23  # plan start to the first tick at or after the planned end with |p - p_target| within tolerance
O_STOP_PLANNED = 24  # duration of the last jerk-limited stop as planned [second]
O_STOP_TOOK = 25  # the same stop, from its start to disengagement, as it happened [second]
O_STOP_BOUND = 26  # bound on that stop including the hold [second]
O_EXPIRED = 27
O_EXPIRED_AFTER = 28
O_LIMITED = 29
O_EXPIRED_AT = 30  # loop time the command expired [second]
N_OUT = 31

# ---- timing: ring of period errors for measurement
TIMING_RING = 1 << 16
"""Entries of the period-error ring [second]; slot TIMING_RING holds the write count."""


class LoopArrays(NamedTuple):
    """Every buffer a tick touches, typed once by numba; the loop allocates nothing per tick."""

    cmd: np.ndarray
    cfg: np.ndarray
    st: np.ndarray
    out: np.ndarray
    c: np.ndarray
    """Scratch: this tick's consistent copy of ``cmd``."""
    act: np.ndarray
    """The command in force (limits clipped into the envelope)."""
    prof: np.ndarray
    """The active OTG profile (position plan, velocity change or stop)."""
    ref: np.ndarray
    """Scratch float64[8]: reference (p, v, a, j) now, then one period ahead."""
    meas: np.ndarray
    drive: DriveArrays


def new_loop_arrays(drive: DriveArrays, cfg: np.ndarray, profile_size: int) -> LoopArrays:
    """Fresh arrays for one loop (NaN where a value is unknown yet)."""
    st = np.zeros(N_ST)
    for k in (ST_SETTLED, ST_STOP_TOOK, ST_STOP_PLANNED, ST_STOP_BOUND, ST_FE_SINCE, ST_EXPIRED_AFTER, ST_EXPIRED_AT):
        st[k] = np.nan
    return LoopArrays(
        cmd=np.zeros(N_CMD),
        cfg=cfg,
        st=st,
        out=np.zeros(N_OUT),
        c=np.zeros(N_CMD),
        act=np.zeros(N_ACT),
        prof=np.zeros(profile_size),
        ref=np.zeros(8),
        meas=np.zeros(N_MEAS),
        drive=drive,
    )
