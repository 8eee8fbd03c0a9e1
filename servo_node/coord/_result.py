"""A finished coordinated move: what every node reports (its plan), what the joints did (:mod:`._joints`: arrival
spread and straight-line deviation from their own samples), and the recorder of an axis's ``dynamics``."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servo_node.otg import Trajectory

from ._cadence import held_up
from ._joints import LINE_WARN, Joints, Samples, measure
from ._measure import plan_lag, plan_positions, progress_deviation
from ._sync import AxisMotion, Sync, SyncPlan

PLAN_MATCH_TOL = 1e-4
"""A node's planned duration within this (relative, plus as many seconds) of the prediction is this move's plan
(``sys.motion`` rounds T to 7 digits, and the node starts from its own reading of the position)."""


@dataclass
class Recorder:
    """Timestamped positions of one axis from its ``dynamics`` (system clock [second])."""

    t: list[float] = field(default_factory=list)
    p: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)
    a: list[float] = field(default_factory=list)
    received: int = 0

    def add(self, t: float, p: float, v: float, a: float) -> None:
        """A sample [second, the node's stamp]; one not newer than the last is dropped (a repeat)."""
        self.received += 1
        if self.t and t <= self.t[-1]:
            return
        self.t.append(t)
        self.p.append(p)
        self.v.append(v)
        self.a.append(a)

    def samples(self, period: float) -> Samples:
        """The recording as arrays, for :mod:`._joints` (``period``: the node's dynamics period [second])."""
        return Samples(np.asarray(self.t), np.asarray(self.p), np.asarray(self.v), period)

    def last_stamp(self) -> float:
        """The newest sample's stamp [second] (−inf: none)."""
        return self.t[-1] if self.t else -math.inf


def after_arrival(end: dict[str, Any], half: dict[str, Any]) -> dict[str, Any]:
    """A node's ``sys.motion`` after a move (``end``), with the plan it ran half-way (``half``) if a stop that
    started after that plan's arrival replaced it since: the move was made; only what followed it stopped."""
    plan_end, plan_half = end.get("plan", {}), half.get("plan", {})
    try:
        later = float(plan_end["t0"]) >= float(plan_half["t0"]) + float(plan_half["T"])
    except (KeyError, TypeError, ValueError):
        return end
    if plan_half.get("kind") == "move" and plan_end.get("kind") != "move" and later:
        return {**end, "plan": plan_half}
    return end


@dataclass(frozen=True)
class AxisReport:
    """One axis of a finished move."""

    label: str
    start: float
    target: float
    predicted: float
    """The coordinator's prediction of the node's plan duration [second]."""
    node_duration: float
    """The node's own planned duration (``sys.motion`` plan.T) [second]."""
    node_start: float
    """The node's plan start t0 (system clock) [second]."""
    settled: float
    """Plan start to arrival within the node's tolerance [second] (NaN: not yet)."""
    final: float
    """Measured position after the move."""
    kind: str = "move"
    """What the node's reported plan is: ``move`` (this move's), ``stop`` or ``off`` (a stop replaced it)."""
    lag: float = math.nan
    """How far the measured motion trails its plan started at t0 [second] (from ``dynamics``; NaN: not recorded):
    p_meas(t) ≈ p_plan(t − t0 − lag), fitted by least squares over the move."""
    held: bool = False
    """Held where it is (its distance too small to synchronise, see ``_sync.HOLD_FRACTION``): not a moving axis."""

    @staticmethod
    def of(label: str, motion: dict[str, Any], mot: AxisMotion, predicted: float, rec: Recorder | None,
           traj: Trajectory, held: bool) -> AxisReport:
        """The report of one axis from its node's ``sys.motion`` after the move, the motion planned for it, and its
        recorded ``dynamics`` (None: not recorded; the lag is then unknown)."""
        pl = motion.get("plan", {})
        t0 = float(pl.get("t0", math.nan))
        moving = mot.target != mot.p0 and not held
        final = rec.p[-1] if rec is not None and rec.p else float(motion["meas"][0])
        settled = motion.get("settled")
        lag = plan_lag(traj, t0, np.asarray(rec.t), np.asarray(rec.p)) if rec is not None and moving else math.nan
        return AxisReport(label, mot.p0, mot.target, predicted, float(pl.get("T", math.nan)), t0,
                          float(settled) if isinstance(settled, float) else math.nan, final,
                          str(pl.get("kind", "move")), lag, held)

    @property
    def stopped(self) -> bool:
        """The node's plan is not this move's: a stop replaced it, or the node planned another motion (e.g. it
        took the setpoint only after its deadman had stopped it: a plan from elsewhere, of another duration)."""
        own_plan = abs(self.node_duration - self.predicted) <= PLAN_MATCH_TOL * (1.0 + self.predicted)
        return self.kind != "move" or not own_plan

    @property
    def arrival(self) -> float:
        """t0 + T on the system clock [second]."""
        return self.node_start + self.node_duration

    @property
    def moves(self) -> bool:
        """Part of the synchronised motion: its target differs from its start and it is not held."""
        return self.target != self.start and not self.held


@dataclass(frozen=True)
class MoveResult:
    """A finished move: the plan, what every node reports, and the measured synchronisation."""

    plan: SyncPlan
    axes: tuple[AxisReport, ...]
    sent_at: float
    """System time the burst left [second]."""
    burst_s: float
    """From the first setpoint of the burst to the last leaving the coordinator [second]."""
    planning_s: float
    """Reading limits excluded: planning and float32 re-prediction [second]."""
    deviation: float
    """Straight-line deviation measured from the joints' ``dynamics`` (max spread of normalised progress over the
    judged instants, :attr:`joints`); NaN if unknown."""
    reference_deviation: float
    """The same from the nodes' reference trajectories (their plans, started at their reported t0)."""
    dynamics_rate_hz: float
    """Mean rate of the recorded ``dynamics`` per axis during the move."""
    rejected: tuple[str, ...] = ()
    """Axes that did not take their setpoint, with the node's last rejection (e.g. a time-scaled jerk below the
    node's floor of 1e-4 × its envelope): their t0 is an older plan's and the spread is not meaningful."""
    joints: Joints | None = None
    """What the joints did, from their own samples (None: not recorded)."""
    line_threshold: float = LINE_WARN
    """A measured deviation above this fraction of the stroke is a warning (``--check-line``)."""
    setpoint_gap_s: float = math.nan
    """The longest time between two sends of the setpoints from the burst to the measurement [second]
    (:mod:`._cadence`)."""
    deadman_s: float = math.inf
    """The shortest deadman of the nodes [second]: a longer gap stops them."""

    @property
    def held_up(self) -> str:
        """Why the nodes stopped if the coordinator made them (:func:`._cadence.held_up`), or ''."""
        return held_up(self.setpoint_gap_s, self.deadman_s)

    @property
    def stopped(self) -> tuple[str, ...]:
        """Moving axes whose plan a stop replaced before the measurement (left out of the spreads)."""
        return tuple(a.label for a in self.axes if a.moves and a.stopped)

    @property
    def spread(self) -> float:
        """Arrival spread: max − min of t0 + T over the moving axes that followed their plan [second]."""
        arrivals = [a.arrival for a in self.axes if a.moves and not a.stopped]
        return max(arrivals) - min(arrivals) if arrivals else 0.0

    @property
    def measured_spread(self) -> float:
        """Arrival spread of the joints: max − min of each moving axis's last entry into ±0.1 % of its stroke, from
        its own samples [second] (NaN unless recorded, or an arrival fell into lost samples)."""
        return self.joints.spread if self.joints is not None else math.nan

    @property
    def line_verdict(self) -> str:
        """``ok``, ``above`` (the measured deviation exceeds :attr:`line_threshold`), ``unjudged`` (samples lost,
        or not recorded)."""
        if self.plan.used is not Sync.PHASE:
            return "ok"  # Time or no sync: not a straight line, not judged as one.
        return self.joints.verdict(self.line_threshold) if self.joints is not None else "unjudged"

    def table(self) -> str:
        """Human-readable summary, one line per axis."""
        rows = [self.plan.summary]
        rows += [f"note: {n}" for n in self.plan.notes]
        rows += [f"REJECTED by {r}" for r in self.rejected]
        rows += [f"STOPPED before arrival: {a} (a stop or another plan replaced this move's; left out of the "
                 f"spread)" for a in self.stopped]
        if self.stopped and self.held_up:
            rows.append(f"why: {self.held_up}")

        ref = min((a.arrival for a in self.axes if a.moves), default=self.sent_at)
        j = self.joints
        measured = [a for a in j.arrivals if math.isfinite(a)] if j is not None else []
        m_ref = min(measured, default=math.nan)
        rows.append(f"{'axis':<12} {'from':>10} {'to':>10} {'planned s':>10} {'node T s':>10} {'t0-sent ms':>10} "
                    f"{'arrival ms':>10} {'joint ms':>10} {'lag ms':>10} {'settled s':>10} {'error':>10}")
        for k, a in enumerate(self.axes):
            arrival = f"{(a.arrival - ref) * 1e3:>10.3f}" if not a.held else f"{'held':>10}"
            joint = f"{(j.arrivals[k] - m_ref) * 1e3 if j is not None and not a.held else math.nan:>10.3f}"
            rows.append(f"{a.label:<12} {a.start:>10.4f} {a.target:>10.4f} {a.predicted:>10.6f} "
                        f"{a.node_duration:>10.6f} "
                        f"{(a.node_start - self.sent_at) * 1e3:>10.3f} {arrival} {joint} "
                        f"{a.lag * 1e3:>10.3f} {a.settled:>10.4f} {a.final - a.target:>10.2e}")
        spread_m, line_m, notes = (j.describe([a.label for a in self.axes], self.line_threshold,
                                              self.plan.used is Sync.PHASE) if j is not None
                                   else ("measured: not recorded", "measured: not recorded", []))
        rows += [f"samples: {n}" for n in notes]
        rows.append(f"arrival spread {self.spread * 1e3:.3f} ms (t0 + T as the nodes report), {spread_m}; "
                    f"burst {self.burst_s * 1e6:.0f} µs; planning {self.planning_s * 1e3:.3f} ms")
        rows.append(f"straight-line deviation: planned {self.reference_deviation * 100:.4f} % of stroke (the nodes' "
                    f"plans from their reported t0), {line_m}")
        return "\n".join(rows)


def line_measures(recs: Sequence[Recorder] | None, periods: Sequence[float], motions: Sequence[AxisMotion],
                  plan: SyncPlan, trajs: Sequence[Trajectory], axes: Sequence[AxisReport], sent_at: float,
                  window: float, judged: tuple[float, float]) -> tuple[Joints | None, float, float]:
    """(what the joints did, reference deviation, dynamics rate) of a move: the joints from their recordings
    ``recs`` (None: not recorded) over ``judged`` (from, to) on their stamps' clock (``periods``: each node's
    dynamics period), the straight-line deviation of the nodes' plans started at their reported t0 over ``window``
    seconds from ``sent_at`` (NaN if a moving axis was stopped), the mean rate of the recorded ``dynamics``."""
    t_to = sent_at + window
    starts = [m.p0 for m in motions]
    targets = [m.p0 if ap.held else m.target for m, ap in zip(motions, plan.axes, strict=True)]  # Held: no line.
    joints, rate = None, math.nan
    if recs is not None:
        moving = [a.moves and not a.stopped for a in axes]
        joints = measure([r.samples(p) for r, p in zip(recs, periods, strict=True)], starts, targets, moving,
                         *judged)
        counts = [bisect.bisect_left(r.t, judged[1]) - bisect.bisect_left(r.t, judged[0]) for r in recs]
        rate = float(np.mean(counts)) / (judged[1] - judged[0])
    grid = np.arange(sent_at, t_to, 1e-3)
    ref_series = [(grid, plan_positions(traj, rep.node_start if math.isfinite(rep.node_start) else sent_at,
                                        grid)[0]) for traj, rep in zip(trajs, axes, strict=True)]
    ref_dev = (progress_deviation(ref_series, starts, targets, sent_at, t_to)
               if not any(a.moves and a.stopped for a in axes) else math.nan)
    return joints, ref_dev, rate
