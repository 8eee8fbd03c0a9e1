"""Execute a checked plan on the five servo nodes through ``servo_node.coord`` and verify it while it runs.

Every segment is one coordinated move of all five joints by one coordinator (one pycyphal node): the joints
whose target changes start together, arrive together and move along a straight line in joint space (phase
sync); the joints that keep their target get it again as held axes (their own limits, outside the
synchronisation and the spread: their distance is only a settling residual). One publisher per joint: no two
coordinators ever send one joint different setpoints, and no node's deadman expires between or during moves (a
segment's setpoints are repeated until the next segment's burst).

Verification (all from the nodes' *measured* ``dynamics``, recorded by the scope):

* after every arm segment the joints settle and FK of the measured φ1..φ4 must put the grip point within
  ``fk_tolerance`` of the segment's target (the place segments are the placement errors reported);
* after every gripper segment the measured opening must be within ``grip_tolerance`` of its target;
* each place updates the stacks, which refuse an illegal move (:class:`~.tower.IllegalMoveError`); at the end
  all boxes must be on C.

Any violation (or a node refusing its setpoint, or a move that does not settle in time) stops everything: the
setpoints stop, every node makes its own stop to rest (deadman), and :class:`VerificationError` is raised after the
nodes report they are at rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cyphal_common.tasks import cancel_and_wait, gather_all
from servo_node.coord import Sync
from servo_node.coord._axes import Axis, CoordError
from servo_node.coord._result import MoveResult
from servo_node.coord._session import Coordinator
from servo_node.scope import ScopeRecorder, Trace

from .cell import Pose, Segment, TaskPlan
from .joints import NAMES, Bus
from .kinematics import ArmGeometry, forward
from .tower import PLATFORMS, IllegalMoveError, Stacks

_logger = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 3.0
"""Every joint must be at rest this long after a segment's planned end, in the joints' own time (their samples'
stamps), else it is a violation."""
HOME_WAIT_S = 10.0
"""How long the run waits for every joint to report the start pose before its first move [second]: the nodes are up
(their dynamics arrive) before the drives' first feedback has reached them all on a loaded host (a CI run found the
shoulder and elbow still at their initial 0, 980.6 mm from the start pose)."""
SEND_TIMEOUT_S = 30.0
"""Reading the joints' limits and states and sending a move's setpoints must take less than this."""
REST_VELOCITY = 1e-3
"""|v| [unit/s] below which a joint counts as at rest for the check."""
REST_ACCELERATION = 0.02
"""|a| [unit/s²] below which a joint counts as at rest: a joint still settling passes through zero velocity (a CI run
judged the shoulder at rest 3.6 mrad off its target, accelerating at 0.1 rad/s²)."""
RESUMES = 2
"""How many segments a run may resume after their moving joints stopped on their deadman mid-move: the setpoints'
repetitions, or their reception, were held up past it on a busy host. The nodes stop to rest on their own and an
expired node does not go on alone (it waits for a new start); the segment is then planned again from where they
stopped, and the summary says so. Any other stop, or more of them, ends the run."""
REST_SAMPLES = 3
REST_WINDOW_S = 0.02
"""A joint is at rest when its samples over the last REST_WINDOW_S, at least REST_SAMPLES of them, all are."""
REST_CHECK_S = 0.02
"""How often the recorded samples are looked at while waiting for rest [second]."""
RECORDER_LAG_S = 30.0
"""How much longer than SETTLE_TIMEOUT_S (on this host's clock) the joints' samples are waited for: a recorder on a
busy host falls seconds behind the joints (a CI run with two CPU hogs: 4.6 s by the third box move)."""


class VerificationError(RuntimeError):
    """The run was stopped: a check failed (the message says which, where and by how much)."""


@dataclass
class RunReport:
    """What the run measured."""

    segments: int = 0
    placements: list[float] = field(default_factory=list)
    """FK error of every place [m]."""
    worst_fk: float = 0.0
    """Largest FK error over all arm segments [m]."""
    spreads: list[float] = field(default_factory=list)
    """Arrival spread of every move of two or more joints [second]."""
    deviations: list[float] = field(default_factory=list)
    """Reference straight-line deviation of those moves (fraction of the stroke)."""
    fallbacks: int = 0
    strays: list[float] = field(default_factory=list)
    """How far the grip point leaves its Cartesian straight segment along each arm segment's joint-space line [m]:
    the straight lines are in joint space, not in Cartesian space (reported, not hidden)."""
    run_s: float = math.nan
    stacks: list[list[int]] = field(default_factory=list)
    torque_max: list[float] = field(default_factory=list)
    """Largest measured |torque| of base, shoulder, elbow over the run [N·m] (the nodes' ``dynamics``)."""
    holding: list[tuple[float, ...]] = field(default_factory=list)
    """Measured torque of base, shoulder, elbow at rest at every place [N·m]: what holds the arm still there."""
    tracking: dict[str, float] = field(default_factory=dict)
    """Largest tracking error against the plan per joint over its moves (the nodes' ``sys.motion`` track_max)."""
    resumed: list[str] = field(default_factory=list)
    """The segments resumed after a deadman stop mid-move (:data:`RESUMES`)."""

    def summary(self) -> str:
        sp = sorted(self.spreads)
        spread = (f"arrival spread over {len(sp)} coordinated moves: median {statistics.median(sp) * 1e3:.3f} ms, "
                  f"max {sp[-1] * 1e3:.3f} ms" if sp else "no coordinated move of two or more joints")
        return "\n".join([
            f"{self.segments} segments in {self.run_s:.1f} s; final stacks "
            + ", ".join(f"{p}: {s}" for p, s in zip(PLATFORMS, self.stacks, strict=True)),
            f"placements verified by FK from measured joints: {len(self.placements)}, worst "
            f"{max(self.placements, default=math.nan) * 1e3:.3f} mm (worst over every arm segment "
            f"{self.worst_fk * 1e3:.3f} mm)",
            spread + (f"; phase sync fell back to time sync {self.fallbacks} times" if self.fallbacks else ""),
            (f"grip point off its Cartesian straight segment along the joint-space lines over {len(self.strays)} arm "
             f"segments: median {statistics.median(self.strays) * 1e3:.1f} mm, max {max(self.strays) * 1e3:.1f} mm"
             if self.strays else "no arm segment"),
            *self._physics(),
            *([f"resumed after the joints' deadman stopped them during a move (this host held setpoints up): "
               f"{len(self.resumed)} of the segments ({'; '.join(self.resumed)})"] if self.resumed else []),
        ])

    def _physics(self) -> list[str]:
        """The torque and tracking lines (what the plant asked of the joints, and how well they followed)."""
        arm = NAMES[:3]
        lines = [f"worst grip-point error at rest over every arm segment: {self.worst_fk * 1e3:.3f} mm"]
        if self.torque_max:
            lines.append("torque max |τ| over the run: " + ", ".join(
                f"{n} {t:.3f} N·m" for n, t in zip(arm, self.torque_max, strict=True)))
        if self.holding:
            cols = list(zip(*self.holding, strict=True))
            lines.append(f"torque holding still at the {len(self.holding)} places: " + ", ".join(
                f"{n} {min(c):.3f}..{max(c):.3f} N·m" for n, c in zip(arm, cols, strict=True)))
        if self.tracking:
            lines.append("tracking error against the plan, max per joint: " + ", ".join(
                f"{n} {self.tracking[n] * 1e3:.3f} m{'m' if n == 'gripper' else 'rad'}"
                for n in NAMES if n in self.tracking))
        return lines


def cartesian_stray(arm: ArmGeometry, start: Pose, target: Pose, samples: int = 201) -> float:
    """Largest distance of the grip point from the Cartesian segment between its start and end, along the straight
    joint-space line from ``start`` to ``target`` (arm joints) [m]."""
    a = np.array(forward(arm, (start[0], start[1], start[2], start[3])))
    b = np.array(forward(arm, (target[0], target[1], target[2], target[3])))
    ab = b - a
    worst = 0.0
    for s in np.linspace(0.0, 1.0, samples):
        q = [start[k] + s * (target[k] - start[k]) for k in range(4)]
        x = np.array(forward(arm, (q[0], q[1], q[2], q[3])))
        u = 0.0 if not ab.any() else float(np.clip(np.dot(x - a, ab) / np.dot(ab, ab), 0.0, 1.0))
        worst = max(worst, float(np.linalg.norm(x - (a + u * ab))))
    return worst


class ArmRun:
    """The five joints on the bus: one coordinator for all of them, the scope recorder, the checks."""

    def __init__(self, bus: Bus, arm: ArmGeometry, fk_tolerance: float = 1e-3, grip_tolerance: float = 5e-4,
                 resumes: int = RESUMES):
        self.bus = bus
        self.resumes = resumes
        self.arm = arm
        self.fk_tolerance = fk_tolerance
        self.grip_tolerance = grip_tolerance
        self.axes = [Axis(bus.node(k), bus.setpoint(k), bus.dynamics(k), name) for k, name in enumerate(NAMES)]
        self.recorder = ScopeRecorder([(bus.dynamics(k), name) for k, name in enumerate(NAMES)],
                                      bus.environment(bus.helper(0)), poll_hz=0.0)
        self.coordinator = Coordinator(self.axes, bus.environment(bus.helper(1)), start_subject=bus.start)
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def trace(self) -> Trace:
        return self.recorder.trace

    async def __aenter__(self) -> ArmRun:
        await self.recorder.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._release()
        self.coordinator.close()
        await self.recorder.aclose()

    async def prepare(self) -> None:
        """Start the coordinator (it joins the bus and loads the OTG) before the first move."""
        await self.coordinator.start()

    def measured(self) -> tuple[list[float], list[float], list[float], float]:
        """Latest measured positions, velocities and accelerations of the five joints, and the oldest sample's time."""
        p, v, a, t = [], [], [], []
        for name in NAMES:
            m = self.trace.axes[name].measured if name in self.trace.axes else None
            if m is None or not m.t:
                raise VerificationError(f"no dynamics from the {name}")
            p.append(m.columns["position"][-1])
            v.append(m.columns["velocity"][-1])
            a.append(m.columns["acceleration"][-1])
            t.append(m.t[-1])
        return p, v, a, min(t)

    async def wait_for_nodes(self, timeout_s: float) -> None:
        """Until every joint's dynamics arrive (the nodes are up)."""
        deadline = time.monotonic() + timeout_s
        while any(n not in self.trace.axes or not self.trace.axes[n].measured.t for n in NAMES):
            if time.monotonic() > deadline:
                silent = [n for n in NAMES if n not in self.trace.axes]
                raise VerificationError(f"no dynamics from {', '.join(silent)} within {timeout_s:g} s")
            await asyncio.sleep(0.1)

    async def wait_ready(self, timeout_s: float) -> None:
        """Until no node reports the ``error`` state (e.g. a drive's feedback timeout while the host was busy
        starting the nodes): such a node would refuse the first move."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = []
            for k in range(len(NAMES)):
                try:
                    states.append(json.loads(await self.coordinator.read_register(k, "sys.status"))["servo"]["state"])
                except (CoordError, ValueError, KeyError):
                    states.append("unknown")
            if all(s not in ("error", "unknown") for s in states):
                return
            if time.monotonic() > deadline:
                raise VerificationError(f"nodes not ready within {timeout_s:g} s: "
                                        + ", ".join(f"{n} {s}" for n, s in zip(NAMES, states, strict=True)))
            await asyncio.sleep(0.2)

    async def _release(self) -> None:
        """Stop repeating setpoints (the holds of the previous segment).

        Cancelled again until done: a cancellation that arrives while a publication's ``asyncio.wait_for``
        completes is lost on Python 3.11 (a known ``wait_for`` defect), and the coordinator's hold feeder would
        then repeat its setpoints forever while the move waits for it.
        """
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    async def _start(self, targets: Sequence[float], held: Sequence[int]) -> asyncio.Future[Any]:
        """Start a coordinated move of all joints (``held`` keep their target) that holds its targets until
        released; the future gets its MoveResult."""
        loop = asyncio.get_running_loop()
        sent: asyncio.Future[Any] = loop.create_future()
        done: asyncio.Future[Any] = loop.create_future()
        coord = self.coordinator

        def settle(f: asyncio.Future[Any]) -> Any:
            def set_once(value: Any) -> None:
                if not f.done():
                    f.set_result(value)

            return set_once

        async def run() -> None:
            try:
                await coord.move(list(targets), Sync.PHASE, hold_s=None, on_sent=settle(sent),
                                 on_result=settle(done), held=held)
            except Exception as ex:  # Any failure of a move ends the run through the futures.
                why = str(ex) if isinstance(ex, CoordError) else f"{type(ex).__name__}: {ex}"
                for f in (sent, done):
                    if not f.done():
                        f.set_exception(VerificationError(why))

        self._tasks.append(loop.create_task(run()))
        await asyncio.wait_for(sent, SEND_TIMEOUT_S)
        return done

    async def segment(self, seg: Segment, prev: Pose, report: RunReport) -> None:
        """One segment: move the joints whose target changes together, hold the others, verify."""
        moving, held = _split(seg.target, prev)
        _logger.info("%s: moving %s, holding %s", seg.describe(), [NAMES[k] for k in moving], [NAMES[k] for k in held])
        # The previous segment's setpoints are repeated until this move's burst takes over (the coordinator ends
        # their repetition there): reading the joints and planning take a while on a busy host, longer than a
        # deadman, and a joint that expired between two segments stops (a CI run: the wrist, 1.3 s before it).
        previous, self._tasks = self._tasks, []
        try:
            while True:
                done = await self._start(seg.target, held)
                await cancel_and_wait(previous)
                _logger.info("%s: sent", seg.describe())
                result: MoveResult = await asyncio.wait_for(done, 30.0)
                if result.rejected:
                    raise VerificationError(f"{seg.describe()}: refused by {'; '.join(result.rejected)}")
                if not await self._resumable(seg, moving, report):
                    break
        finally:
            await cancel_and_wait(previous)
        if any(k < 4 for k in moving):
            report.strays.append(cartesian_stray(self.arm, prev, seg.target))
        if len(moving) >= 2:
            report.spreads.append(result.spread)
            report.deviations.append(result.reference_deviation)
            report.fallbacks += bool(result.plan.fallback)
        await self._verify(seg, report, result.sent_at + result.plan.duration)
        await self._tracking(moving, report)

    async def _tracking(self, moving: Sequence[int], report: RunReport) -> None:
        """Each moving joint's largest tracking error against its plan of this move (``sys.motion`` track_max)."""
        for k in moving:
            try:
                err = float((await self.coordinator.motion(k))["track_max"])
            except (CoordError, ValueError, KeyError, TypeError) as ex:
                raise VerificationError(f"{NAMES[k]}: no tracking error ({ex})") from ex
            report.tracking[NAMES[k]] = max(report.tracking.get(NAMES[k], 0.0), err)

    async def _resumable(self, seg: Segment, moving: Sequence[int], report: RunReport) -> bool:
        """Whether a moving joint's node let its command expire (its deadman stopped it, wherever it then was: a
        node held up past its plan's end arrives late) with no node in error, and a resume is left; if so, once
        the joints are at rest, the segment is to be moved again (the hold released, the resume counted)."""
        if len(report.resumed) >= self.resumes:
            return False
        try:
            texts = await gather_all(self.coordinator.read_register(k, "sys.status") for k in range(len(NAMES)))
            states = [json.loads(t)["servo"]["state"] for t in texts]
        except (CoordError, ValueError, KeyError, TypeError):
            return False
        expired = [NAMES[k] for k in moving if states[k] == "expired"]
        if not expired or "error" in states:
            return False
        _logger.warning("%s: %s stopped on their deadman during the move (this host held the setpoints or their "
                        "reception up past it); moving again from where they stop", seg.describe(), ", ".join(expired))
        await self._release()
        await self._await_rest(seg, time.time())
        report.resumed.append(seg.describe())
        return True

    async def _await_rest(self, seg: Segment, t_end: float) -> None:
        """Wait until every joint is at rest after ``t_end`` (system clock, the samples' own): each joint's samples
        over its last :data:`REST_WINDOW_S` (at least :data:`REST_SAMPLES`) all with |v| below :data:`REST_VELOCITY`
        and |a| below :data:`REST_ACCELERATION`.

        Judged in the joints' time: a joint not at rest so by ``t_end`` + :data:`SETTLE_TIMEOUT_S` is a violation.
        Samples that have not come that far are waited for (a recorder on a busy host falls behind the joints), up
        to :data:`RECORDER_LAG_S` longer on this host's clock, then that is the violation."""
        judged_until = t_end + SETTLE_TIMEOUT_S
        guard = time.monotonic() + SETTLE_TIMEOUT_S + RECORDER_LAG_S
        while True:
            rests = [self._rest(name, t_end) for name in NAMES]
            settled = [start + REST_WINDOW_S <= min(last, judged_until) and n >= REST_SAMPLES
                       for start, last, n in rests]
            if all(settled):
                return
            latest = min(last for _, last, _ in rests)
            if latest > judged_until:
                _, v, _, _ = self.measured()
                late = [f"{n} {x:.2g}" for n, x, ok in zip(NAMES, v, settled, strict=True) if not ok]
                raise VerificationError(f"{seg.describe()}: not at rest {SETTLE_TIMEOUT_S:g} s after the move (in "
                                        f"the joints' samples; still moving: {', '.join(late)})")
            if time.monotonic() > guard:
                raise VerificationError(f"{seg.describe()}: the joints' samples reached only {latest - t_end:.3f} s "
                                        f"after the move's end in {SETTLE_TIMEOUT_S + RECORDER_LAG_S:g} s: this "
                                        f"host is too busy for the recorder")
            await asyncio.sleep(REST_CHECK_S)

    def _rest(self, name: str, t_end: float) -> tuple[float, float, int]:
        """(stamp of the first sample of the joint's last run of samples at rest, its latest stamp, the run's
        length), over its samples stamped at or after ``t_end``; (inf, latest, 0) if its latest is not at rest."""
        m = self.trace.axes[name].measured
        t, v, a = m.t, m.columns["velocity"], m.columns["acceleration"]
        k = len(t)
        while k > 0 and t[k - 1] >= t_end and abs(v[k - 1]) < REST_VELOCITY and abs(a[k - 1]) < REST_ACCELERATION:
            k -= 1
        n = len(t) - k
        return (t[k] if n else math.inf), (t[-1] if t else -math.inf), n

    async def _verify(self, seg: Segment, report: RunReport, t_end: float) -> None:
        """Wait until every joint is at rest after the planned arrival ``t_end`` (:meth:`_await_rest`), then check
        FK (arm) and the opening (gripper) against the segment's target, once."""
        await self._await_rest(seg, t_end)
        p, _, _, _ = self.measured()
        err = math.dist(forward(self.arm, (p[0], p[1], p[2], p[3])), seg.grip_point)
        grip_err = abs(p[4] - seg.target[4])
        if err > self.fk_tolerance or grip_err > self.grip_tolerance:
            raise VerificationError(
                f"{seg.describe()}: at rest with the grip point {err * 1e3:.3f} mm from its target (tolerance "
                f"{self.fk_tolerance * 1e3:g} mm) and the opening {grip_err * 1e3:.3f} mm off (tolerance "
                f"{self.grip_tolerance * 1e3:g} mm)")
        report.worst_fk = max(report.worst_fk, err)
        if seg.kind == "place":
            report.placements.append(err)
            report.holding.append(tuple(self.trace.axes[n].measured.columns["force"][-1] for n in NAMES[:3]))

    async def _log_states(self) -> None:
        """Every node's whole ``sys.status`` (state, reason, the latest refusal) and plan (``sys.motion``) at a failure,
        for the log."""
        for k, name in enumerate(NAMES):
            try:
                status = json.loads(await self.coordinator.read_register(k, "sys.status"))["servo"]
                motion = await self.coordinator.motion(k)
            except (CoordError, ValueError, KeyError) as ex:
                _logger.error("%s: no state (%s)", name, ex)
                continue
            _logger.error("%s: %s; ref %s, meas %s, plan %s", name, json.dumps(status), motion.get("ref"),
                          motion.get("meas"), motion.get("plan"))

    async def safe_stop(self, timeout_s: float = 5.0) -> bool:
        """Stop sending setpoints; every node stops on its own (deadman, then its stop to rest). True once all
        report ``engaged: false`` at rest."""
        await self._release()
        coord = self.coordinator
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                await coord.start()
                motions = await asyncio.gather(*(coord.motion(k) for k in range(5)))
            except (CoordError, ValueError, KeyError):
                motions = []
            if motions and all(not m.get("engaged", True) for m in motions):
                return True
            await asyncio.sleep(0.1)
        return False

    async def execute(self, plan: TaskPlan, on_segment: Any = None) -> RunReport:
        """Run the plan from its home pose; :raises VerificationError: on any failed check (after the safe stop)."""
        report = RunReport()
        stacks = Stacks(plan.boxes)
        home = forward(self.arm, plan.home[:4])
        deadline = time.monotonic() + HOME_WAIT_S
        while True:  # A node reports 0 until its drive's first feedback reaches it: judge the pose its drives report.
            p, _, _, _ = self.measured()
            home_err = math.dist(forward(self.arm, (p[0], p[1], p[2], p[3])), home)
            if home_err <= self.fk_tolerance:
                break
            if time.monotonic() > deadline:
                raise VerificationError(f"the arm is not at its start pose ({home_err * 1e3:.2f} mm away)")
            await asyncio.sleep(0.1)
        t0 = time.monotonic()
        prev = plan.home
        try:
            for seg in plan.segments:
                await self.segment(seg, prev, report)
                report.segments += 1
                if seg.kind == "place":
                    got = stacks.move(seg.src, seg.dst)
                    if got != seg.box or not stacks.legal():
                        raise IllegalMoveError(f"{seg.describe()}: the stacks are {stacks.pegs}")
                if on_segment is not None:
                    on_segment(seg, report)
                prev = seg.target
            if not stacks.solved():
                raise VerificationError(f"the run ended with the stacks {stacks.pegs}, not all on C")
        except (VerificationError, IllegalMoveError, TimeoutError) as ex:
            await self._log_states()
            stopped = await self.safe_stop()
            at_rest = "every joint at rest" if stopped else "NOT confirmed at rest"
            raise VerificationError(f"{ex}; stopped ({at_rest})") from ex
        finally:
            report.run_s = time.monotonic() - t0
            report.stacks = [list(s) for s in stacks.pegs]
            report.torque_max = [float(np.max(np.abs(self.trace.axes[n].measured.columns["force"])))
                                 for n in NAMES[:3]]
        await self._release()
        return report


def _split(target: Pose, prev: Pose) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(joints whose target changes, joints that keep it), as the nodes receive them (float32)."""
    f32 = np.float32
    moving = tuple(k for k in range(5) if f32(target[k]) != f32(prev[k]))
    return moving, tuple(k for k in range(5) if k not in moving)
