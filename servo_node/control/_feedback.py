"""Believe nothing that cannot be checked: the drive's feedback is judged before any stage uses it, and every
command is bounded before any drive gets it. Both stages are in the loop, the one place every backend passes
through (the embedded joint, a UDRAL drive, any other bus drive).

**Feedback** (:func:`check_feedback`, right after the drive is measured). A sample is distrusted if

- it holds NaN or infinity (position, velocity, acceleration, force), or a bus drive's network side received such
  a sample since the last tick (overwritten before the tick judged it): ``FEEDBACK_NOT_FINITE``;
- it moved faster than the drive can: |p − p_good| beyond :data:`SPEED_FACTOR`·v_env·(Δt + :data:`JITTER_S`) plus
  :data:`STEP_MARGIN`·the following-error window (Δt from the last good sample, on our clock, or the drive's
  stamps where they say more time passed, by at most the feedback timeout), or it reports |v| beyond
  :data:`SPEED_FACTOR`·v_env: ``FEEDBACK_IMPLAUSIBLE``;
- (a bus drive that stamps its samples) its reception − stamp moved by more than the feedback timeout against the
  last good sample's (the drive restarted with its clock, or its clock stepped): ``FEEDBACK_STAMP``.

A distrusted sample never reaches a law or a command: the stages see the last good sample, marked
:data:`~._layout.FRESH_DISTRUSTED` (not fresh: the laws feed forward only, no new motion is taken, the following
error is not judged). The first one is a fault: its own error code, the stop (from the last good state, or the
reference where they agree), the fault counted. A drive whose finite samples keep agreeing with each other for
:data:`RESYNC_SAMPLES` samples has moved on (a new origin, a new clock): its stream is trusted again, the link
model's clock restarts, and a stop in progress restarts from the state now measured. Non-finite samples never are.

**Commands** (:func:`bound_command`, after the law): velocity within the active limits, direction-relative,
widened only as far as the reference itself goes (a stop from a measured state, an envelope brake) plus
:data:`V_MARGIN` of the limit for the feedback, and never beyond the envelope; force within the active force
limit and the envelope's, and never more than takes the measured velocity to the envelope's within the period it is
held (the computed-torque law's overshoot stops there); a non-finite command becomes zero velocity (or zero force).
Counted when clipped.
"""

from __future__ import annotations

import math

from .._jit import tick_jit
from ..drive._base import DRIVE_SIM
from ..errors import ErrorCode
from . import _layout as L
from ._layout import LoopArrays
from ._link import compensated, restart_clock
from ._stop import set_error, start_stop

SPEED_FACTOR = 2.0
"""No drive commanded within the envelope moves (or reports moving) faster than this times its velocity."""
JITTER_S = 0.02
"""Slack on the time between two samples [second] (delivery jitter)."""
STEP_MARGIN = 0.5
"""Slack on a position step, as a fraction of the following-error window."""
RESYNC_SAMPLES = 20
"""Consecutive finite, mutually consistent samples after which a drive that moved on is trusted again."""
V_MARGIN = 0.05
"""A velocity command may exceed the active velocity limit by this fraction of it (room for the feedback)."""

_CODE = (0.0, float(ErrorCode.FEEDBACK_NOT_FINITE), float(ErrorCode.FEEDBACK_IMPLAUSIBLE),
         float(ErrorCode.FEEDBACK_STAMP))  # fmt: skip


@tick_jit
def _stamped(s: float) -> bool:
    return math.isfinite(s) and s > 0.0


@tick_jit
def _plausible(A: LoopArrays, p: float, v: float, rx: float, s: float, p0: float, rx0: float, s0: float) -> float:
    """FB_OK if (p, v) received at ``rx`` (stamped ``s``) can follow (p0 at rx0, s0); else FB_STAMP or FB_JUMP."""
    cfg = A.cfg
    timeout = cfg[L.K_FEEDBACK_TIMEOUT]
    dt = rx - rx0
    if _stamped(s) and _stamped(s0):
        if abs((rx - s) - (rx0 - s0)) > timeout:
            return L.FB_STAMP
        dt = max(dt, min(s - s0, dt + timeout))
    v_lim = SPEED_FACTOR * cfg[L.K_ENV_V]
    allowed = v_lim * (max(dt, 0.0) + JITTER_S) + STEP_MARGIN * cfg[L.K_FE_WINDOW]
    if not (abs(p - p0) <= allowed and abs(v) <= v_lim):
        return L.FB_JUMP
    return L.FB_OK


@tick_jit
def _judge(A: LoopArrays, remote: bool) -> float:
    """The reason to distrust this tick's new sample (FB_OK: none), against the last good one."""
    m, st = A.meas, A.st
    unseen = remote and m[L.M_NOT_FINITE] > st[L.ST_FB_NF_SEEN]  # Counted first: one NaN is judged once.
    if unseen:
        st[L.ST_FB_NF_SEEN] = m[L.M_NOT_FINITE]
    for k in (L.M_P, L.M_V, L.M_A, L.M_F):
        if not math.isfinite(m[k]):
            return L.FB_NOT_FINITE
    if unseen:
        return L.FB_NOT_FINITE  # One came since the last tick, overwritten by this finite one before it.
    if not remote or st[L.ST_FB_GOOD] == 0.0 or st[L.ST_ENGAGED] == 0.0:
        return L.FB_OK  # Disengaged, a finite sample is the new baseline: a new origin (homing) moves nothing.
    return _plausible(A, m[L.M_P], m[L.M_V], m[L.M_RX_T], m[L.M_STAMP], st[L.ST_FB_P], st[L.ST_FB_RX_T],
                      st[L.ST_FB_STAMP])  # fmt: skip


@tick_jit
def _take(A: LoopArrays) -> None:
    """This sample is the last good one."""
    m, st = A.meas, A.st
    st[L.ST_FB_GOOD] = 1.0
    st[L.ST_FB_BAD] = L.FB_OK
    st[L.ST_FB_RUN] = 0.0
    st[L.ST_FB_P], st[L.ST_FB_V], st[L.ST_FB_A], st[L.ST_FB_F] = m[L.M_P], m[L.M_V], m[L.M_A], m[L.M_F]
    st[L.ST_FB_RX_T], st[L.ST_FB_STAMP], st[L.ST_FB_COUNT] = m[L.M_RX_T], m[L.M_STAMP], m[L.M_COUNT]


@tick_jit
def _substitute(now: float, A: LoopArrays) -> None:
    """Hide the distrusted sample: the stages see the last good one, not fresh (a silent drive stays silent)."""
    m, st = A.meas, A.st
    m[L.M_P], m[L.M_V], m[L.M_A], m[L.M_F] = st[L.ST_FB_P], st[L.ST_FB_V], st[L.ST_FB_A], st[L.ST_FB_F]
    m[L.M_COUNT], m[L.M_RX_T], m[L.M_STAMP] = st[L.ST_FB_COUNT], st[L.ST_FB_RX_T], st[L.ST_FB_STAMP]
    if m[L.M_FRESH] == 1.0:
        m[L.M_FRESH] = L.FRESH_DISTRUSTED
    if math.isfinite(st[L.ST_FB_RX_T]):
        m[L.M_AGE] = now - st[L.ST_FB_RX_T]


@tick_jit
def _fault(now: float, A: LoopArrays, reason: float) -> None:
    """The feedback became distrusted: its error, counted; the stop from the last good state (or the reference,
    where the two agree within the following-error window)."""
    st, out, cfg = A.st, A.out, A.cfg
    st[L.ST_FB_BAD] = reason
    st[L.ST_FB_LAST] = reason
    st[L.ST_FB_FAULTS] += 1.0
    set_error(st, _CODE[int(reason)])
    if st[L.ST_ENGAGED] == 0.0 or st[L.ST_MODE] == L.MODE_STOP:
        return  # Nothing moves, or the stop runs already (on, from now, the reference only).
    p, v = st[L.ST_FB_P], st[L.ST_FB_V]
    if st[L.ST_FB_GOOD] != 0.0 and abs(out[L.O_PREF] - p) > cfg[L.K_FE_WINDOW]:
        env_a = cfg[L.K_ENV_A]
        start_stop(now, A, p, min(max(v, -cfg[L.K_ENV_V]), cfg[L.K_ENV_V]), min(max(st[L.ST_FB_A], -env_a), env_a))
    else:
        start_stop(now, A, out[L.O_PREF], out[L.O_VREF], out[L.O_AREF])


@tick_jit
def check_feedback(now: float, A: LoopArrays) -> None:
    """Judge the drive's new sample (see the module docstring); hide it from every later stage if distrusted."""
    m, st, cfg = A.meas, A.st, A.cfg
    remote = cfg[L.K_DRIVE] != DRIVE_SIM
    if remote:
        if not m[L.M_COUNT] > 0.0 or m[L.M_COUNT] == st[L.ST_FB_SEEN]:
            if st[L.ST_FB_BAD] != L.FB_OK:
                _substitute(now, A)  # Nothing new: the latest sample is still the distrusted one.
            return
        st[L.ST_FB_SEEN] = m[L.M_COUNT]
    reason = _judge(A, remote)
    if reason == L.FB_OK:
        _take(A)
        return
    was_bad = st[L.ST_FB_BAD] != L.FB_OK
    if was_bad and reason != L.FB_NOT_FINITE and math.isfinite(st[L.ST_FB_PREV_P]):
        ok = _plausible(A, m[L.M_P], m[L.M_V], m[L.M_RX_T], m[L.M_STAMP], st[L.ST_FB_PREV_P],
                        st[L.ST_FB_PREV_RX_T], st[L.ST_FB_PREV_STAMP]) == L.FB_OK  # fmt: skip
        st[L.ST_FB_RUN] = st[L.ST_FB_RUN] + 1.0 if ok else 0.0
    else:
        st[L.ST_FB_RUN] = 0.0
    finite = reason != L.FB_NOT_FINITE
    st[L.ST_FB_PREV_P] = m[L.M_P] if finite else math.nan
    st[L.ST_FB_PREV_RX_T], st[L.ST_FB_PREV_STAMP] = m[L.M_RX_T], m[L.M_STAMP]
    if was_bad and st[L.ST_FB_RUN] >= RESYNC_SAMPLES:
        # The drive moved on (a new origin, a restarted clock): its stream is the truth from now on.
        _take(A)
        restart_clock(A)
        if st[L.ST_ENGAGED] != 0.0:
            env_a = cfg[L.K_ENV_A]
            start_stop(now, A, m[L.M_P], min(max(m[L.M_V], -cfg[L.K_ENV_V]), cfg[L.K_ENV_V]),
                       min(max(m[L.M_A], -env_a), env_a))  # fmt: skip
        return
    if not was_bad:
        _fault(now, A, reason)
    else:
        st[L.ST_FB_BAD] = reason
    _substitute(now, A)


@tick_jit
def bound_command(A: LoopArrays, v_cmd: float, f_cmd: float) -> tuple[float, float]:
    """(v, f) within the envelope and the active limits (see the module docstring); NaN, NaN when disengaged."""
    st, cfg, act, ref = A.st, A.cfg, A.act, A.ref
    if st[L.ST_ENGAGED] == 0.0:
        return math.nan, math.nan
    ev = cfg[L.K_ENV_V]
    flim = min(st[L.ST_FLIM], cfg[L.K_ENV_F])
    if not flim >= 0.0:
        flim = 0.0
    v, f = v_cmd, f_cmd
    if cfg[L.K_LAW] == L.LAW_VELOCITY:
        v_hi = min(act[L.C_VMAX], ev)
        v_lo = max(act[L.C_VMIN], -ev)
        if not (math.isfinite(v_hi) and math.isfinite(v_lo)):
            v_hi, v_lo = ev, -ev
        margin = V_MARGIN * max(v_hi, -v_lo, 0.0)
        r_hi, r_lo = max(ref[1], ref[5]), min(ref[1], ref[5])
        if compensated(A):
            r_hi, r_lo = max(r_hi, ref[9], ref[13]), min(r_lo, ref[9], ref[13])
        hi = min(max(v_hi, r_hi) + margin, ev)
        lo = max(min(v_lo, r_lo) - margin, -ev)
        if not math.isfinite(hi) or not math.isfinite(lo):
            hi, lo = 0.0, 0.0  # A reference that is not finite: hold.
        v = min(max(v, lo), hi) if math.isfinite(v) else 0.0
        clipped = v != v_cmd
        f = flim
    else:
        f = min(max(f, -flim), flim) if math.isfinite(f) else 0.0
        m = A.meas
        if m[L.M_FRESH] == 1.0 and math.isfinite(m[L.M_V]):
            # No force that would carry the joint past the envelope's velocity within the period it is held: at
            # most the one that ends the period on it (a computed-torque overshoot, the feedback's, is cut there).
            j_t = cfg[L.K_INERTIA] / (cfg[L.K_DRIVE_PERIOD] if compensated(A) else cfg[L.K_PERIOD])
            f = min(max(f, j_t * (-ev - m[L.M_V])), j_t * (ev - m[L.M_V]))
            f = min(max(f, -flim), flim)  # The force limit last: a joint far past the envelope brakes at it.
        clipped = f != f_cmd
    if clipped:
        st[L.ST_CMD_CLIPPED] += 1.0
    return v, f
