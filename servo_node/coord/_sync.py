"""Synchronisation math of coordinated motion: the limits that make every axis's own time-optimal plan last the same.

Pure functions of states and limits (no pycyphal, no asyncio, no clock). Every duration comes from the OTG the
nodes run (:mod:`servo_node.otg`), so a prediction here is the node's plan, not an approximation of it.

Facts used:

* **Scale invariance.** The jerk-limited time-optimal problem is linear: the distance ρ·D under the limits
  ρ·(v, a, j) has exactly the timing of D under (v, a, j), with every p, v, a, j multiplied by ρ. Mirroring
  (ρ < 0) maps the direction-relative rule onto itself: ``a_max`` bounds speeding up and ``|a_min|`` slowing
  down in either direction, so a mirrored axis keeps those two roles and takes the velocity limit of its own
  direction of travel.
* **Time scaling.** p(t) → p(k·t) maps the limits (v, a, j) → (k·v, k²·a, k³·j). From rest to rest it maps
  time-optimal plans onto time-optimal plans, so the duration is exactly T/k; from a start in motion the start
  state does not scale along, and the duration is found by a search over k (it does not increase with k: larger
  limits admit every plan of smaller ones).

Modes (:class:`Sync`):

* ``phase`` (rest to rest only): the *limiting* axis (longest time-optimal plan) keeps its limits; axis i gets
  them scaled by its distance ratio ρ_i = |D_i|/|D_L|, direction-relative. All axes then follow one normalised
  progress s(t): a straight line in joint space. Valid only where the scaled plan stays within the axis's own
  limits (peak speed in its direction of travel, speeding-up and slowing-down acceleration, jerk; a limit the
  limiting plan never reaches does not count, and is sent clipped to the axis's own); otherwise, or when an
  axis starts in motion, phase sync is infeasible, the reason is returned and ``time`` is used instead.
* ``time``: every axis arrives at the common duration T = max T_i; axis i gets its own limits time-scaled by
  k_i ∈ (0, 1] such that its own time-optimal plan lasts exactly T.
* ``none``: every axis time-optimal under its own limits.

**Held axes** (the caller names them: a joint that keeps its target, whose distance is only a settling residual
or the float32 of the wire) get their own limits and are left out of the spread, the straight line and the
common duration. Scaled to such a distance their limits would be practically zero, which a node refuses (below
1e-4 of its envelope).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from servo_node.otg import Planner, Status, Trajectory
from servo_node.otg import _profile as _pl  # the profile layout: phases are read to find the plan's peaks
from servo_node.setpoint import ProfileLimits

DURATION_RTOL = 1e-12
"""The scale search stops when |T_i − T| ≤ this × T."""

MISS_RTOL = 1e-9
"""A time-scaled plan further than this × T from the common duration is reported (the planner's own rounding
leaves about 1e-12 where the search cannot do better)."""

LIMIT_RTOL = 1e-12
"""A scaled limit exceeding the axis's own by at most this fraction (rounding) is taken as equal."""

K_MIN = 1e-6
"""The smallest time scale searched: limits k·v, k²·a, k³·j below this are practically zero (and nodes refuse
limits below 1e-4 of their envelope anyway)."""


class Sync(StrEnum):
    """How the axes of one move are synchronised."""

    PHASE = "phase"
    """One normalised progress for all axes: a straight line in joint space (rest to rest)."""
    TIME = "time"
    """Common arrival, each axis on its own (time-scaled) profile."""
    NONE = "none"
    """Each axis time-optimal on its own."""


@dataclass(frozen=True)
class AxisMotion:
    """One axis of a move: its start state, its target (at rest) and its own limits."""

    p0: float
    v0: float
    a0: float
    target: float
    limits: ProfileLimits

    @property
    def distance(self) -> float:
        """Target minus start position."""
        return self.target - self.p0

    @property
    def at_rest(self) -> bool:
        """True when the axis starts with zero velocity and acceleration."""
        return self.v0 == 0.0 and self.a0 == 0.0


@dataclass(frozen=True)
class AxisPlan:
    """What one axis is told, and what its own planner will make of it."""

    limits: ProfileLimits
    """The profile limits to send: the axis's time-optimal plan under them is the synchronised one."""
    duration: float
    """Duration of the axis's time-optimal plan under :attr:`limits` [second]."""
    optimal_duration: float
    """Duration of its time-optimal plan under its own limits [second]."""
    scale: float
    """``phase``: distance ratio ρ to the limiting axis; ``time``: time scale k; ``none``: 1; held: 0."""
    held: bool = False
    """Held at its target with its own limits, outside the synchronisation (see :func:`synchronize`)."""


@dataclass(frozen=True)
class SyncPlan:
    """A synchronised move: the common duration and one :class:`AxisPlan` per axis, in order."""

    requested: Sync
    used: Sync
    duration: float
    """The common duration: the longest time-optimal plan [second]."""
    limiting: int
    """Index of the axis whose own limits set :attr:`duration` (-1: nothing moves)."""
    axes: tuple[AxisPlan, ...]
    fallback: str = ""
    """Why ``phase`` was requested but not used (empty otherwise)."""
    notes: tuple[str, ...] = ()
    """Axes whose duration could not be matched exactly (time sync blocked) and similar findings."""

    @property
    def spread(self) -> float:
        """Largest minus smallest planned duration among the axes that move (held ones aside) [second]."""
        moving = [a.duration for a in self.axes if a.duration > 0.0 and not a.held]
        return max(moving) - min(moving) if moving else 0.0


class _Durations:
    """Durations of the node's own planner (one reused :class:`~servo_node.otg.Planner`)."""

    def __init__(self) -> None:
        self._planner = Planner()

    def __call__(self, ax: AxisMotion, lim: ProfileLimits) -> float:
        return self.trajectory(ax, lim).duration

    def trajectory(self, ax: AxisMotion, lim: ProfileLimits) -> Trajectory:
        """The planner's (reused) trajectory of ``ax`` under ``lim``; raises ValueError if the OTG refuses."""
        traj = self._planner.plan(ax.p0, ax.v0, ax.a0, ax.target, 0.0, *lim.as_tuple())
        if traj.status != Status.OK:
            raise ValueError(f"the OTG refused the move {ax} under {lim}: {traj.status.name}")
        return traj


_durations: _Durations | None = None


def _duration_of() -> _Durations:
    global _durations
    if _durations is None:
        _durations = _Durations()
    return _durations


def optimal_duration(ax: AxisMotion, limits: ProfileLimits | None = None) -> float:
    """Duration of the time-optimal plan of ``ax`` under ``limits`` (default: its own) [second]."""
    return _duration_of()(ax, ax.limits if limits is None else limits)


def time_scaled(limits: ProfileLimits, k: float) -> ProfileLimits:
    """The limits of the plan slowed down in time by ``k``: (k·v, k²·a, k³·j)."""
    return ProfileLimits(k * limits.v_min, k * limits.v_max, k * k * limits.a_min, k * k * limits.a_max,
                         k * k * k * limits.j_max)


@dataclass(frozen=True)
class _Travel:
    """Limits relative to a direction of travel: speed, speeding-up and slowing-down acceleration, jerk."""

    speed: float
    up: float
    down: float
    jerk: float

    @staticmethod
    def of(lim: ProfileLimits, direction: float) -> _Travel:
        speed = lim.v_max if direction > 0.0 else -lim.v_min
        return _Travel(speed, lim.a_max, -lim.a_min, lim.j_max)


def travel_peaks(ax: AxisMotion, limits: ProfileLimits | None = None) -> _Travel:
    """Peak speed, speeding-up and slowing-down acceleration and jerk of the axis's time-optimal plan from rest.

    Exact from the plan's constant-jerk phases: the acceleration is piecewise linear (its extremes sit on phase
    boundaries) and the velocity peaks where the acceleration crosses zero or on a boundary.
    """
    traj = _duration_of().trajectory(ax, ax.limits if limits is None else limits)
    s = 1.0 if ax.distance >= 0.0 else -1.0
    prof = traj.profile
    n = int(prof[_pl.COUNT])
    speed = up = down = jerk = 0.0
    for k in range(n):
        base = _pl.HEADER + k * _pl.PHASE_STRIDE
        t0, v, a, j = prof[base + _pl.PH_T], prof[base + _pl.PH_V], prof[base + _pl.PH_A], prof[base + _pl.PH_J]
        t1 = prof[base + _pl.PHASE_STRIDE + _pl.PH_T] if k + 1 < n else prof[_pl.DURATION]
        dt = max(0.0, t1 - t0)
        a1 = a + j * dt
        v1 = v + a * dt + 0.5 * j * dt * dt
        speed = max(speed, s * v, s * v1)
        if j != 0.0 and a * a1 < 0.0:  # The velocity's extremum inside the phase.
            speed = max(speed, s * (v - 0.5 * a * a / j))
        up, down = max(up, s * a, s * a1), max(down, -s * a, -s * a1)
        if dt > 0.0:
            jerk = max(jerk, abs(j))
    return _Travel(speed, up, down, jerk)


def phase_limits(limiting: AxisMotion, ax: AxisMotion, peaks: _Travel | None = None) -> ProfileLimits | str:
    """Limits that make ``ax`` follow the limiting axis's plan scaled by the distance ratio, or why it cannot.

    Both axes start at rest. By scale invariance ``ax``'s time-optimal plan under the limiting axis's limits scaled
    by ρ = |D_i|/|D_L| (direction-relative: ``ax`` may move the other way) is that scaled plan. Valid where the
    scaled plan's *peaks* (speed in the direction of travel, speeding-up and slowing-down acceleration, jerk)
    stay within ``ax``'s own limits; then each limit sent is min(scaled limit, own limit): the scaled plan stays
    admissible and remains optimal under the smaller limits (the same criterion Ruckig's phase synchronisation
    applies to its profiles). The velocity limit against the direction of travel (unused) stays the axis's own.
    """
    d_l, d_i = limiting.distance, ax.distance
    rho = abs(d_i) / abs(d_l)
    src = _Travel.of(limiting.limits, d_l)
    pk = travel_peaks(limiting) if peaks is None else peaks
    own = _Travel.of(ax.limits, d_i)
    for name, want, have in (
        ("velocity", rho * pk.speed, own.speed),
        ("acceleration", rho * pk.up, own.up),
        ("deceleration", rho * pk.down, own.down),
        ("jerk", rho * pk.jerk, own.jerk),
    ):
        if want > have * (1.0 + LIMIT_RTOL):
            return (f"its {name} would peak at {want:.6g} > its own limit {have:.6g} (the limiting axis's plan scaled "
                    f"by the distance ratio {rho:.6g})")
    sp = _Travel(min(rho * src.speed, own.speed), min(rho * src.up, own.up), min(rho * src.down, own.down),
                 min(rho * src.jerk, own.jerk))
    lim = ax.limits
    if d_i > 0.0:
        v_min, v_max = lim.v_min, sp.speed
    else:
        v_min, v_max = -sp.speed, lim.v_max
    return ProfileLimits(v_min, v_max, -sp.down, sp.up, sp.jerk)


def time_limits(
    ax: AxisMotion, duration: float, own_duration: float | None = None
) -> tuple[ProfileLimits, float, float]:
    """Time-scaled limits under which the axis's own time-optimal plan lasts ``duration``.

    From rest the scale is k = T_i / T exactly; from a start in motion k is searched (the duration does not
    increase with k) by regula falsi (Illinois) on u = 1/k, along which the duration is nearly linear.

    :returns: (limits, k, the duration under them); the duration differs from ``duration`` by more than
        :data:`MISS_RTOL` only if no scale reaches it (a jump in the duration: the caller reports it).
    """
    dur = _duration_of()
    t_i = dur(ax, ax.limits) if own_duration is None else own_duration
    if t_i >= duration or duration <= 0.0:
        return ax.limits, 1.0, t_i
    if ax.at_rest:
        k = t_i / duration
        lim = time_scaled(ax.limits, k)
        return lim, k, dur(ax, lim)

    def f(u: float) -> float:
        return dur(ax, time_scaled(ax.limits, 1.0 / u)) - duration

    tol = DURATION_RTOL * duration
    u_lo, f_lo = 1.0, t_i - duration
    u_hi = min(max(duration / t_i, 1.0 + 1e-9), 1.0 / K_MIN) if t_i > 0.0 else 2.0
    f_hi = f(u_hi)
    while f_hi < 0.0 and u_hi < 1.0 / K_MIN:
        u_lo, f_lo = u_hi, f_hi
        u_hi = min(2.0 * u_hi, 1.0 / K_MIN)
        f_hi = f(u_hi)
    if f_hi < 0.0:  # Even the slowest scale arrives early: take it.
        lim = time_scaled(ax.limits, 1.0 / u_hi)
        return lim, 1.0 / u_hi, dur(ax, lim)
    side = 0
    for _ in range(200):
        if abs(f_hi) <= tol:
            break
        if abs(f_lo) <= tol:
            u_hi, f_hi = u_lo, f_lo
            break
        u = (u_lo * f_hi - u_hi * f_lo) / (f_hi - f_lo)
        if not (u_lo < u < u_hi):
            u = 0.5 * (u_lo + u_hi)
        if u_hi - u_lo <= 1e-15 * u_hi:
            break  # The duration jumps across the bracket: no scale reaches it exactly.
        fu = f(u)
        if fu < 0.0:
            u_lo, f_lo = u, fu
            if side == -1:
                f_hi *= 0.5
            side = -1
        else:
            u_hi, f_hi = u, fu
            if side == 1:
                f_lo *= 0.5
            side = 1
    k = 1.0 / u_hi
    lim = time_scaled(ax.limits, k)
    return lim, k, dur(ax, lim)


def synchronize(axes: Sequence[AxisMotion], sync: Sync | str = Sync.PHASE, held: Collection[int] = ()) -> SyncPlan:
    """Plan a coordinated move: per-axis time-optimal durations, the common duration, the limits per axis.

    ``phase`` falls back to ``time`` when it is infeasible; :attr:`SyncPlan.fallback` says why (never silent).
    ``held``: indices of axes to hold at their target with their own limits, outside the synchronisation (a joint
    whose target does not change: its distance is only a settling residual); a plan note names each one held
    while its target differs from its position.
    """
    sync = Sync(sync)
    dur = _duration_of()
    own = [dur(ax, ax.limits) for ax in axes]
    free = [0.0 if i in held else t for i, t in enumerate(own)]
    own_plans = tuple(_own_plan(ax, t, i in held) for i, (ax, t) in enumerate(zip(axes, own, strict=True)))
    if not axes or max(free) <= 0.0:
        return SyncPlan(sync, sync, 0.0, -1, own_plans, notes=_held_notes(axes, own_plans))
    limiting = max(range(len(axes)), key=lambda i: free[i])
    t_common = own[limiting]
    if sync is Sync.NONE:
        return SyncPlan(sync, sync, t_common, limiting, own_plans, notes=_held_notes(axes, own_plans))
    fallback = ""
    if sync is Sync.PHASE:
        result = _phase(axes, own, limiting, held)
        if isinstance(result, tuple):
            return SyncPlan(sync, Sync.PHASE, t_common, limiting, result, notes=_held_notes(axes, result))
        fallback = result
    plans_t: list[AxisPlan] = []
    notes: list[str] = []
    for i, (ax, t_i) in enumerate(zip(axes, own, strict=True)):
        if i in held or t_i <= 0.0:
            plans_t.append(_own_plan(ax, t_i, held=True))
            continue
        lim, k, t = time_limits(ax, t_common, t_i)
        if abs(t - t_common) > MISS_RTOL * t_common:
            notes.append(f"axis {i}: no time scale reaches {t_common:.6f} s from its start state; it takes {t:.6f} s")
        plans_t.append(AxisPlan(lim, t, t_i, k))
    notes += _held_notes(axes, plans_t)
    return SyncPlan(sync, Sync.TIME, t_common, limiting, tuple(plans_t), fallback, tuple(notes))


def _own_plan(ax: AxisMotion, duration: float, held: bool) -> AxisPlan:
    """The axis under its own limits: time-optimal (scale 1), or held (scale 0)."""
    return AxisPlan(ax.limits, duration, duration, 0.0 if held else 1.0, held=held)


def _held_notes(axes: Sequence[AxisMotion], plans: Sequence[AxisPlan]) -> tuple[str, ...]:
    """A note per axis held while its target differs from its position (never silent)."""
    return tuple(f"axis {i}: held {ax.distance:.3g} from its target (own limits, not synchronised)"
                 for i, (ax, pl) in enumerate(zip(axes, plans, strict=True)) if pl.held and ax.distance != 0.0)


def _phase(axes: Sequence[AxisMotion], own: Sequence[float], limiting: int,
           held: Collection[int]) -> tuple[AxisPlan, ...] | str:
    """Phase-synchronised plans, or why phase synchronisation is infeasible."""
    moving = [i for i, ax in enumerate(axes) if (ax.distance != 0.0 or not ax.at_rest) and i not in held]
    for i in moving:
        ax = axes[i]
        if not ax.at_rest:
            return f"axis {i} starts in motion (v={ax.v0:.6g}, a={ax.a0:.6g}): phase sync needs every axis at rest"
    lead = axes[limiting]
    peaks = travel_peaks(lead)
    dur = _duration_of()
    plans: list[AxisPlan] = []
    for i, ax in enumerate(axes):
        if i == limiting:
            plans.append(AxisPlan(ax.limits, own[i], own[i], 1.0))
            continue
        if i in held or ax.distance == 0.0:
            plans.append(_own_plan(ax, own[i], held=True))
            continue
        lim = phase_limits(lead, ax, peaks)
        if isinstance(lim, str):
            return f"axis {i}: {lim}"
        plans.append(AxisPlan(lim, dur(ax, lim), own[i], abs(ax.distance) / abs(lead.distance)))
    return tuple(plans)


def with_limits(ax: AxisMotion, limits: ProfileLimits) -> AxisMotion:
    """The same move under other limits."""
    return replace(ax, limits=limits)


def normalised_progress(p: float, p0: float, target: float) -> float:
    """(p − p0) / (target − p0); NaN for an axis that does not move."""
    d = target - p0
    return (p - p0) / d if d != 0.0 else math.nan
