"""Index constants of the arrays shared between the networking side and the control-loop thread.

Every array is float64. ``cmd`` and ``out`` are seqlocked: the writer makes the sequence number odd, writes the
fields, then makes it even; a reader retries while it is odd or changed under it. So neither side ever blocks
the other, and the numba loop never needs the GIL.
"""

from __future__ import annotations

# ---- cmd: networking side -> loop
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
C_STOP_A = 10  # stop deceleration magnitude
C_STOP_J = 11  # stop jerk
C_QUIT = 12  # nonzero ends the real-time loop
N_CMD = 13

MODE_IDLE = 0.0
MODE_POSITION = 1.0
MODE_VELOCITY = 2.0
MODE_STOP = 3.0  # jerk-limited stop to zero velocity, then disengage
MODE_DISENGAGE = 4.0  # no force at once

# ---- cfg: fixed for the life of a loop
K_LAW = 0  # LAW_VELOCITY or LAW_TORQUE
K_VELOCITY_GAIN = 1
K_KP = 2
K_KD = 3
K_INERTIA = 4
K_PERIOD = 5  # [second]
K_DRIVE = 6  # DRIVE_SIM or DRIVE_REMOTE
K_FEEDBACK_TIMEOUT = 7  # [second]
K_STEPPED = 8  # 1: loop time advances exactly one period per tick (simulation time), paced by the wall clock
K_ARRIVAL_TOLERANCE = 9  # |p - p_target| that counts as arrived
K_REST_VELOCITY = 10  # after a stop, |v| below which the joint is at rest and the force may be removed
K_STOP_HOLD_MAX = 11  # after a stop, the longest hold at the final position while waiting for rest [second]
N_CFG = 12

LAW_VELOCITY = 0.0
LAW_TORQUE = 1.0
DRIVE_SIM = 0.0
DRIVE_REMOTE = 1.0

# ---- st: loop-private state
ST_CMD_SEQ = 0  # last command sequence applied
ST_MODE = 1  # active mode (MODE_*)
ST_T0 = 2  # plan start time [second]
ST_ENGAGED = 3  # 1 while the drive is commanded
ST_PREV_T = 4
ST_ERROR = 5
ST_ERROR_COUNT = 6
ST_FLIM = 7
ST_TICKS = 8
ST_STARTED_T = 9
ST_TRACK_MAX = 10  # largest |p_ref - p| since the plan started
ST_SETTLED = 11  # time from plan start to arrival [second]; NaN until then
ST_STOP_TOOK = 12  # last stop: its start to disengagement [second]
ST_STOP_PLANNED = 13  # last stop: planned duration [second]
N_ST = 14

# ---- out: loop -> networking side
O_SEQ = 0
O_TIME = 1  # loop time of this sample [second, monotonic]
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
O_ERROR = 12  # LoopError
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
N_OUT = 26

# ---- remote: a drive on the bus (DRIVE_REMOTE); the networking side fills R_P..R_RX_T, the loop R_CMD_*
R_SEQ = 0
R_P = 1
R_V = 2
R_A = 3
R_F = 4
R_RX_T = 5  # monotonic time of the last drive feedback [second]; 0 = never
R_CMD_ENABLE = 6
R_CMD_V = 7  # NaN when not commanded
R_CMD_F = 8  # NaN when not commanded
R_CMD_T = 9
N_REMOTE = 10

# ---- timing: ring of period errors for measurement
TIMING_RING = 1 << 16
"""Entries of the period-error ring [second]; slot TIMING_RING holds the write count."""
