"""The stop to rest and the primitives every stage of the tick shares: the error codes, raising an error, the
deadman test (:func:`expired`), engaging and disengaging.

Below both :mod:`._stages` and :mod:`._mimic` (each stops the joint, judges the deadman and raises errors), so
neither imports the other's stages. The stop (:func:`start_stop`, :func:`stop_from`): jerk-limited, at least as
hard as ``K_STOP_A``/``K_STOP_J`` (harder if the active command was), within the envelope; its hold to rest is
the reference stage's (:func:`._stages.reference`). Pure numba on the loop's arrays.
"""

from __future__ import annotations

import numpy as np

from .._jit import tick_jit
from ..errors import ErrorCode
from ..otg import plan_velocity_into, profile_duration
from . import _layout as L
from ._layout import LoopArrays

E_NONE = float(ErrorCode.NONE)
E_INFEASIBLE = float(ErrorCode.INFEASIBLE)
E_NUMERICAL = float(ErrorCode.NUMERICAL_FAILURE)
E_DRIVE_LOST = float(ErrorCode.DRIVE_LOST)
E_FOLLOWING = float(ErrorCode.FOLLOWING_ERROR)
E_STOP_TIMEOUT = float(ErrorCode.STOP_TIMEOUT)
E_FB_FIRST = float(ErrorCode.FEEDBACK_NOT_FINITE)
E_FB_LAST = float(ErrorCode.FEEDBACK_STAMP)


@tick_jit
def expired(age: float, cfg: np.ndarray) -> bool:
    """The deadman, the one test every stage uses: a command (or the leader's latest sample) older than
    ``K_DEADMAN`` since its reception has expired; an unknown age (NaN) too."""
    return not age <= cfg[L.K_DEADMAN]


@tick_jit
def clearable(e: float) -> bool:
    """An error a new plan ends: its setpoint's own (infeasible, numerical), a following error, a feedback fault
    (the plan is only taken once the feedback is trusted again)."""
    return e == E_INFEASIBLE or e == E_NUMERICAL or e == E_FOLLOWING or E_FB_FIRST <= e <= E_FB_LAST


@tick_jit
def set_error(st: np.ndarray, code: float) -> None:
    """Raise an error (counted once per change)."""
    if st[L.ST_ERROR] != code:
        st[L.ST_ERROR] = code
        st[L.ST_ERROR_COUNT] += 1.0


@tick_jit
def engage(st: np.ndarray, mode: float, now: float) -> None:
    """The loop commands the drive in ``mode``, its plan starting at ``now``."""
    st[L.ST_MODE] = mode
    st[L.ST_T0] = now
    st[L.ST_ENGAGED] = 1.0


@tick_jit
def disengage(st: np.ndarray) -> None:
    """The loop no longer commands the drive (the force is removed)."""
    st[L.ST_MODE] = L.MODE_DISENGAGE
    st[L.ST_ENGAGED] = 0.0
    st[L.ST_PRE_BRAKE] = 0.0


@tick_jit
def start_stop(now: float, A: LoopArrays, p0: float, v0: float, a0: float) -> None:
    """Begin the stop from (p0, v0, a0); see the module docstring of :mod:`._stages`. Its bound is fixed here, up
    front."""
    cfg, st, act = A.cfg, A.st, A.act
    a_s = min(max(cfg[L.K_STOP_A], st[L.ST_DECEL]), cfg[L.K_ENV_A])
    j_s = min(max(cfg[L.K_STOP_J], st[L.ST_JERK]), cfg[L.K_ENV_J])
    plan_velocity_into(p0, v0, a0, 0.0, -a_s, a_s, j_s, A.prof)
    st[L.ST_MODE] = L.MODE_STOP
    st[L.ST_T0] = now
    st[L.ST_STOP_T0] = now
    st[L.ST_STOP_TOOK] = np.nan
    st[L.ST_STOP_PLANNED] = profile_duration(A.prof)
    st[L.ST_STOP_BOUND] = st[L.ST_STOP_PLANNED] + cfg[L.K_STOP_HOLD_MAX] + cfg[L.K_REST_TIME] + cfg[L.K_PERIOD]
    st[L.ST_REST_SINCE] = np.nan
    st[L.ST_BRAKE_EFFECT] = np.nan
    st[L.ST_PRE_BRAKE] = 0.0
    st[L.ST_FLIM] = cfg[L.K_ENV_F]  # A stop may use the envelope's force, whatever the last setpoint allowed.
    act[L.C_MODE] = L.MODE_STOP


@tick_jit
def stop_from(now: float, A: LoopArrays) -> None:
    """Start the stop from the reference, or from the measured state when they disagree beyond the window."""
    out, m = A.out, A.meas
    if abs(out[L.O_PREF] - m[L.M_P]) > A.cfg[L.K_FE_WINDOW] or m[L.M_FRESH] != 1.0:
        if m[L.M_FRESH] == 1.0:
            env_a = A.cfg[L.K_ENV_A]
            start_stop(now, A, m[L.M_P], m[L.M_V], min(max(m[L.M_A], -env_a), env_a))
            return
    start_stop(now, A, out[L.O_PREF], out[L.O_VREF], out[L.O_AREF])
