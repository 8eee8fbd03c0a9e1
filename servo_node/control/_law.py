"""The control laws: velocity ``v = v_ref + k·e`` or computed torque, for the embedded joint and, through the link
model, for a drive on the bus; a stop's braking and a lost drive's feed-forward included. The command they give
is bounded next (:func:`._feedback.bound_command`)."""

from __future__ import annotations

import numpy as np

from .._jit import tick_jit
from . import _layout as L
from . import _link as link
from ._layout import LoopArrays


@tick_jit
def control_law(A: LoopArrays, braking: bool) -> tuple[float, float]:
    """(v_cmd, f_cmd): velocity ``v = v_ref(t + T) + k·e`` or computed torque ``τ = J·ā_ref + K_p·e + K_d·ė``.

    Both feed-forwards are exact for a command held over the period T to the next tick: the velocity the reference
    has at its end, and ā_ref = (v_ref(t + T) − v_ref(t))/T, the reference's mean acceleration over it, which a
    force held for T gives a rigid joint of inertia J (its velocity ends the period on the reference's, whatever
    J). The acceleration now, held for T, lags a jerk-limited reference by j·T/2 and leaves a tracking error that
    depends on J and the gains: different on every axis of a coordinated move, so off its straight line.

    Braking (a stop's hold near its end, at rest, or past its bound): velocity 0 exactly, or in torque mode the
    deadbeat force −J·v/T that stops the joint within one period. Without fresh feedback (drive lost):
    feed-forward only. Disengaged: NaN (nothing commanded).
    """
    st, cfg, m, ref = A.st, A.cfg, A.meas, A.ref
    if st[L.ST_ENGAGED] == 0.0:
        return np.nan, np.nan
    if link.compensated(A):
        return bus_law(A, braking)
    flim = st[L.ST_FLIM]
    fresh = m[L.M_FRESH] == 1.0
    e = ref[0] - m[L.M_P] if fresh else 0.0
    if cfg[L.K_LAW] == L.LAW_VELOCITY:
        if braking:
            return 0.0, flim
        return ref[5] + cfg[L.K_VELOCITY_GAIN] * e, flim  # A finite force beside a velocity is its limit.
    if braking and fresh:
        f = -cfg[L.K_INERTIA] * m[L.M_V] / cfg[L.K_PERIOD]  # Deadbeat: the force that stops J within one period.
        return np.nan, min(max(f, -flim), flim)
    de = ref[1] - m[L.M_V] if fresh else 0.0
    a_mean = (ref[5] - ref[1]) / cfg[L.K_PERIOD]  # ref[4:8]: the reference one period ahead.
    f = cfg[L.K_INERTIA] * a_mean + cfg[L.K_KP] * e + cfg[L.K_KD] * de
    return np.nan, min(max(f, -flim), flim)


@tick_jit
def bus_law(A: LoopArrays, braking: bool) -> tuple[float, float]:
    """The law for a drive on the bus, through the link model (:mod:`._link`): the command takes effect at
    ``t_e`` and is held for the drive period ``T_d``.

    Velocity: ``v = (p_ref(t_e + T_d) − p_ref(t_e)) / T_d + k·(p_ref(t_e) − p̂(t_e))`` — the feed-forward is the
    mean reference velocity over the hold (so a held command ends the period on the reference), the feedback acts
    on the predicted position. Torque: ``τ = J·(v_ref(t_e + T_d) − v_ref(t_e)) / T_d + K_p·(p_ref − p̂) +
    K_d·(v_ref − v̂)`` at ``t_e``. Braking: velocity 0, or the force that stops the predicted velocity within one
    drive period. Without fresh feedback: feed-forward only.
    """
    st, cfg, m, ref = A.st, A.cfg, A.meas, A.ref
    flim = st[L.ST_FLIM]
    fresh = m[L.M_FRESH] == 1.0
    t_d = cfg[L.K_DRIVE_PERIOD]
    t_e = A.link[L.LK_EFFECT_T]
    p_hat, v_hat = link.predict(A, t_e) if fresh else (ref[8], ref[9])
    A.link[L.LK_PRED_P] = p_hat
    if cfg[L.K_LAW] == L.LAW_VELOCITY:
        if braking:
            return 0.0, flim
        return (ref[12] - ref[8]) / t_d + cfg[L.K_VELOCITY_GAIN] * (ref[8] - p_hat), flim
    if braking and fresh:
        f = -cfg[L.K_INERTIA] * v_hat / t_d
        return np.nan, min(max(f, -flim), flim)
    f = cfg[L.K_INERTIA] * (ref[13] - ref[9]) / t_d + cfg[L.K_KP] * (ref[8] - p_hat) + cfg[L.K_KD] * (ref[9] - v_hat)
    return np.nan, min(max(f, -flim), flim)
