"""Mimic (electronic gearing): the follower's reference as the relation applied to a leader, re-planned each tick.

The relation (SDFormat's mimic constraint): ``follower = m·(leader − ref) + offset``, so the target velocity is
``m·v_L`` and its acceleration ``m·a_L``. The leader's latest sample (``lead``, written by the node) is
extrapolated with its velocity and acceleration from the time it was measured (its timestamp mapped onto the
loop clock; without compensation from its reception) to now, and the relation applied: the target
``T(t) = p_T + v_T·(t − t0) + ½·a_T·(t − t0)²``.

Each tick re-plans in the frame moving with the target: the relative state ``(p_ref − p_T, v_ref − v_T,
a_ref − a_T)`` is driven to (0, 0, 0) by our OTG with the follower's velocity limits shifted by ``−v_T`` and a
symmetric acceleration limit reduced by ``|a_T|``, so ``reference = T + relative`` converges to the relation
exactly (no lag of the plan's duration, as planning towards the target's *current* position would have) and
never exceeds the follower's own velocity, acceleration or jerk. Where the relation asks for more than that
(|v_T| beyond the velocity limits, |a_T| beyond the acceleration limit) the feed-forward is clamped (and no
acceleration is fed forward near a speed limit, so the reference reaches it with zero acceleration), the follower
runs at its limits and catches up jerk-limited when it can: ``MI_LAG`` and ``MI_LAG_COUNT`` say so.

Two stages of the tick (:mod:`._kernel`): :func:`follow_leader` re-plans each tick and stops on a lost or failing
leader (the stop itself is :mod:`._stop`'s); it first gears in (:func:`gear_in`) when ``take_command`` took a mimic
command this tick. The target frame the other stages read (:func:`sample_relative`) and the mimic fields of the
published sample (:func:`publish_into`) are here too, as is the relation itself (:class:`Relation`): all of
mimic's mathematics is this module. Pure numba on the loop's arrays; it imports no other stage than the stop, so
:mod:`._stages` may import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._jit import tick_jit
from .._seqlock import try_read_seqlocked
from ..otg import plan_into, plan_velocity_into, profile_duration, sample_into
from . import _layout as L
from ._layout import LoopArrays
from ._stop import E_INFEASIBLE, E_NONE, E_NUMERICAL, clearable, engage, expired, set_error, start_stop, stop_from

V_MARGIN = 1e-3
"""The clamped target velocity stays this fraction of the velocity range inside the limits (a valid plan)."""

LATENCY_MAX_S = 0.03
"""The most latency a leader sample's stamp may claim [second]; the rest is a clock error, not compensated."""

A_FEED_MAX = 0.5
"""At most this fraction of the acceleration limit is fed forward; the relative plan keeps the rest."""


@dataclass(frozen=True)
class Relation:
    """``follower = multiplier · (leader − reference) + offset`` (SDFormat's mimic constraint)."""

    multiplier: float = 1.0
    offset: float = 0.0
    reference: float = 0.0

    def __call__(self, leader_position: float) -> float:
        """The follower's position for a leader position."""
        return self.multiplier * (leader_position - self.reference) + self.offset


@tick_jit
def take_leader(A: LoopArrays) -> None:
    """This tick's consistent copy of the leader's sample and state (``lead_c``). While the node is mid-update (its
    writer preempted there, perhaps by this very thread at real-time priority) the last copy stays: its age grows,
    so a leader that falls silent is still seen."""
    if try_read_seqlocked(A.lead, A.lead_s):
        for k in range(A.lead_s.size):
            A.lead_c[k] = A.lead_s[k]


@tick_jit
def leader_target(now: float, A: LoopArrays) -> tuple[float, float, float, float]:
    """(p_T, v_T, a_T, dt): the relation applied to the leader's sample extrapolated over dt to ``now``."""
    ld, cfg = A.lead_c, A.cfg
    since = ld[L.LD_RX_T]
    if ld[L.LD_COMPENSATE] != 0.0 and math.isfinite(ld[L.LD_T]):
        # The sample's latency as its stamp tells it, believed only within [0, LATENCY_MAX_S]: a stamp mapped
        # through a wrong or stepped time master would move the follower off its relation by v times the error.
        since -= min(max(ld[L.LD_RX_T] - ld[L.LD_T], 0.0), LATENCY_MAX_S)
    horizon = cfg[L.K_DEADMAN]
    dt = min(max(now - since, -horizon), horizon)  # A stamp off by more than the deadman is not trusted further.
    p_l, v_l, a_l = ld[L.LD_P], ld[L.LD_V], ld[L.LD_A]
    if not math.isfinite(a_l):
        a_l = 0.0
    m = ld[L.LD_MULT]
    p = p_l + dt * (v_l + 0.5 * a_l * dt)
    v = v_l + a_l * dt
    return m * (p - ld[L.LD_REF]) + ld[L.LD_OFFSET], m * v, m * a_l, dt


@tick_jit
def replan(now: float, A: LoopArrays, p_r: float, v_r: float, a_r: float) -> int:
    """Plan from the reference state (p_r, v_r, a_r) at ``now`` towards the relation; returns the OTG status.

    Writes the relative plan into ``prof`` and the target into ``mim``; the caller sets ``ST_T0 = now``.
    """
    act, mi = A.act, A.mim
    p_t, v_t, a_t, dt = leader_target(now, A)
    mi[L.MI_EXTRAP] = dt
    v_min, v_max, j = act[L.C_VMIN], act[L.C_VMAX], act[L.C_JMAX]
    a_lim = min(-act[L.C_AMIN], act[L.C_AMAX])
    a_c = min(max(a_t, -A_FEED_MAX * a_lim), A_FEED_MAX * a_lim)
    base = V_MARGIN * (v_max - v_min)
    # The relative frame moves at v_c + a_c·t, but its plan's limits are fixed at v_c: while the reference brakes
    # onto a speed limit (its acceleration from at most a_lim to 0 takes a_lim/j, plus the tick it is sampled in),
    # the frame's velocity drifts by a_c times that, towards the limit a_c points at. The relative limit on that
    # side leaves the room (else the reference passed v_max by up to a_c·(T + a_lim/j): 3 % when gearing in to an
    # accelerating target).
    room = min(abs(a_c) * (A.cfg[L.K_PERIOD] + a_lim / j), 0.25 * (v_max - v_min))
    hi = room if a_c > 0.0 else 0.0
    lo = room if a_c < 0.0 else 0.0
    v_c = min(max(v_t, v_min + base + lo), v_max - base - hi)
    # No acceleration is fed forward where the target's velocity is clamped, or would pass a speed limit before a
    # jerk-limited ramp could bring that acceleration to zero (v + a·|a|/2j): the frame then moves at constant
    # velocity, and the relative plan brakes the reference onto the limit (it passed it by a²/2j before).
    reach = v_t + a_c * abs(a_c) / (2.0 * j)
    if v_c != v_t or reach > v_max - base - hi or reach < v_min + base + lo:
        a_c = 0.0
        hi = lo = 0.0
        v_c = min(max(v_t, v_min + base), v_max - base)
    lag = v_t < v_min or v_t > v_max or abs(a_t) > a_lim
    if lag and mi[L.MI_LAG] == 0.0:
        mi[L.MI_LAG_COUNT] += 1.0
    mi[L.MI_LAG] = 1.0 if lag else 0.0
    mi[L.MI_P], mi[L.MI_V], mi[L.MI_A] = p_t, v_c, a_c
    a_rel = a_lim - abs(a_c)
    status = plan_into(
        p_r - p_t, v_r - v_c, a_r - a_c, 0.0, 0.0, v_min - v_c + lo, v_max - v_c - hi, -a_rel, a_rel, j, A.prof
    )
    if status != 0:
        # No relative plan (a numerical corner): change the follower's own velocity towards the clamped target
        # velocity within its limits instead; the next tick plans relative again.
        mi[L.MI_P], mi[L.MI_V], mi[L.MI_A] = 0.0, 0.0, 0.0
        status = plan_velocity_into(p_r, v_r, a_r, v_c, -a_lim, a_lim, j, A.prof)
    return status


@tick_jit
def verdict(now: float, A: LoopArrays) -> tuple[float, float]:
    """(reason, latency): why following must end now (``MIMIC_*``; 0: go on) and how long after the reception of
    the message that showed it (for a lost leader: after the deadman expired)."""
    ld, cfg = A.lead_c, A.cfg
    state = ld[L.LD_STATE]
    if state != L.LEADER_OK:
        reason = L.MIMIC_LEADER_ERROR if state == L.LEADER_ERROR else L.MIMIC_DISENGAGED
        return reason, now - ld[L.LD_STATE_RX_T]
    age = now - ld[L.LD_RX_T]
    if expired(age, cfg):  # Also NaN: no sample at all.
        return L.MIMIC_LOST, age - cfg[L.K_DEADMAN] if math.isfinite(age) else 0.0
    return 0.0, 0.0


@tick_jit
def relation_error(A: LoopArrays, t_meas: float) -> float:
    """Target − measured position at the measurement's time (``t_meas`` after the plan start)."""
    mi = A.mim
    return mi[L.MI_P] + t_meas * (mi[L.MI_V] + 0.5 * mi[L.MI_A] * t_meas) - A.meas[L.M_P]


@tick_jit
def gear_in(now: float, A: LoopArrays, p0: float, v0: float, a0: float) -> None:
    """Engage mimic from (p0, v0, a0): gear in towards the relation under the follower's own limits, no step."""
    st, out = A.st, A.out
    take_leader(A)
    A.mim[L.MI_REASON] = 0.0
    A.mim[L.MI_STOP_LATENCY] = np.nan
    status = replan(now, A, p0, v0, a0)
    out[L.O_PLAN_STATUS] = status
    out[L.O_REPAIRED] = 0.0
    out[L.O_DURATION] = profile_duration(A.prof)
    st[L.ST_PRE_BRAKE] = 0.0
    if status == 0:
        engage(st, L.MODE_MIMIC, now)
        st[L.ST_TRACK_MAX] = 0.0
        st[L.ST_SETTLED] = np.nan
        if clearable(st[L.ST_ERROR]):
            st[L.ST_ERROR] = E_NONE
    else:
        set_error(st, E_INFEASIBLE if status == 1 else E_NUMERICAL)
        if st[L.ST_ENGAGED] != 0.0:
            start_stop(now, A, p0, v0, a0)


@tick_jit
def follow_leader(now: float, A: LoopArrays) -> None:
    """Mimic: stop on a lost leader (deadman by the reception of its samples) or one that reports it disengaged or
    failed (at the first tick after the node wrote that state); else re-plan towards the relation (:mod:`._mimic`)."""
    st, mi, m = A.st, A.mim, A.meas
    if mi[L.MI_GEAR_IN] != 0.0:  # A mimic command taken this tick (``_stages.take_command``).
        mi[L.MI_GEAR_IN] = 0.0
        gear_in(now, A, mi[L.MI_P0], mi[L.MI_V0], mi[L.MI_A0])
    take_leader(A)
    if st[L.ST_ENGAGED] == 0.0 or st[L.ST_MODE] != L.MODE_MIMIC:
        return
    reason, latency = verdict(now, A)
    if reason != 0.0:
        mi[L.MI_REASON] = reason
        mi[L.MI_STOP_LATENCY] = latency
        mi[L.MI_LAG] = 0.0
        if reason == L.MIMIC_LOST:
            st[L.ST_EXPIRED] = 1.0
            st[L.ST_EXPIRED_AFTER] = now - A.lead_c[L.LD_RX_T]
            st[L.ST_EXPIRED_AT] = now
        stop_from(now, A)
        return
    ref = A.ref
    sample_relative(A, now - st[L.ST_T0], ref)  # The reference now, under the plan of the previous tick.
    status = replan(now, A, ref[0], ref[1], ref[2])
    st[L.ST_T0] = now
    A.out[L.O_DURATION] = profile_duration(A.prof)
    if status != 0:
        set_error(st, E_INFEASIBLE if status == 1 else E_NUMERICAL)
        start_stop(now, A, ref[0], ref[1], ref[2])
        return
    t_m = m[L.M_T] - now if math.isfinite(m[L.M_T]) else 0.0
    mi[L.MI_ERROR] = relation_error(A, t_m)


@tick_jit
def add_target(A: LoopArrays, t: float, out: np.ndarray) -> None:
    """Add the target's state at ``t`` after the plan start (``ST_T0``) to a relative sample ``out[0:3]``."""
    mi = A.mim
    out[0] += mi[L.MI_P] + t * (mi[L.MI_V] + 0.5 * mi[L.MI_A] * t)
    out[1] += mi[L.MI_V] + mi[L.MI_A] * t
    out[2] += mi[L.MI_A]


@tick_jit
def sample_relative(A: LoopArrays, t: float, out: np.ndarray) -> None:
    """The reference at ``t`` after the plan start: the relative plan plus the target (mimic mode)."""
    sample_into(A.prof, t, out)
    add_target(A, t, out)


@tick_jit
def publish_into(now: float, A: LoopArrays, following: bool) -> None:
    """The mimic fields of ``out`` (inside the publisher's seqlock)."""
    out, mi, st = A.out, A.mim, A.st
    t = now - st[L.ST_T0]
    if following:
        out[L.O_MIM_TARGET] = mi[L.MI_P] + t * (mi[L.MI_V] + 0.5 * mi[L.MI_A] * t)
        out[L.O_MIM_ERROR] = mi[L.MI_ERROR]
    else:
        out[L.O_MIM_TARGET] = np.nan
        out[L.O_MIM_ERROR] = np.nan
    out[L.O_MIM_LAG] = mi[L.MI_LAG] if following else 0.0
    out[L.O_MIM_LAG_COUNT] = mi[L.MI_LAG_COUNT]
    out[L.O_MIM_REASON] = mi[L.MI_REASON]
    out[L.O_MIM_STOP_LATENCY] = mi[L.MI_STOP_LATENCY]
    out[L.O_MIM_EXTRAP] = mi[L.MI_EXTRAP]
    out[L.O_MIM_LEAD_AGE] = now - A.lead_c[L.LD_RX_T]
