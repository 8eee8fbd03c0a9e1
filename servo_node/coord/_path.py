"""Paths through waypoints (``servo-coord path``): consecutive coordinated moves, each started by one start message.

Every segment is planned before the first moves: from the previous waypoint at rest (float32, as the nodes hold
it) to the next, a straight line by default. While segment k runs, the runner *stages* segment k+1 (its setpoints
differ from the active ones, so the nodes keep them waiting, :mod:`servo_node.staging`), then publishes one start
message naming the instant segment k ends (plus the waypoint's dwell): no waypoint waits on the bus. The active
setpoints are repeated all along (the nodes' deadman), the staged ones too (a start needs a staged setpoint younger
than the deadman). A start is published a few milliseconds after its staging, and only once segment k has started,
since a node holds one staged setpoint at a time.

Each segment is measured from the nodes' ``sys.motion`` (read mid-segment: their plan's t0 and T, the planned
arrival spread) and from what the joints did, their recorded ``dynamics`` with their own stamps (:mod:`._joints`:
the measured arrival spread and straight-line deviation, lost samples, the position at its end). A fault of any axis
(a plan that is not the segment's, a rejected setpoint) ends the path: the runner stops feeding, every node stops
on its deadman (our jerk-limited stop), and the runner waits until every axis is at rest before it raises.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cyphal_common.tasks import cancel_and_wait, gather_all

from ._axes import CoordError
from ._cadence import Cadence, held_up
from ._joints import LINE_WARN, Joints, measure
from ._result import PLAN_MATCH_TOL, Recorder
from ._segment import Segment, checked_segment, commands
from ._session import Coordinator
from ._sync import Sync

STAGE_AHEAD_S = 0.5
"""A segment is staged this long before its start (at most; never before the segment before it has started)."""
START_AFTER_STAGE_S = 0.01
"""The start follows its staged setpoints by this much: on the bus a start must not overtake what it starts."""
SEGMENT_GAP_S = 0.01
"""Each segment starts this long after the one before ends (plus its dwell): the nodes map the start instant onto
their clocks to a millisecond or so, and a node must take the next segment at rest at its waypoint, where the
coordinator planned it from, not a millisecond before it arrives."""
SETTLE_S = 0.15
"""After the last segment's planned end, how long the runner waits before it measures the arrival."""


@dataclass(frozen=True)
class Waypoint:
    """One row of a path file: the joint targets, and how to get there."""

    targets: tuple[float, ...]
    dwell_s: float = 0.0
    """Rest at this waypoint before the next segment starts [second]."""
    sync: Sync = Sync.PHASE
    speed: float = 1.0
    """Every axis's limits time-scaled by this (0, 1]: the segment at this fraction of its time-optimal speed."""


def load_path(path: str | Path, n_axes: int) -> list[Waypoint]:
    """A CSV path: a header naming the columns (the first ``n_axes`` are the joint targets, in axis order; then
    any of ``dwell``, ``sync``, ``speed``), one row per waypoint; ``#`` starts a comment line."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = list(csv.reader(lines))
    if len(rows) < 2:
        raise ValueError(f"{path}: a header and at least one waypoint are needed")
    header = [h.strip().lower() for h in rows[0]]
    extra = header[n_axes:]
    if len(header) < n_axes or any(h not in ("dwell", "sync", "speed") for h in extra):
        raise ValueError(f"{path}: the header needs {n_axes} target columns, then any of dwell, sync, speed "
                         f"(got {', '.join(header)})")
    points = []
    for k, row in enumerate(rows[1:], start=1):
        if len(row) != len(header):
            raise ValueError(f"{path}: waypoint {k} has {len(row)} columns, the header {len(header)}")
        cells = dict(zip(extra, (c.strip() for c in row[n_axes:]), strict=True))
        targets = tuple(float(c) for c in row[:n_axes])
        dwell = float(cells.get("dwell") or 0.0)
        speed = float(cells.get("speed") or 1.0)
        if not all(map(math.isfinite, targets)) or not (0.0 <= dwell < 3600.0) or not (0.0 < speed <= 1.0):
            raise ValueError(f"{path}: waypoint {k}: finite targets, dwell in [0, 3600) s and speed in (0, 1]")
        points.append(Waypoint(targets, dwell, Sync(cells.get("sync") or Sync.PHASE.value), speed))
    return points


@dataclass
class SegmentResult:
    """One segment of a path as it ran."""

    index: int
    """1-based: the waypoint it goes to."""
    segment: Segment
    start_at: float
    """The instant its start message named (synchronized time) [second]."""
    waited_s: float = 0.0
    """How much later than the previous segment's end (and dwell) it started: the runner could not stage it in time."""
    t0: list[float] = field(default_factory=list)
    T: list[float] = field(default_factory=list)
    joints: Joints | None = None
    """What the joints did in this segment, from their samples (None: not measured yet)."""
    line_threshold: float = LINE_WARN
    reached: list[float] = field(default_factory=list)
    """Each axis's measured position at the segment's end (interpolated from ``dynamics``)."""

    @property
    def deviation(self) -> float:
        """Measured straight-line deviation (fraction of the stroke; NaN: not judged)."""
        return self.joints.line.deviation if self.joints is not None else math.nan

    @property
    def spread(self) -> float:
        """Arrival spread of the moving axes: max − min of t0 + T as the nodes report [second]."""
        arrivals = [a + b for a, b, m in zip(self.t0, self.T, self._moving, strict=True) if m]
        return max(arrivals) - min(arrivals) if arrivals else 0.0

    @property
    def measured_spread(self) -> float:
        """Arrival spread of the joints, from their samples [second] (NaN: unknown)."""
        return self.joints.spread if self.joints is not None else math.nan

    @property
    def line_verdict(self) -> str:
        """``ok``, ``above`` or ``unjudged`` (see :meth:`._joints.Joints.verdict`); time sync is not judged."""
        if self.segment.plan.used is not Sync.PHASE:
            return "ok"
        return self.joints.verdict(self.line_threshold) if self.joints is not None else "unjudged"

    @property
    def _moving(self) -> list[bool]:
        return [m.target != m.p0 and not ap.held for m, ap in zip(self.segment.motions, self.segment.plan.axes,
                                                                    strict=True)]

    def line(self, labels: Sequence[str] = ()) -> str:
        """The report of the segment: one line, and a line per note on lost samples (``labels``: the axes')."""
        err = max((abs(r - m.target) for r, m in zip(self.reached, self.segment.motions, strict=True)), default=0.0)
        waited = f", waited {self.waited_s * 1e3:.0f} ms" if self.waited_s > 0.0 else ""
        notes: list[str] = []
        spread_m = line_m = "measured: not recorded"
        if self.joints is not None:
            names = list(labels) or [f"axis {i}" for i in range(len(self.segment.motions))]
            spread_m, line_m, notes = self.joints.describe(names, self.line_threshold,
                                                           self.segment.plan.used is Sync.PHASE)
        text = (f"segment {self.index}: {self.segment.plan.summary}; arrival spread {self.spread * 1e3:.3f} ms "
                f"planned, {spread_m}; line deviation {line_m}; worst error at its end {err:.2e}{waited}")
        return "\n".join([text, *(f"  samples: {n}" for n in notes)])


class PathRunner:
    """Runs a path on a started :class:`Coordinator` whose axes share a start subject."""

    def __init__(self, coord: Coordinator, waypoints: Sequence[Waypoint],
                 on_progress: Callable[[int, float, float], None] | None = None) -> None:
        if not waypoints:
            raise ValueError("no waypoints")
        if any(len(w.targets) != len(coord.axes) for w in waypoints):
            raise ValueError(f"every waypoint needs {len(coord.axes)} targets")
        self.coord = coord
        self.waypoints = list(waypoints)
        self.on_progress = on_progress
        self.results: list[SegmentResult] = []
        self._cadence: Cadence | None = None  # The setpoints' sends, once the first burst is out.

    async def run(self) -> list[SegmentResult]:
        """Run every segment; returns the results, or raises :class:`CoordError` after stopping every axis."""
        coord = self.coord
        await coord.start()
        if coord.start_subject is None:
            raise CoordError(f"a path needs the axes' shared motion_start subject: {coord.start_path}")
        info = await coord.axes_info()
        state = await coord.start_states()
        for k, wp in enumerate(self.waypoints):  # Every segment planned (and checked) before anything moves.
            try:
                seg = checked_segment(state, wp.targets, info, wp.sync, speed=wp.speed)
            except CoordError as ex:
                raise CoordError(f"waypoint {k + 1}: {ex}") from None
            self.results.append(SegmentResult(k + 1, seg, math.nan))
            state = [(m.target, 0.0, 0.0) for m in seg.motions]
        dyn = coord.dynamics
        recorders = dyn.record()  # All of the path's dynamics, split into segments afterwards.
        try:
            await self._feed(info.repeat_s, info.deadman_s)
            last = self.results[-1]
            await dyn.await_samples(last.start_at + last.segment.duration + SETTLE_S)
        finally:
            dyn.take()
        self._measure(recorders, info.periods)
        return self.results

    async def _feed(self, repeat_s: float, deadman_s: float) -> None:
        coord, results = self.coord, self.results
        msgs = [commands(r.segment) for r in results]
        started = time.perf_counter()
        total = sum(r.segment.duration + w.dwell_s + SEGMENT_GAP_S for r, w in zip(results, self.waypoints,
                                                                                   strict=True))
        await coord._end_hold()
        await coord._burst(msgs[0])
        cadence = self._cadence = Cadence(repeat_s, deadman_s, time.monotonic())
        await asyncio.sleep(START_AFTER_STAGE_S)
        results[0].start_at = coord.sync_now() + coord.start_lead_s
        await coord.publish_start(results[0].start_at)
        current, staged_at = 0, math.nan
        checks = [asyncio.create_task(self._check(0))]
        try:
            while True:
                now = coord.sync_now()
                cur = results[current]
                end = cur.start_at + cur.segment.duration
                if current + 1 < len(results):
                    nxt = results[current + 1]
                    due = end + self.waypoints[current].dwell_s + SEGMENT_GAP_S
                    if now >= cur.start_at and math.isnan(staged_at) and due - now <= STAGE_AHEAD_S:
                        await coord._burst(msgs[current + 1])
                        staged_at = coord.sync_now()
                    staged = not math.isnan(staged_at)
                    if staged and math.isnan(nxt.start_at) and now >= staged_at + START_AFTER_STAGE_S:
                        nxt.start_at = max(due, now + coord.start_lead_s)
                        nxt.waited_s = nxt.start_at - due
                        await coord.publish_start(nxt.start_at)
                    if not math.isnan(nxt.start_at) and now >= nxt.start_at:
                        current, staged_at = current + 1, math.nan
                        checks.append(asyncio.create_task(self._check(current)))
                        continue
                elif now >= end + SETTLE_S:
                    break
                await coord._burst(msgs[current])
                if not math.isnan(staged_at):
                    await coord._burst(msgs[current + 1])
                cadence.sent(time.monotonic())
                if self.on_progress is not None:
                    elapsed = time.perf_counter() - started
                    self.on_progress(current + 1, elapsed, max(0.0, total - elapsed))
                for task in checks:
                    if task.done():
                        task.result()  # Raises the fault it found.
                await asyncio.sleep(repeat_s)
            for task in checks:
                await task
        except CoordError:
            await cancel_and_wait(checks)
            await self._wait_at_rest()
            raise
        finally:
            await cancel_and_wait(checks)

    async def _check(self, k: int) -> None:
        """Mid-segment: every moving axis runs this segment's plan (its t0 and T recorded), else a fault."""
        coord, res = self.coord, self.results[k]
        await asyncio.sleep(max(0.0, res.start_at - coord.sync_now() + 0.5 * res.segment.duration))
        reports = await gather_all(coord.motion(i) for i in range(len(coord.axes)))
        for ax, rep, pred, moving in zip(coord.axes, reports, res.segment.predicted, res._moving, strict=True):
            pl = rep.get("plan", {})
            t0, T = float(pl.get("t0", math.nan)), float(pl.get("T", math.nan))
            res.t0.append(t0)
            res.T.append(T)
            ok = str(pl.get("kind", "move")) == "move" and abs(T - pred) <= PLAN_MATCH_TOL * (1.0 + pred)
            if moving and not ok:
                i = coord.axes.index(ax)
                why = await coord.read_register(i, "sys.last_rejection")
                state = json.loads(await coord.read_register(i, "sys.status")).get("servo", {})
                cause = held_up(self._cadence.longest, self._cadence.deadman_s) if self._cadence else ""
                raise CoordError(f"segment {res.index}: {ax.label} is not running its plan (its plan is a "
                                 f"{pl.get('kind')} of {T:.6f} s, the segment's {pred:.6f} s; it is "
                                 f"{state.get('state')}, error {state.get('error')}: {state.get('reason')}; last "
                                 f"rejection: {why or 'none'}){'; ' + cause if cause else ''}; every axis stopped")

    async def _wait_at_rest(self, timeout: float = 10.0) -> None:
        """After a fault: no more setpoints; until every axis reports it is not engaged and at rest."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reports = await asyncio.gather(*(self.coord.motion(i) for i in range(len(self.coord.axes))),
                                           return_exceptions=True)
            if all(isinstance(r, dict) and not r["engaged"] and abs(r["meas"][1]) < 1e-3 for r in reports):
                return
            await asyncio.sleep(0.1)

    def _measure(self, recorders: Sequence[Recorder], periods: Sequence[float]) -> None:
        """Each segment from its start to the next's (or :data:`SETTLE_S` after the last's planned end)."""
        samples = [r.samples(p) for r, p in zip(recorders, periods, strict=True)]
        for k, res in enumerate(self.results):
            seg = res.segment
            end = res.start_at + seg.duration
            t_to = self.results[k + 1].start_at if k + 1 < len(self.results) else end + SETTLE_S
            res.joints = measure(samples, [m.p0 for m in seg.motions], [m.target for m in seg.motions], res._moving,
                                 res.start_at, t_to)
            res.line_threshold = self.coord.line_threshold
            res.reached = [float(np.interp(end, s.t, s.p)) if len(s.t) else math.nan for s in samples]


def run_path(coord: Coordinator, waypoints: Sequence[Waypoint],
             on_progress: Callable[[int, float, float], None] | None = None) -> Any:
    """The coroutine running ``waypoints`` on ``coord`` (see :class:`PathRunner`)."""
    return PathRunner(coord, waypoints, on_progress).run()
