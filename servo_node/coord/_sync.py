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

* ``phase``: a straight line in joint space, time-optimal. The move is one path parameter s: 0 → 1 with
  p_i = p_i0 + D_i·s, and every axis's limits bound s: ṡ ≤ v_i/|D_i| (v_i its velocity limit in its own direction
  of travel), s̈ ≤ a_max_i/|D_i| speeding up, −s̈ ≤ |a_min_i|/|D_i| slowing down, |s⃛| ≤ j_i/|D_i|. The
  time-optimal s-profile under the smallest of these is the time-optimal straight line; by scale invariance axis i
  gets exactly |D_i| times the s-limits (direction-relative, mirrored for axes moving the other way), so its own
  planner makes D_i·s(t). Always feasible from rest; from a start in motion where the start state lies on the line
  (every axis's v0 and a0 proportional to its distance by the same factors ṡ0, s̈0): the same, from (0, ṡ0, s̈0).
  Otherwise ``time`` is used and the reason returned. The line lasts at least as long as the slowest axis alone;
  :attr:`SyncPlan.stretch` says by how much it exceeds the fastest common arrival (time sync).
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
from servo_node.setpoint import ProfileLimits

DURATION_RTOL = 1e-12
"""The scale search stops when |T_i − T| ≤ this × T."""

MISS_RTOL = 1e-9
"""A time-scaled plan further than this × T from the common duration is reported (the planner's own rounding
leaves about 1e-12 where the search cannot do better)."""

LIMIT_RTOL = 1e-12
"""A scaled limit exceeding the axis's own by at most this fraction (rounding) is taken as equal."""

COLLINEAR_RTOL = 1e-9
"""A start state is on the line when every axis's v0/D_i and a0/D_i match the line's ṡ0 and s̈0 to this fraction of
the line's own speed and acceleration limits."""

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
    """``phase``: distance ratio |D_i|/|D_L| to the limiting axis; ``time``: time scale k; ``none``: 1; held: 0."""
    held: bool = False
    """Held at its target with its own limits, outside the synchronisation (see :func:`synchronize`)."""


@dataclass(frozen=True)
class SyncPlan:
    """A synchronised move: the common duration and one :class:`AxisPlan` per axis, in order."""

    requested: Sync
    used: Sync
    duration: float
    """The common duration [second]: the slowest axis's own optimum (``time``, ``none``), or the time-optimal
    straight line's (``phase``), never shorter."""
    limiting: int
    """Index of the axis with the longest time-optimal plan under its own limits (-1: nothing moves)."""
    axes: tuple[AxisPlan, ...]
    fallback: str = ""
    """Why ``phase`` was requested but not used (empty otherwise)."""
    notes: tuple[str, ...] = ()
    """Axes whose duration could not be matched exactly (time sync blocked) and similar findings."""
    stretch: float = 1.0
    """:attr:`duration` over the fastest common arrival (the slowest axis alone): what the straight line costs."""

    @property
    def summary(self) -> str:
        """One line: the mode used (and why not phase), the common duration, what the straight line costs."""
        why = f" (phase infeasible: {self.fallback})" if self.fallback else ""
        cost = f" (line +{(self.stretch - 1.0) * 100.0:.1f} % over time sync)" if self.used is Sync.PHASE else ""
        return f"sync {self.used.value}{why}; common duration {self.duration:.6f} s{cost}"

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
class Line:
    """The straight line of a phase-synchronised move: limits and start state of its path parameter s: 0 → 1."""

    limits: ProfileLimits
    """Limits of s: the smallest of every moving axis's own limits over its distance, direction-relative."""
    sdot0: float
    sddot0: float

    def axis_limits(self, ax: AxisMotion) -> ProfileLimits:
        """|D_i| times the s-limits, mirrored for an axis moving the other way: its plan is then p0 + D_i·s(t)."""
        d = ax.distance
        m, lim = abs(d), self.limits
        if d > 0.0:
            v_min, v_max = m * lim.v_min, m * lim.v_max
        else:
            v_min, v_max = -m * lim.v_max, -m * lim.v_min
        return ProfileLimits(v_min, v_max, m * lim.a_min, m * lim.a_max, m * lim.j_max)


def straight_line(axes: Sequence[AxisMotion], moving: Sequence[int]) -> Line | str:
    """The line through the moving axes' start and target, or why their start state is not on it.

    ``moving``: indices of the axes to put on the line (each with a distance ≠ 0). The start of s is taken from the
    longest move (the best-conditioned ratio); every axis's own ratios v0/D and a0/D must match it to
    :data:`COLLINEAR_RTOL` of the line's speed and acceleration limits.
    """
    fwd = back = up = down = jerk = math.inf
    for i in moving:
        ax = axes[i]
        d, lim, m = ax.distance, ax.limits, abs(ax.distance)
        ahead, behind = (lim.v_max, -lim.v_min) if d > 0.0 else (-lim.v_min, lim.v_max)
        fwd, back = min(fwd, ahead / m), min(back, behind / m)
        up, down, jerk = min(up, lim.a_max / m), min(down, -lim.a_min / m), min(jerk, lim.j_max / m)
    ref = axes[max(moving, key=lambda i: abs(axes[i].distance))]
    sdot0, sddot0 = ref.v0 / ref.distance, ref.a0 / ref.distance
    for i in moving:
        ax = axes[i]
        d = ax.distance
        if abs(ax.v0 / d - sdot0) > COLLINEAR_RTOL * fwd or abs(ax.a0 / d - sddot0) > COLLINEAR_RTOL * max(up, down):
            return (f"axis {i} starts in motion off the line (v={ax.v0:.6g}, a={ax.a0:.6g}; the line needs "
                    f"v={sdot0 * d:.6g}, a={sddot0 * d:.6g}): phase sync needs every axis's start state "
                    f"proportional to its distance")
    peak = sdot0 + sddot0 * abs(sddot0) / (2.0 * jerk)  # ṡ once s̈ is brought to zero at the line's jerk
    if abs(sddot0) > min(up, down) * (1.0 + COLLINEAR_RTOL) or not -back <= peak <= fwd:
        return (f"the start in motion is on the line, but the line's limits (the smallest of every axis's) cannot take "
                f"it without passing an axis's own limit (ṡ0={sdot0:.6g}, s̈0={sddot0:.6g}: s-speed {peak:.6g} of "
                f"[{-back:.6g}, {fwd:.6g}], s-acceleration limit {min(up, down):.6g})")
    return Line(ProfileLimits(-back, fwd, -down, up, jerk), sdot0, sddot0)


def line_duration(line: Line) -> float:
    """Duration of the time-optimal s-profile from (0, ṡ0, s̈0) to 1 at rest under the line's limits [second]."""
    return _duration_of()(AxisMotion(0.0, line.sdot0, line.sddot0, 1.0, line.limits), line.limits)


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

    ``phase`` is the time-optimal straight line; it falls back to ``time`` only when a start in motion is off
    every line, and :attr:`SyncPlan.fallback` says why (never silent).
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
        if not isinstance(result, str):
            plans, t_line = result
            return SyncPlan(sync, Sync.PHASE, t_line, limiting, plans, notes=_held_notes(axes, plans),
                            stretch=t_line / t_common)
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
           held: Collection[int]) -> tuple[tuple[AxisPlan, ...], float] | str:
    """The time-optimal straight line (plans and duration), or why the start state is not on any line."""
    moving = [i for i, ax in enumerate(axes) if i not in held and ax.distance != 0.0]
    for i, ax in enumerate(axes):
        if i not in held and ax.distance == 0.0 and not ax.at_rest:
            return (f"axis {i} starts in motion (v={ax.v0:.6g}, a={ax.a0:.6g}) at its target: it cannot be on a "
                    f"line")
    line = straight_line(axes, moving)
    if isinstance(line, str):
        return line
    dur = _duration_of()
    d_l = abs(axes[limiting].distance)
    plans: list[AxisPlan] = []
    for i, ax in enumerate(axes):
        if i not in moving:
            plans.append(_own_plan(ax, own[i], held=True))
            continue
        lim = line.axis_limits(ax)
        plans.append(AxisPlan(lim, dur(ax, lim), own[i], abs(ax.distance) / d_l))
    return tuple(plans), line_duration(line)


def with_limits(ax: AxisMotion, limits: ProfileLimits) -> AxisMotion:
    """The same move under other limits."""
    return replace(ax, limits=limits)


def normalised_progress(p: float, p0: float, target: float) -> float:
    """(p − p0) / (target − p0); NaN for an axis that does not move."""
    d = target - p0
    return (p - p0) / d if d != 0.0 else math.nan
