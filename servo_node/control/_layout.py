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
from ..drive._measurement import (
    M_A as M_A,
)
from ..drive._measurement import (
    M_AGE as M_AGE,
)
from ..drive._measurement import (
    M_COUNT as M_COUNT,
)
from ..drive._measurement import (
    M_F as M_F,
)
from ..drive._measurement import (
    M_FRESH as M_FRESH,
)
from ..drive._measurement import (
    M_NOT_FINITE as M_NOT_FINITE,
)
from ..drive._measurement import (
    M_P as M_P,
)
from ..drive._measurement import (
    M_RX_T as M_RX_T,
)
from ..drive._measurement import (
    M_SENT_COUNT as M_SENT_COUNT,
)
from ..drive._measurement import (
    M_SENT_F as M_SENT_F,
)
from ..drive._measurement import (
    M_SENT_NEXT as M_SENT_NEXT,
)
from ..drive._measurement import (
    M_SENT_T as M_SENT_T,
)
from ..drive._measurement import (
    M_SENT_V as M_SENT_V,
)
from ..drive._measurement import (
    M_STAMP as M_STAMP,
)
from ..drive._measurement import (
    M_T as M_T,
)
from ..drive._measurement import (
    M_TAKING as M_TAKING,
)
from ..drive._measurement import (
    M_V as M_V,
)
from ..drive._measurement import (
    N_MEAS as N_MEAS,
)

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
C_RX_T = 10  # reception time of the setpoint [second, loop clock]; the deadman counts from it, its plan starts at it
C_ALIVE_T = 11  # latest reception of the setpoint [second, loop clock]; for a start (C_RX_T its instant, ahead) it
#                 keeps the command in force alive while the started one waits for its instant
N_CMD = 12

MODE_IDLE = 0.0
MODE_POSITION = 1.0
MODE_VELOCITY = 2.0
MODE_STOP = 3.0  # jerk-limited stop to zero velocity, hold until at rest, then disengage
MODE_DISENGAGE = 4.0  # no force at once
MODE_MIMIC = 5.0  # follow the leader through the mimic relation (control._mimic); limits in the command

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
K_REST_TIME = 21  # measured time at rest that ends a stop [second] (a whole number of loop periods, at least 2)
K_COMPENSATE = 22  # 1: a drive on the bus is commanded through the link model (control._link); 0: as if local
K_DRIVE_PERIOD = 23  # how long a bus drive holds each command: its setpoint period [second]
K_TRACE_PERIOD = 24  # a measured sample goes into the trace (control._trace) this often in loop time [second]; 0: none
N_CFG = 25

LAW_VELOCITY = 0.0
LAW_TORQUE = 1.0

# ---- st: loop-private state
ST_CMD_SEQ = 0  # last command sequence taken
ST_MODE = 1  # active mode (MODE_*)
ST_T0 = 2  # start time of the active profile [second] (a setpoint's: its reception, see _stages.plan_start)
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
ST_REST_SINCE = 16  # the hold: time of the first measurement of the rest that is lasting [second]; NaN: not at rest
ST_FE_SINCE = 17  # time the following error first exceeded the window; NaN while within
ST_EXPIRED = 18  # 1 after the deadman expired the command (until a fresh command)
ST_EXPIRED_AFTER = 19  # age of the last setpoint when it expired [second]
ST_PRE_BRAKE = 20  # 1 while a position plan waits for its envelope brake (the start was outside its limits)
ST_LIMITED = 21  # 1 if the active command's limits were clipped into the envelope
ST_DECEL = 22  # deceleration magnitude of the active command (a stop uses at least this)
ST_JERK = 23  # jerk of the active command
ST_EXPIRED_AT = 24  # loop time the command expired [second]
ST_PLAN_P0 = 25  # position the active position plan started from
ST_OVERSHOOT = 26  # largest measured excursion past the target, in the plan's direction, since the plan started
# The drive's feedback as judged (control._feedback): the last good sample, the stream since, the faults.
ST_FB_SEEN = 27  # M_COUNT of the latest bus sample judged
ST_FB_GOOD = 28  # 1 once a good sample was taken
ST_FB_P = 29  # the last good sample: position, velocity, acceleration, force
ST_FB_V = 30
ST_FB_A = 31
ST_FB_F = 32
ST_FB_RX_T = 33  # …its reception [second, loop clock], its stamp [drive clock], its count (M_COUNT)
ST_FB_STAMP = 34
ST_FB_COUNT = 35
ST_FB_BAD = 36  # FB_* reason while the latest sample is distrusted; 0 while the feedback is trusted
ST_FB_RUN = 37  # consecutive distrusted samples consistent with each other (a stream that moved on)
ST_FB_PREV_P = 38  # the previous distrusted sample: position, reception, stamp
ST_FB_PREV_RX_T = 39
ST_FB_PREV_STAMP = 40
ST_FB_FAULTS = 41  # feedback faults (each time the feedback became distrusted)
ST_FB_LAST = 42  # FB_* reason of the latest fault (0: none yet)
ST_CMD_CLIPPED = 43  # drive commands clipped into the envelope (or replaced: not finite)
ST_BRAKE_EFFECT = 44  # the hold: when its first zero command takes effect at the drive [second]; NaN before
ST_MISSED = 45  # ticks the real clock's thread skipped: due while it was more than a period late (control._kernel)
ST_LATE_MAX = 46  # largest lateness of a tick behind its due time [second] (real clock)
ST_TRACE_NEXT = 47  # loop time the next trace sample is due [second] (control._trace)
ST_FB_NF_SEEN = 48  # M_NOT_FINITE already judged (a bus drive's non-finite samples, overwritten ones included)
ST_DRIVE_WAIT = 49  # 1 while the active plan waits for the drive to take commands (control._drive_wait)
ST_DRIVE_WAITED = 50  # how long the active motion waited for it [second]
N_ST = 51

FB_OK = 0.0
FB_NOT_FINITE = 1.0  # NaN or inf in position, velocity, acceleration or force
FB_JUMP = 2.0  # moved (or reports a velocity) faster than the drive can
FB_STAMP = 3.0  # its timestamp jumped against its reception time (a restarted drive, a stepped clock)

FRESH_DISTRUSTED = 2.0
"""``meas[M_FRESH]`` while the latest sample is distrusted: the stages see the last good sample, not fresh."""

# ---- act: the command in force (a copy of cmd's fields when it was applied, limits clipped to the envelope)
N_ACT = N_CMD

# ---- meas: the drive's measured state this tick (its layout is the drives' contract: drive._measurement)

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
O_OVERSHOOT = 31  # largest measured excursion past the target of the plan (in its direction)
O_MEAS_T = 32  # when the drive was in the measured state [second, loop clock]
O_PRED_P = 33  # predicted drive position when the latest command takes effect (bus drive; else NaN)
O_EFFECT_T = 34  # when the latest command takes effect at the drive [second, loop clock] (bus drive; else NaN)
O_MIM_TARGET = 35  # mimic: the target position now (the relation applied to the extrapolated leader); NaN if not
O_MIM_ERROR = 36  # mimic: relation error (MI_ERROR)
O_MIM_LAG = 37
O_MIM_LAG_COUNT = 38
O_MIM_REASON = 39
O_MIM_STOP_LATENCY = 40
O_MIM_EXTRAP = 41
O_MIM_LEAD_AGE = 42  # mimic: now − reception of the latest leader sample [second]
O_FB_FAULTS = 43  # feedback faults (ST_FB_FAULTS)
O_FB_BAD = 44  # FB_* reason while the feedback is distrusted, else 0
O_FB_LAST = 45  # FB_* reason of the latest fault
O_CMD_CLIPPED = 46  # drive commands clipped into the envelope (ST_CMD_CLIPPED)
O_MEASURED = 47  # 1: O_P..O_F are a fresh, trusted measurement; 0: none yet, the drive silent or distrusted
O_MISSED = 48  # ST_MISSED
O_LATE_MAX = 49  # ST_LATE_MAX
O_DRIVE_WAITED = 50  # ST_DRIVE_WAITED
N_OUT = 51

# ---- link: the bus drive's link model (control._link); loop-private, read by the node for statistics only
LK_MEAS_COUNT = 0  # measurements taken into the model
LK_SENT_COUNT = 1  # sends taken into the ring
LK_N_SENDS = 2  # entries written into the send ring
LK_THETA_REF = 3  # fixed reference offset of the drive's clock against ours, set on the first measurement [s]
LK_LOCAL = 4  # 1: the drive stamps with our clock (same host); 0: a foreign clock (offset estimated); NaN: unknown
LK_THETA = 5  # estimated offset drive clock − loop clock [second] (0 when local)
LK_D1 = 6  # send → effect seen in the dynamics, drive clock minus loop clock [second] (= delay + offset)
LK_DELAY = 7  # estimated send → effect delay in the loop clock [second]
LK_WEIGHT = 8  # information behind the delay fit (forgetting-weighted count of informative measurements)
LK_RS_MIN = 9  # slowly relaxing minimum of reception − stamp [second]
LK_AGE = 10  # age of the latest measurement at its reception [second]
LK_N_STATS = 11  # entries written into the statistics rings
LK_EFFECT_T = 12  # when the command written this tick takes effect at the drive [second, loop clock]
LK_PRED_P = 13  # the drive's position predicted for then
LK_PREV_S = 14  # the previous measurement's stamp [second, drive clock] (the fit compares consecutive ones)
LK_PREV_P = 15  # …its position
LK_PREV_V = 16  # …its velocity
LK_ENGAGED = 17  # the loop's engagement when the last send was taken (a new engagement starts a new history)
LK_GRID = 18  # start of the fit's cost per candidate delay
LINK_GRID_N = 341
LINK_GRID_MIN = -0.020  # candidate delays relative to LK_THETA_REF [second]: −20 ms …
LINK_GRID_STEP = 0.0005  # … in 0.5 ms steps to +150 ms
LK_AGES = LK_GRID + LINK_GRID_N  # ring of measurement ages at reception [second]
LINK_STATS_N = 512
LK_DELAYS = LK_AGES + LINK_STATS_N  # ring of delay estimates [second]
N_LINK = LK_DELAYS + LINK_STATS_N

SENDS_N = 256
"""Entries of the ring of commands sent to a bus drive (time, velocity, force): 1.3 s at 200 Hz."""
SEND_T = 0
SEND_V = 1
SEND_F = 2

# ---- ctl: the control thread's (control._thread), shared by every loop it ticks
CTL_QUIT = 0  # nonzero ends the thread
CTL_WAKE_FD = 1  # an eventfd written when a loop is given a command (wakes an idle thread); −1: none, never idle
N_CTL = 2

IDLE_PERIOD_NS = 10_000_000
"""How often the thread ticks a loop with nothing to do but step its embedded joint (disengaged, no command
pending: :func:`control._kernel.idle`) while every loop it ticks is so: 100 Hz instead of the loop's rate, woken at
once by a command. An idle node's 1 kHz wake-ups alone cost about 2.3 % of a core."""

# ---- lead: the mimic leader's latest sample and state (seqlocked; the node is the only writer; control._mimic)
LD_SEQ = 0
LD_P = 1  # the leader's measured position, velocity, acceleration
LD_V = 2
LD_A = 3
LD_T = 4  # when the leader was in that state: its timestamp mapped onto the loop clock [second]
LD_RX_T = 5  # reception of that sample [second, loop clock]; the lost-leader deadman counts from it
LD_STATE = 6  # the leader's state from its feedback: LEADER_OK, LEADER_DISENGAGED, LEADER_ERROR
LD_STATE_RX_T = 7  # reception of the message that reported that state [second, loop clock]
LD_MULT = 8  # the relation follower = MULT·(leader − REF) + OFFSET (fixed for the life of the loop)
LD_OFFSET = 9
LD_REF = 10
LD_COMPENSATE = 11  # 1: extrapolate the sample from its timestamp (LD_T); 0: from its reception (LD_RX_T)
N_LEAD = 12

LEADER_OK = 1.0
LEADER_DISENGAGED = 0.0
LEADER_ERROR = -1.0

# ---- mim: mimic state (loop-private; control._mimic)
MI_P = 0  # the target (the relation applied to the leader, extrapolated) at ST_T0: position, velocity, acceleration
MI_V = 1
MI_A = 2
MI_LAG = 3  # 1 while the relation demands more velocity or acceleration than the follower's limits
MI_LAG_COUNT = 4  # times it started to lag
MI_REASON = 5  # why following ended (MIMIC_*); 0 while following or never engaged
MI_STOP_LATENCY = 6  # loop time of that stop − reception of the message (or of the last sample) that caused it [s]
MI_EXTRAP = 7  # the interval the leader's sample was extrapolated over this tick [second]
MI_ERROR = 8  # relation error: target − measured position at the measurement's time
MI_GEAR_IN = 9  # 1: a mimic command was taken this tick; the mimic stage gears in from (MI_P0, MI_V0, MI_A0)
MI_P0 = 10
MI_V0 = 11
MI_A0 = 12
N_MIM = 13

MIMIC_LOST = 1.0  # no leader sample within the deadman timeout
MIMIC_DISENGAGED = 2.0  # the leader reported it is not engaged
MIMIC_LEADER_ERROR = 3.0  # the leader reported an error

# ---- trace: ring of measured samples at K_TRACE_PERIOD (loop -> node; control._trace): the loop writes an entry,
# then the count; the node reads entries behind the count and drops those the loop overwrote meanwhile
TRACE_COUNT = 0  # entries written so far
TRACE_HEAD = 1  # entry k is at TRACE_HEAD + (k % TRACE_N) * TR_N
TRACE_N = 1024
"""Entries of the trace: 2 s of ``dynamics`` at 500 Hz, which a node whose event loop stalls still publishes."""
TR_T = 0  # loop time of the sample [second]
TR_P = 1  # measured position, velocity, acceleration, force
TR_V = 2
TR_A = 3
TR_F = 4
TR_N = 5
N_TRACE = TRACE_HEAD + TRACE_N * TR_N

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
    """Scratch float64[20]: reference (p, v, a, j) now, one period ahead, when the next command takes effect at a
    bus drive, one drive period after that, and when the drive was in the measured state."""
    meas: np.ndarray
    drive: DriveArrays
    link: np.ndarray
    """The bus drive's link model (``LK_*``): delay fit, clock offset, statistics rings."""
    sends: np.ndarray
    """float64[SENDS_N, 3]: ring of the commands sent to a bus drive (``SEND_*``)."""
    lead: np.ndarray
    """The mimic leader's sample and state (``LD_*``), seqlocked, written by the node."""
    lead_c: np.ndarray
    """This tick's consistent copy of ``lead`` (the last one while the node is mid-update)."""
    lead_s: np.ndarray
    """Scratch: a copy of ``lead`` being taken."""
    mim: np.ndarray
    """Mimic state (``MI_*``)."""
    trace: np.ndarray
    """The ring of measured samples the node publishes as ``dynamics`` (``TRACE_*``, ``TR_*``; control._trace)."""


def new_loop_arrays(drive: DriveArrays, cfg: np.ndarray, profile_size: int) -> LoopArrays:
    """Fresh arrays for one loop (NaN where a value is unknown yet)."""
    st = np.zeros(N_ST)
    for k in (ST_SETTLED, ST_STOP_TOOK, ST_STOP_PLANNED, ST_STOP_BOUND, ST_FE_SINCE, ST_EXPIRED_AFTER, ST_EXPIRED_AT):
        st[k] = np.nan
    st[ST_FB_P:ST_FB_COUNT + 1] = np.nan
    st[ST_FB_SEEN] = np.nan
    link = np.zeros(N_LINK)
    for k in (LK_THETA_REF, LK_LOCAL, LK_THETA, LK_D1, LK_DELAY, LK_RS_MIN, LK_AGE, LK_EFFECT_T, LK_PRED_P, LK_PREV_S):
        link[k] = np.nan
    link[LK_AGES:] = np.nan
    meas = np.zeros(N_MEAS)
    meas[M_COUNT:] = np.nan
    return LoopArrays(
        cmd=np.zeros(N_CMD),
        cfg=cfg,
        st=st,
        out=np.zeros(N_OUT),
        c=np.zeros(N_CMD),
        act=np.zeros(N_ACT),
        prof=np.zeros(profile_size),
        ref=np.zeros(20),
        meas=meas,
        drive=drive,
        link=link,
        sends=np.zeros((SENDS_N, 3)),
        lead=new_lead(),
        lead_c=new_lead(),
        lead_s=new_lead(),
        mim=new_mim(),
        trace=np.zeros(N_TRACE),
    )


def new_lead() -> np.ndarray:
    """A ``lead`` array before any leader sample: no sample (NaN times), identity relation, compensated."""
    lead = np.full(N_LEAD, np.nan)
    lead[LD_SEQ] = 0.0
    lead[LD_STATE] = LEADER_DISENGAGED
    lead[LD_MULT], lead[LD_OFFSET], lead[LD_REF], lead[LD_COMPENSATE] = 1.0, 0.0, 0.0, 1.0
    return lead


def new_mim() -> np.ndarray:
    """A ``mim`` array: nothing followed yet."""
    mim = np.zeros(N_MIM)
    mim[MI_STOP_LATENCY] = mim[MI_EXTRAP] = mim[MI_ERROR] = np.nan
    return mim
