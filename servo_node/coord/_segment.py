"""One coordinated move planned as the nodes will plan it: every axis's limits time-scaled and rounded to the
float32 a ServoCommand carries, the synchronised plan, and the commands that carry it."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from servo_node.setpoint import Floors, ProfileLimits, below_floor, floor_margin

from ._axes import CoordError
from ._sync import AxisMotion, Sync, SyncPlan, optimal_duration, synchronize, time_scaled


def _f32(x: float) -> float:
    return float(np.float32(x))


@dataclass(frozen=True)
class AxesInfo:
    """What every move of a coordinator needs of its axes: their own limits and arrival tolerances, and how often
    setpoints are repeated (a quarter of the shortest deadman, at most 0.1 s)."""

    limits: tuple[ProfileLimits, ...]
    tolerance: tuple[float, ...]
    repeat_s: float
    periods: tuple[float, ...] = ()
    """Each axis's ``dynamics`` period [second] (1 / ``servo.dynamics_rate``): its recording's expected spacing."""
    floors: tuple[Floors, ...] = ()
    """Each axis's smallest limits its node accepts (from ``sys.envelope``); none known: no floor."""
    deadman_s: float = math.inf
    """The shortest ``servo.deadman_timeout`` of the nodes [second]."""


@dataclass(frozen=True)
class Segment:
    """One coordinated move, planned: the sync plan, each axis's motion, the limits on the wire (float32) and the
    node's predicted duration under them."""

    plan: SyncPlan
    motions: list[AxisMotion]
    wire: list[ProfileLimits]
    predicted: list[float]

    @property
    def duration(self) -> float:
        """The longest predicted plan [second]."""
        return max(self.predicted)


def plan_segment(states: Sequence[tuple[float, float, float]], targets: Sequence[float], info: AxesInfo,
                 sync: Sync | str, held: Collection[int] = (), speed: float = 1.0) -> Segment:
    """Plan one coordinated move from ``states`` (p, v, a) to ``targets`` (float32 as the wire carries them) under
    every axis's own limits time-scaled by ``speed`` ∈ (0, 1]. An axis at rest within its arrival tolerance of its
    target has arrived: held, not synchronised. So is an axis whose share of the synchronised move would ask its
    node for limits below its floors (a stroke a few thousandths of the longest one's): the node would refuse the
    setpoint and keep its previous plan, so it makes its short move on its own limits instead, and a note says so."""
    limits = [lim if speed == 1.0 else time_scaled(lim, speed) for lim in info.limits]
    motions = [AxisMotion(p, v, a, _f32(pt), lim) for (p, v, a), pt, lim in zip(states, targets, limits, strict=True)]
    held = {*held, *(i for i, (m, tol) in enumerate(zip(motions, info.tolerance, strict=True))
                     if m.at_rest and abs(m.distance) <= tol)}
    plan = synchronize(motions, sync, held)
    short: dict[int, str] = {}
    for _ in motions:  # One axis out at a time: the one furthest below its floors (see _furthest_below_floors).
        found = _furthest_below_floors(plan, info.floors, held | short.keys())
        if found is None:
            break
        short[found[0]] = found[1]
        plan = synchronize(motions, sync, held | short.keys())
    if short:
        plan = replace(plan, notes=(*(n for n in plan.notes if not n.startswith(tuple(f"axis {i}:" for i in short))),
                                    *(f"axis {i}: moves {motions[i].distance:.3g} on its own limits, not "
                                      f"synchronised: its share of the move would be refused ({why})"
                                      for i, why in sorted(short.items()))))
    wire = [wire_limits(ap.limits) for ap in plan.axes]
    predicted = [optimal_duration(m, lim) for m, lim in zip(motions, wire, strict=True)]
    return Segment(plan, motions, wire, predicted)


def _furthest_below_floors(plan: SyncPlan, floors: Sequence[Floors], held: Collection[int]) -> tuple[int, str] | None:
    """The synchronised axis whose limits on the wire are furthest below its node's floors, with the node's reason.

    One at a time, because holding an axis out of the synchronisation removes its bounds from the line's limits (the
    smallest of every axis's) and can only shorten the common duration of ``time`` sync: the others' limits grow.
    An axis whose share falls below its floor only through another's small limits is then kept on the line."""
    worst: tuple[float, int, str] | None = None
    for i, (ap, fl) in enumerate(zip(plan.axes, floors or (Floors(),) * len(plan.axes), strict=True)):
        if i in held or ap.held or ap.duration <= 0.0:
            continue
        wire = wire_limits(ap.limits)
        why, margin = below_floor(wire, fl), floor_margin(wire, fl)
        if why is not None and (worst is None or margin < worst[0]):
            worst = (margin, i, why)
    return None if worst is None else (worst[1], worst[2])


def checked_segment(states: Sequence[tuple[float, float, float]], targets: Sequence[float], info: AxesInfo,
                    sync: Sync | str, held: Collection[int] = (), speed: float = 1.0) -> Segment:
    """:func:`plan_segment`, refused before anything moves if the OTG refuses it or the nodes cannot run it as
    planned (:func:`unplannable`).

    :raises CoordError: with the reason, ending in "nothing moved".
    """
    try:
        seg = plan_segment(states, targets, info, sync, held, speed)
    except ValueError as ex:  # The OTG refused it.
        raise CoordError(f"{ex}; nothing moved") from None
    why = unplannable(seg, targets, info.tolerance)
    if why is not None:
        raise CoordError(f"{why}; nothing moved")
    return seg


def unplannable(seg: Segment, targets: Sequence[float], tolerance: Sequence[float]) -> str | None:
    """Why the nodes cannot run ``seg`` as planned (checked before anything moves), or None.

    A ServoCommand carries float32: a target it cannot carry to within the axis's arrival tolerance (1e30 arrives
    as 1.0000000150e30, 1.5e22 off) is not the waypoint; and a moving axis's limits must stay non-zero numbers on
    the wire (a limit that underflows to 0 means "the node's default" to the node: another plan, not this one).
    """
    for i, (m, want, tol) in enumerate(zip(seg.motions, targets, tolerance, strict=True)):
        if not math.isfinite(want) or abs(m.target - want) > tol:
            return (f"axis {i + 1}: target {want:.7g} cannot be carried by a ServoCommand (float32 makes it "
                    f"{m.target!r}, beyond its arrival tolerance {tol:g})")
    for i, (lim, ap, t) in enumerate(zip(seg.wire, seg.plan.axes, seg.predicted, strict=True)):
        if ap.held or ap.duration <= 0.0:
            continue
        if not (lim.v_max > 0.0 and lim.a_min < 0.0 < lim.a_max and lim.j_max > 0.0) or not math.isfinite(t):
            return (f"axis {i + 1}: its limits on this move ({lim}) are not numbers a ServoCommand can carry "
                    f"(float32 underflow): no node would run the planned {seg.plan.duration:.6g} s")
    return None


def commands(seg: Segment) -> list[Any]:
    """The ServoCommand of every axis of a planned move."""
    import zubax.physics.dynamics
    import zubax.physics.kinematics
    import zubax.telega

    return [
        zubax.telega.ServoCommand_1_0(
            target=zubax.physics.dynamics.DoF2nd_1_0(
                kinematics=zubax.physics.kinematics.DoF2nd_1_0(position=m.target, velocity=0.0), force=0.0),
            profile_velocity_reverse_forward=[lim.v_min, lim.v_max],
            profile_deceleration_acceleration=[lim.a_min, lim.a_max],
            profile_jerk=lim.j_max,
        )
        for m, lim in zip(seg.motions, seg.wire, strict=True)
    ]


def wire_limits(lim: ProfileLimits) -> ProfileLimits:
    """The limits as a ServoCommand carries them (float32), which is what the node plans with: each rounded toward
    zero, so that none exceeds what was planned (a limit planned at the node's envelope, rounded up, would be
    clipped back by the node)."""
    return ProfileLimits(*(_f32_inward(x) for x in lim.as_tuple()))


def _f32_inward(x: float) -> float:
    """The float32 nearest ``x`` whose magnitude does not exceed |x|."""
    y = np.float32(x)
    if abs(float(y)) > abs(x):
        y = np.nextafter(y, np.float32(0.0))
    return float(y)


def within_envelope(own: ProfileLimits, envelope: Sequence[float]) -> tuple[ProfileLimits, Floors]:
    """``own`` limits clipped into a node's ``sys.envelope`` [|v|, |a|, |j|, force] as the node clips a setpoint's
    (``servo_node.control._stages._clip_limits``), and the smallest limits the node accepts; without an envelope
    (an older node, or NaNs: its loop not running yet) ``own`` as they are and no floors."""
    if len(envelope) != 4 or not all(map(math.isfinite, envelope)):
        return own, Floors()
    ev, ea, ej = envelope[0], envelope[1], envelope[2]
    return (ProfileLimits(max(own.v_min, -ev), min(own.v_max, ev), max(own.a_min, -ea), min(own.a_max, ea),
                          min(own.j_max, ej)), Floors.of_envelope(*envelope))
