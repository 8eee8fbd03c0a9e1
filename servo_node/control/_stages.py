"""The stages of one control tick, each a numba kernel on the loop's :class:`~._layout.LoopArrays`.

A setpoint's plan starts at its reception, not at the tick that takes it (:func:`plan_start`): nodes that
received one burst start together whatever their event loops' latency.

Safety lives here, in the loop, so that no stall of the node's event loop can delay it:

- **envelope**: every command's limits are clipped into the envelope (``K_ENV_*``); a start that the command's
  own limits cannot bring back inside them without overshooting is first braked with the envelope's limits;
- **deadman** (:func:`._stop.expired`, the one test): a command expires ``K_DEADMAN`` after the *reception* of its
  setpoint; a setpoint already that old when the loop takes it is not applied; a follower's leader likewise;
- **following error**: |p_ref − p| beyond ``K_FE_WINDOW`` for longer than ``K_FE_TIME`` is an error;
- **the stop** (expiry, readiness loss, errors, close, restart): jerk-limited, at least as hard as ``K_STOP_A``/
  ``K_STOP_J`` (harder if the active command was), within the envelope, planned from the measured state when the
  reference and the joint disagree beyond the window; then it brakes the joint to zero velocity and holds it
  actively until it is measured at rest (|v| ≤ ``K_REST_VELOCITY`` for ``K_REST_TIME``, in measurements taken
  after the zero command took effect), and only then removes the force. A stop that does not reach rest within its
  bound (plan + ``K_STOP_HOLD_MAX``) is STOP_TIMEOUT: the drive keeps braking. Its start, and the deadman test,
  are in :mod:`._stop` (mimic's stages use them too); its hold to rest is here (:func:`reference`).

Mimic's own stages (gear-in, following the leader) are in :mod:`._mimic`; here only the reference in the frame
moving with the leader (:func:`._mimic.sample_relative`) and the hand-over of a mimic command.

The control laws that follow the stages are in :mod:`._law`.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import tick_jit
from .._seqlock import begin_write, end_write, try_read_seqlocked
from ..drive._base import DRIVE_SIM
from ..otg import plan_into, plan_velocity_into, profile_duration, sample_into
from ..otg._profile import REPAIRED
from . import _layout as L
from . import _link as link
from . import _mimic as mimic
from ._layout import LoopArrays
from ._stop import (
    E_DRIVE_LOST,
    E_FB_FIRST,
    E_FB_LAST,
    E_FOLLOWING,
    E_INFEASIBLE,
    E_NONE,
    E_NUMERICAL,
    E_STOP_TIMEOUT,
    clearable,
    disengage,
    engage,
    expired,
    set_error,
    start_stop,
    stop_from,
)


@tick_jit
def _sample_ref(A: LoopArrays, t: float, out: np.ndarray) -> None:
    """The reference at ``t`` after the active plan's start: the profile, plus the leader's target in mimic mode."""
    if A.st[L.ST_MODE] == L.MODE_MIMIC:
        mimic.sample_relative(A, t, out)
    else:
        sample_into(A.prof, t, out)


@tick_jit
def _recoverable(v: float, a: float, v_min: float, v_max: float, a_min: float, a_max: float, j: float) -> bool:
    """True if (v, a) obeys the direction-relative bounds and ramping a to 0 at jerk j stays within [v_min, v_max]."""
    tol = 1e-9 * (a_max - a_min)
    if v >= 0.0:
        ok_a = a_min - tol <= a <= a_max + tol
    else:
        ok_a = -a_max - tol <= a <= -a_min + tol
    v_settle = v + 0.5 * a * abs(a) / j
    vtol = 1e-9 * (v_max - v_min) + 1e-12
    return ok_a and v_min - vtol <= v_settle <= v_max + vtol


@tick_jit
def plan_motion(now: float, A: LoopArrays, p0: float, v0: float, a0: float) -> None:
    """Plan the active command (``act``) from (p0, v0, a0): brake with the envelope first if its limits can't."""
    act, cfg, st, out = A.act, A.cfg, A.st, A.out
    v_min, v_max = act[L.C_VMIN], act[L.C_VMAX]
    a_min, a_max, j = act[L.C_AMIN], act[L.C_AMAX], act[L.C_JMAX]
    velocity_mode = act[L.C_MODE] == L.MODE_VELOCITY
    if not _recoverable(v0, a0, v_min, v_max, a_min, a_max, j):
        # The command's own limits would carry the reference out of them (e.g. a far smaller jerk while
        # accelerating): brake within the envelope to a = 0 inside [v_min, v_max] first, then plan.
        env_a, env_j = cfg[L.K_ENV_A], cfg[L.K_ENV_J]
        v_settle = v0 + 0.5 * a0 * abs(a0) / env_j
        vt = min(max(v_settle, v_min), v_max)
        plan_velocity_into(p0, v0, a0, vt, -env_a, env_a, env_j, A.prof)
        st[L.ST_PRE_BRAKE] = 1.0
        engage(st, act[L.C_MODE], now)
        return
    st[L.ST_PRE_BRAKE] = 0.0
    if velocity_mode:
        vt = min(max(act[L.C_VT], v_min), v_max)
        status = plan_velocity_into(p0, v0, a0, vt, a_min, a_max, j, A.prof)
        repaired = 1.0 if vt != act[L.C_VT] else 0.0
    else:
        status = plan_into(p0, v0, a0, act[L.C_PT], act[L.C_VT], v_min, v_max, a_min, a_max, j, A.prof)
        repaired = A.prof[REPAIRED]
    out[L.O_PLAN_STATUS] = status
    out[L.O_REPAIRED] = repaired
    out[L.O_DURATION] = profile_duration(A.prof)
    if status == 0:
        engage(st, act[L.C_MODE], now)
        st[L.ST_TRACK_MAX] = 0.0
        st[L.ST_SETTLED] = np.nan
        st[L.ST_PLAN_P0] = p0
        st[L.ST_OVERSHOOT] = 0.0
        if clearable(st[L.ST_ERROR]):
            st[L.ST_ERROR] = E_NONE
    else:
        set_error(st, E_INFEASIBLE if status == 1 else E_NUMERICAL)
        if st[L.ST_ENGAGED] != 0.0:
            start_stop(now, A, p0, v0, a0)


@tick_jit
def supervise_drive(now: float, A: LoopArrays) -> None:
    """Drive silence is DRIVE_LOST: the reference stops (open loop) and the drive is held braking."""
    st, fresh = A.st, A.meas[L.M_FRESH]
    if fresh == 0.0:
        if st[L.ST_ERROR] != E_DRIVE_LOST:
            set_error(st, E_DRIVE_LOST)
            if st[L.ST_ENGAGED] != 0.0 and st[L.ST_MODE] != L.MODE_STOP:
                start_stop(now, A, A.out[L.O_PREF], A.out[L.O_VREF], A.out[L.O_AREF])
    elif fresh == 1.0 and st[L.ST_ERROR] == E_DRIVE_LOST:
        st[L.ST_ERROR] = E_NONE


@tick_jit
def _clip_limits(c: np.ndarray, act: np.ndarray, cfg: np.ndarray) -> float:
    """Copy the command into ``act`` with its limits clipped into the envelope; 1.0 if anything was clipped."""
    for k in range(act.size):
        act[k] = c[k]
    ev, ea, ej, ef = cfg[L.K_ENV_V], cfg[L.K_ENV_A], cfg[L.K_ENV_J], cfg[L.K_ENV_F]
    act[L.C_VMIN] = max(c[L.C_VMIN], -ev)
    act[L.C_VMAX] = min(c[L.C_VMAX], ev)
    act[L.C_AMIN] = max(c[L.C_AMIN], -ea)
    act[L.C_AMAX] = min(c[L.C_AMAX], ea)
    act[L.C_JMAX] = min(c[L.C_JMAX], ej)
    act[L.C_FLIM] = min(c[L.C_FLIM], ef)
    clipped = False
    for k in (L.C_VMIN, L.C_VMAX, L.C_AMIN, L.C_AMAX, L.C_JMAX, L.C_FLIM):
        clipped = clipped or act[k] != c[k]
    return 1.0 if clipped else 0.0


@tick_jit
def _same_motion(c: np.ndarray, act: np.ndarray, cfg: np.ndarray) -> bool:
    """True if command ``c``, clipped into the envelope, asks for the motion of ``act`` (mode aside)."""
    ev, ea, ej, ef = cfg[L.K_ENV_V], cfg[L.K_ENV_A], cfg[L.K_ENV_J], cfg[L.K_ENV_F]
    return (
        c[L.C_PT] == act[L.C_PT]
        and c[L.C_VT] == act[L.C_VT]
        and max(c[L.C_VMIN], -ev) == act[L.C_VMIN]
        and min(c[L.C_VMAX], ev) == act[L.C_VMAX]
        and max(c[L.C_AMIN], -ea) == act[L.C_AMIN]
        and min(c[L.C_AMAX], ea) == act[L.C_AMAX]
        and min(c[L.C_JMAX], ej) == act[L.C_JMAX]
        and min(c[L.C_FLIM], ef) == act[L.C_FLIM]
    )


@tick_jit
def plan_start(now: float, rx_t: float, A: LoopArrays) -> float:
    """When the plan of a setpoint taken at tick ``now`` starts: its reception time ``rx_t``, but no earlier than
    the previous tick.

    Planning at the tick would start every node's move at its own first tick after the setpoint reached the loop
    (up to a period plus the node's event-loop latency after reception); anchoring the plan at the reception
    (the transport's timestamp, taken by its receiving thread) starts nodes that received one burst together.
    The tick samples the plan at ``now − t0``. The previous tick sampled the reference in force (or rest) at a
    time no later than t0, so the reference seen at the ticks is still a sampling of one continuous trajectory
    (old reference up to t0, the new plan after it): position, velocity and acceleration continuous, the jerk
    within the limits. A setpoint older than the previous tick (a latency beyond one period) starts there: the
    rest of its lateness remains as start skew rather than a jump of the reference.
    """
    if A.st[L.ST_TICKS] <= 1.0:
        return now  # The first tick: no previous one.
    return min(max(rx_t, A.out[L.O_TIME]), now)  # out[O_TIME]: the previous tick's time (published last tick).


@tick_jit
def take_command(now: float, A: LoopArrays) -> None:
    """Act on a new command: plan a motion (unless refused), start a stop, or disengage."""
    c, st, act, cfg, m = A.c, A.st, A.act, A.cfg, A.meas
    if not try_read_seqlocked(A.cmd, c):
        return  # The node is writing a command: taken at the next tick.
    if c[L.C_SEQ] == st[L.ST_CMD_SEQ]:
        return
    if (c[L.C_MODE] == L.MODE_POSITION or c[L.C_MODE] == L.MODE_VELOCITY) and c[L.C_RX_T] > now:
        # A coordinated start not due yet (servo_node.staging): taken at the first tick at or after it. Meanwhile its
        # setpoint's receptions keep the command in force alive (a path's next segment waits for its instant while
        # the current one runs; its own setpoint's repetitions no longer reach the loop), never past its deadman.
        alive = c[L.C_ALIVE_T]
        if alive <= now and alive > act[L.C_RX_T]:
            act[L.C_RX_T] = alive
        return
    st[L.ST_CMD_SEQ] = c[L.C_SEQ]
    mode = c[L.C_MODE]
    engaged = st[L.ST_ENGAGED] != 0.0
    if mode == L.MODE_POSITION or mode == L.MODE_VELOCITY or mode == L.MODE_MIMIC:
        rx_t = c[L.C_RX_T] if math.isfinite(c[L.C_RX_T]) else now
        if expired(now - rx_t, cfg):
            return  # Already expired on arrival (e.g. queued behind a flood): never applied.
        if m[L.M_FRESH] != 1.0 or st[L.ST_ERROR] == E_STOP_TIMEOUT:
            return  # No drive to command, or a stop still braking: motion is refused until the cause clears.
        if st[L.ST_MODE] == L.MODE_STOP and st[L.ST_ERROR] != E_NONE and engaged:
            return  # A stop after an error runs to rest before anything else moves.
        if st[L.ST_ERROR] == E_FOLLOWING and _same_motion(c, act, cfg):
            return  # The joint could not follow this motion: only a different setpoint tries again.
        if engaged and st[L.ST_MODE] == mode and act[L.C_MODE] == mode and _same_motion(c, act, cfg):
            act[L.C_RX_T] = rx_t  # The same setpoint again: it only keeps the command alive.
            return
        limited = _clip_limits(c, act, cfg)
        act[L.C_RX_T] = rx_t
        st[L.ST_LIMITED] = limited
        st[L.ST_EXPIRED] = 0.0
        st[L.ST_FLIM] = act[L.C_FLIM]
        st[L.ST_DECEL] = -act[L.C_AMIN]
        st[L.ST_JERK] = act[L.C_JMAX]
        st[L.ST_FE_SINCE] = np.nan
        # A hand-over to or from mimic keeps the tick (its gear-in takes the state now); a plan starts at the
        # setpoint's reception (plan_start).
        keep_tick = mode == L.MODE_MIMIC or st[L.ST_MODE] == L.MODE_MIMIC
        t_start = now if keep_tick else plan_start(now, rx_t, A)
        if engaged and abs(A.out[L.O_PREF] - m[L.M_P]) <= cfg[L.K_FE_WINDOW]:
            if keep_tick:
                p0, v0, a0 = A.out[L.O_PREF], A.out[L.O_VREF], A.out[L.O_AREF]
            else:
                s = A.ref[16:20]
                sample_into(A.prof, t_start - st[L.ST_T0], s)  # The reference in force, at the new plan's start.
                p0, v0, a0 = s[0], s[1], s[2]
        else:
            # Start from the actual state: no jump when (re-)engaging or when the joint is far off the reference.
            p0, v0, a0 = m[L.M_P], m[L.M_V], 0.0
        if mode == L.MODE_MIMIC:  # Geared in by the mimic stage, next in this tick (control._mimic).
            A.mim[L.MI_GEAR_IN], A.mim[L.MI_P0], A.mim[L.MI_V0], A.mim[L.MI_A0] = 1.0, p0, v0, a0
        else:
            plan_motion(t_start, A, p0, v0, a0)
    elif mode == L.MODE_STOP:
        if engaged and st[L.ST_MODE] != L.MODE_STOP:
            stop_from(now, A)
    elif mode == L.MODE_DISENGAGE:
        disengage(st)


@tick_jit
def ref_at_measurement(now: float, A: LoopArrays, fallback: float) -> float:
    """The reference position when the drive was in the measured state (``M_T``): what a measurement is compared
    with. ``fallback`` (the reference now) if that time precedes the active profile or is unknown. For the embedded
    joint that time is now; for a drive on the bus it is several milliseconds ago, and comparing an old measurement
    with today's reference would call a moving drive's age a following error."""
    t = A.meas[L.M_T]
    t0 = A.st[L.ST_T0]
    if not (math.isfinite(t) and t0 <= t <= now) or A.st[L.ST_ENGAGED] == 0.0:
        return fallback
    _sample_ref(A, t - t0, A.ref[16:20])
    return A.ref[16]


@tick_jit
def supervise_motion(now: float, A: LoopArrays) -> None:
    """Deadman by reception time; the end of an envelope brake; the following error."""
    st, cfg, act, m = A.st, A.cfg, A.act, A.meas
    if st[L.ST_ENGAGED] == 0.0:
        return
    mode = st[L.ST_MODE]
    if mode != L.MODE_POSITION and mode != L.MODE_VELOCITY and mode != L.MODE_MIMIC:
        return
    age = now - act[L.C_RX_T]
    if mode != L.MODE_MIMIC and expired(age, cfg):  # Mimic: the leader's samples feed the deadman (_mimic.verdict).
        st[L.ST_EXPIRED] = 1.0
        st[L.ST_EXPIRED_AFTER] = age
        st[L.ST_EXPIRED_AT] = now
        stop_from(now, A)
        return
    if st[L.ST_PRE_BRAKE] != 0.0 and now - st[L.ST_T0] >= profile_duration(A.prof):
        sample_into(A.prof, now - st[L.ST_T0], A.ref)  # The brake's end: a = 0, v within the command's limits.
        plan_motion(now, A, A.ref[0], A.ref[1], 0.0)
        if st[L.ST_MODE] == L.MODE_STOP:
            return
    if m[L.M_AGE] > cfg[L.K_FE_TIME] or st[L.ST_DRIVE_WAIT] != 0.0:
        # A measurement that old cannot show a following error (the drive is silent); nor can a drive that does not
        # take commands yet (control._drive_wait).
        st[L.ST_FE_SINCE] = np.nan
    elif m[L.M_FRESH] == 1.0 and abs(ref_at_measurement(now, A, A.out[L.O_PREF]) - m[L.M_P]) > cfg[L.K_FE_WINDOW]:
        if math.isnan(st[L.ST_FE_SINCE]):
            st[L.ST_FE_SINCE] = now
        elif now - st[L.ST_FE_SINCE] > cfg[L.K_FE_TIME]:
            set_error(st, E_FOLLOWING)
            st[L.ST_FE_SINCE] = np.nan
            stop_from(now, A)
    else:
        st[L.ST_FE_SINCE] = np.nan


@tick_jit
def _brake_effect(now: float, A: LoopArrays) -> float:
    """When the hold's first zero command takes effect: a bus drive's at its next send plus the command delay (the
    link model's), the embedded joint's within this tick's step."""
    if A.cfg[L.K_DRIVE] != DRIVE_SIM:
        return link.effect_time(now, A)
    return now + 0.5 * A.cfg[L.K_PERIOD]


@tick_jit
def hold_at_rest(A: LoopArrays) -> bool:
    """True once the joint has been measured at rest (|v| ≤ ``K_REST_VELOCITY``) for ``K_REST_TIME``, in fresh
    measurements taken after the zero command took effect (``ST_BRAKE_EFFECT``): a sample from before shows a
    command that may still be in force (a feedback correction the drive keeps until released), not the brake's
    result. Measured time, not ticks: a bus drive's sample is seen by many ticks, so the rest spans two or more."""
    st, cfg, m = A.st, A.cfg, A.meas
    t_m = m[L.M_T]
    if not (m[L.M_FRESH] == 1.0 and t_m >= st[L.ST_BRAKE_EFFECT]):
        if m[L.M_FRESH] != 1.0:
            st[L.ST_REST_SINCE] = np.nan  # Unseen: the rest starts again from the next measurement.
        return False
    if abs(m[L.M_V]) > cfg[L.K_REST_VELOCITY]:
        st[L.ST_REST_SINCE] = np.nan
        return False
    if math.isnan(st[L.ST_REST_SINCE]):
        st[L.ST_REST_SINCE] = t_m
    return t_m - st[L.ST_REST_SINCE] >= cfg[L.K_REST_TIME] - 1e-9


@tick_jit
def reference(now: float, A: LoopArrays) -> bool:
    """Sample the reference now and one period ahead into ``ref``; end a stop at rest. Returns True while the
    stop's hold brakes with a zero-velocity command (from the end of the stop's plan until the joint is at rest)."""
    st, cfg, m, ref = A.st, A.cfg, A.meas, A.ref
    ref_next = ref[4:]
    braking = False
    if st[L.ST_ENGAGED] != 0.0:
        # A velocity command takes effect over the coming period (the drive reaches it by the end of the
        # period), so its feed-forward is the velocity the reference will have then.
        t = now - st[L.ST_T0]
        _sample_ref(A, t, ref)
        _sample_ref(A, t + cfg[L.K_PERIOD], ref_next)
        if link.compensated(A):
            # A bus drive: the command written now is sent at the next send and takes effect a delay later; it is
            # held for one drive period. Sample the reference over exactly that interval.
            t_e = link.effect_time(now, A)
            A.link[L.LK_EFFECT_T] = t_e
            _sample_ref(A, t_e - st[L.ST_T0], ref[8:12])
            _sample_ref(A, t_e - st[L.ST_T0] + cfg[L.K_DRIVE_PERIOD], ref[12:16])
        mode = st[L.ST_MODE]
        if mode == L.MODE_POSITION and st[L.ST_PRE_BRAKE] == 0.0:
            # Judge the measurement against the reference of its own time (a bus drive's is milliseconds old).
            t_m = m[L.M_T] - st[L.ST_T0] if math.isfinite(m[L.M_T]) else t
            if t_m >= 0.0:
                p_ref_m = ref_at_measurement(now, A, ref[0])
                st[L.ST_TRACK_MAX] = max(st[L.ST_TRACK_MAX], abs(p_ref_m - m[L.M_P]))
                direction = 1.0 if A.act[L.C_PT] >= st[L.ST_PLAN_P0] else -1.0
                st[L.ST_OVERSHOOT] = max(st[L.ST_OVERSHOOT], direction * (m[L.M_P] - A.act[L.C_PT]))
            if (
                math.isnan(st[L.ST_SETTLED])
                and t_m >= profile_duration(A.prof)
                and abs(m[L.M_P] - A.act[L.C_PT]) <= cfg[L.K_ARRIVAL_TOLERANCE]
            ):
                st[L.ST_SETTLED] = t_m
        elif mode == L.MODE_STOP and t >= st[L.ST_STOP_PLANNED]:
            # The reference is at rest: brake the joint to zero velocity where it is (it lags the reference by the
            # tracking error) and hold it there until it is at rest, as a drive's quick stop does.
            if math.isnan(st[L.ST_BRAKE_EFFECT]):
                st[L.ST_BRAKE_EFFECT] = _brake_effect(now, A)
            if hold_at_rest(A):
                st[L.ST_STOP_TOOK] = now - st[L.ST_STOP_T0]
                if st[L.ST_ERROR] == E_STOP_TIMEOUT:
                    st[L.ST_ERROR] = E_NONE
                disengage(st)
            else:
                unseen = st[L.ST_ERROR] == E_DRIVE_LOST or E_FB_FIRST <= st[L.ST_ERROR] <= E_FB_LAST
                if now - st[L.ST_STOP_T0] > st[L.ST_STOP_BOUND] and not unseen:
                    set_error(st, E_STOP_TIMEOUT)  # A silent or distrusted drive's rest can't be seen.
                braking = True
    if st[L.ST_ENGAGED] == 0.0:
        ref[0] = m[L.M_P]
        ref[1] = 0.0
        ref[2] = 0.0
        ref[3] = 0.0
        ref_next[1] = 0.0
    return braking


@tick_jit
def publish(now: float, A: LoopArrays, v_cmd: float, f_cmd: float) -> None:
    """Write this tick's sample into the seqlocked ``out``."""
    out, st, m, ref = A.out, A.st, A.meas, A.ref
    flim = st[L.ST_FLIM]
    begin_write(out)
    out[L.O_TIME] = now
    out[L.O_PREF] = ref[0]
    out[L.O_VREF] = ref[1]
    out[L.O_AREF] = ref[2]
    out[L.O_P] = m[L.M_P]
    out[L.O_V] = m[L.M_V]
    out[L.O_A] = m[L.M_A]
    out[L.O_F] = m[L.M_F]
    out[L.O_ERROR] = st[L.ST_ERROR]
    out[L.O_TICKS] = st[L.ST_TICKS]
    out[L.O_ENGAGED] = st[L.ST_ENGAGED]
    out[L.O_DEMAND] = abs(m[L.M_F]) / flim if flim > 0.0 else 0.0
    out[L.O_ERROR_COUNT] = st[L.ST_ERROR_COUNT]
    out[L.O_CMD_SEQ] = st[L.ST_CMD_SEQ]
    out[L.O_MODE] = st[L.ST_MODE]
    out[L.O_PLAN_T0] = st[L.ST_T0]
    out[L.O_VCMD] = v_cmd
    out[L.O_FCMD] = f_cmd
    out[L.O_TRACK_MAX] = st[L.ST_TRACK_MAX]
    out[L.O_SETTLED] = st[L.ST_SETTLED]
    out[L.O_STOP_PLANNED] = st[L.ST_STOP_PLANNED]
    out[L.O_STOP_TOOK] = st[L.ST_STOP_TOOK]
    out[L.O_STOP_BOUND] = st[L.ST_STOP_BOUND]
    out[L.O_EXPIRED] = st[L.ST_EXPIRED]
    out[L.O_EXPIRED_AFTER] = st[L.ST_EXPIRED_AFTER]
    out[L.O_LIMITED] = st[L.ST_LIMITED]
    out[L.O_EXPIRED_AT] = st[L.ST_EXPIRED_AT]
    out[L.O_OVERSHOOT] = st[L.ST_OVERSHOOT]
    out[L.O_MEAS_T] = m[L.M_T]
    comp = link.compensated(A) and st[L.ST_ENGAGED] != 0.0
    out[L.O_PRED_P] = A.link[L.LK_PRED_P] if comp else np.nan
    out[L.O_EFFECT_T] = A.link[L.LK_EFFECT_T] if comp else np.nan
    out[L.O_FB_FAULTS] = st[L.ST_FB_FAULTS]
    out[L.O_FB_BAD] = st[L.ST_FB_BAD]
    out[L.O_FB_LAST] = st[L.ST_FB_LAST]
    out[L.O_CMD_CLIPPED] = st[L.ST_CMD_CLIPPED]
    out[L.O_MEASURED] = 1.0 if m[L.M_FRESH] == 1.0 and st[L.ST_FB_BAD] == 0.0 else 0.0
    out[L.O_MISSED] = st[L.ST_MISSED]
    out[L.O_LATE_MAX] = st[L.ST_LATE_MAX]
    out[L.O_DRIVE_WAITED] = st[L.ST_DRIVE_WAITED]
    mimic.publish_into(now, A, st[L.ST_ENGAGED] != 0.0 and st[L.ST_MODE] == L.MODE_MIMIC)
    end_write(out)
