"""The coordinator's session on the bus: read every axis's state and limits, send one burst of setpoints, hold, measure.

No option parsing here (:mod:`._cmd` does that). The generated DSDL types are imported where used, so importing
this module needs no compiled DSDL.

A move:

1. the latest ``dynamics`` (``zubax.physics.dynamics.DoF3rdTs.1.0``) of every axis is its start state (or, for
   a node engaged and holding still, its ``sys.reference``: it plans from that, not from the measured position),
   its ``servo.profile.{velocity,acceleration,jerk}`` registers (``uavcan.register.Access``) its own limits, and
   ``servo.deadman_timeout`` sets how often the setpoints are repeated;
2. :func:`~._sync.synchronize` plans every axis with the nodes' own OTG (an axis at rest within its node's
   ``servo.arrival_tolerance`` of its target, or named in ``held``, is held: its own limits, no synchronisation);
   targets and limits are rounded to the float32 the wire carries and every duration is predicted again from
   exactly what the node receives;
3. one ``zubax.telega.ServoCommand.1.0`` per axis, all in one burst (published back to back, with the
   ``dynamics`` subscriptions closed so no reception delays it); the same messages are repeated until the
   hold ends — a node re-plans only a *different* setpoint, so the repetitions only feed its deadman and never
   change the synchronised plan;
4. after the planned end, every node's ``sys.motion`` gives its plan start ``t0`` (system clock) and planned
   duration ``T``: the arrival spread is the spread of t0 + T across the moving axes. A node starts the plan of
   a setpoint at its reception (its transport's timestamp, see ``servo_node.control._stages.plan_start``), not
   at its next control tick, so the axes start as far apart as their setpoints arrived: the burst's length
   plus the receiving threads' wake-up, not a loop period plus each node's event-loop latency. With a start
   subject (``start_subject``; every node's ``uavcan.sub.motion_start.id``) the burst only stages the setpoints
   and one ``uavcan.time.SynchronizedTimestamp.1.0`` on that subject names the instant, ``start_lead_s`` ahead in
   Cyphal synchronized time, at which every plan starts (:mod:`servo_node.staging`): the spread of t0 is then
   the nodes' clock agreement, not the burst's length nor any delivery jitter within the lead. An axis whose
   plan a stop replaced (deadman, error) did not arrive by its plan: it is reported as stopped and left out of
   the spread. The recorded ``dynamics`` give the straight-line deviation: the largest spread over time of the
   axes' normalised progress (p − p0)/(target − p0), positions interpolated onto a common 1 ms grid by their
   timestamps, and each axis's measured lag behind its plan started at t0 (so the measured arrival spread
   checks that t0 is when the joint really started).

The session's parts live beside it: the axes (:mod:`._axes`), the planned move and its commands
(:mod:`._segment`), the result and its measurement (:mod:`._result`, :mod:`._measure`), the synchronisation
math (:mod:`._sync`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from cyphal_common.register_reads import READ_TIMEOUTS_S, read_register
from cyphal_common.tasks import cancel_and_wait, gather_all
from servo_node.setpoint import ProfileLimits

from ._axes import Axis, CoordError
from ._result import AxisReport, MoveResult, Recorder, line_measures
from ._segment import AxesInfo, checked_segment, commands
from ._sync import AxisMotion, Sync, SyncPlan, optimal_duration

NODE_NAME = "io.github.cyphal_servo.coord"

REST_VELOCITY = 1e-3
"""A measured |v| below this [unit/s] (and |a| below 100× this) counts as at rest: the node plans such a start
from rest (its reference is at rest), and phase sync needs rest."""

START_AUTO = "auto"
"""The coordinator's default start: one start message on the subject every axis shares, else reception."""

MAX_SUBJECT_ID = 8191
"""The largest subject-ID; a port register above it is unset (65535)."""

START_LEAD_S = 0.05
"""How far ahead of its publication a start message names the start [second]: longer than the start frame's
delivery to every node's control loop (an event-loop hop), so every plan starts at that very instant."""


_logger = logging.getLogger(__name__)


class Coordinator:
    """A pycyphal node that moves several servo nodes together.

    :param axes: the servos, in the order of the targets.
    :param environment: ``UAVCAN__*`` registers (transport, node-ID; the node-ID must be set: register access
        needs it); default ``os.environ``.
    :param start_subject: the nodes' shared ``motion_start`` subject: every move starts on one start message
        ``start_lead_s`` ahead; :data:`START_AUTO` (default): the subject every axis has configured in its
        ``uavcan.sub.motion_start.id``, if they all share one; None: each node starts at its setpoint's reception.
        After :meth:`start`, :attr:`start_subject` is the subject used (or None) and :attr:`start_path` says why.
    :param node: a pycyphal node to move the servos through (a console's, on the bus already); :meth:`close` then
        closes only this coordinator's ports. Default: a node of its own from ``environment``.
    """

    def __init__(
        self,
        axes: Sequence[Axis],
        environment: Mapping[str, str] | None = None,
        start_subject: int | str | None = START_AUTO,
        start_lead_s: float = START_LEAD_S,
        node: Any = None,
    ) -> None:
        if not axes:
            raise ValueError("no axes")
        if not 0.0 < start_lead_s <= 0.5:
            raise ValueError(f"start lead {start_lead_s} s: must be in (0, 0.5]")
        if isinstance(start_subject, str) and start_subject != START_AUTO:
            raise ValueError(f"start subject {start_subject!r}: a subject-ID, {START_AUTO!r} or None")
        self.axes = list(axes)
        self._start_request = start_subject
        self.start_subject: int | None = None
        self.start_path = ""
        self.start_lead_s = start_lead_s
        self._start_pub: Any = None
        self._first_sends = {"burst", "start"}  # Not sent yet in this session: the first goes twice (see _burst).
        self._start_checked = False
        self._timesync: Any = None
        self._env = dict(os.environ if environment is None else environment)
        self._node: Any = None
        self._shared_node = node
        self._pubs: list[Any] = []
        self._clients: list[Any] = []
        self._subs: list[Any] = []
        self._latest: list[tuple[float, float, float, float] | None] = [None] * len(axes)
        self._recorders: list[Recorder] | None = None
        self._fresh = asyncio.Event()

    async def start(self) -> None:
        """Join the bus; idempotent."""
        if self._node is not None:
            return
        import pycyphal.application
        import uavcan.node
        import uavcan.register
        import zubax.physics.dynamics
        import zubax.telega

        from cyphal_common.transport import continue_after_restart, make_transport

        node = self._shared_node
        if node is None:
            registry = pycyphal.application.make_registry(None, self._env)
            transport = make_transport(registry)
            if transport is None:
                raise CoordError("no transport configured: set UAVCAN__UDP__IFACE or UAVCAN__CAN__IFACE")
            if transport.local_node_id is None:
                transport.close()
                raise CoordError("set UAVCAN__NODE__ID: reading the servos' registers needs a node-ID")
            node = pycyphal.application.make_node(
                pycyphal.application.NodeInfo(name=NODE_NAME, software_version=uavcan.node.Version_1_0(0, 1)),
                registry, transport=transport,
            )
        self._node = node
        pres = node.presentation
        for ax in self.axes:
            pub = pres.make_publisher(zubax.telega.ServoCommand_1_0, ax.setpoint)
            pub.priority = pycyphal.transport.Priority.HIGH
            continue_after_restart(pub)  # A move run again at once must not be taken for a repeat of the last.
            self._pubs.append(pub)
            client = pres.make_client_with_fixed_service_id(uavcan.register.Access_1_0, ax.node_id)
            continue_after_restart(client)  # …nor its register reads (a server drops a repeated request unanswered).
            self._clients.append(client)
        node.start()  # Idempotent (a shared node is started already).
        await self._choose_start()
        if self.start_subject is not None:
            import uavcan.time

            from cyphal_common.timesync import TimeSync

            self._start_pub = pres.make_publisher(uavcan.time.SynchronizedTimestamp_1_0, self.start_subject)
            self._start_pub.priority = pycyphal.transport.Priority.HIGH
            continue_after_restart(self._start_pub)
            self._timesync = TimeSync.of(node, "slave")  # The nodes' synchronized time, where a master is heard.
        # Load (or compile) the OTG kernels now, off the event loop, so the move's planning time is planning only.
        await asyncio.get_running_loop().run_in_executor(None, optimal_duration,
                                                         AxisMotion(0.0, 0.0, 0.0, 1.0, ProfileLimits(-1, 1, -1, 1, 1)))

    def _start_dynamics(self) -> None:
        import zubax.physics.dynamics

        if self._subs:
            return
        self._latest = [None] * len(self.axes)
        for i, ax in enumerate(self.axes):
            sub = self._node.presentation.make_subscriber(zubax.physics.dynamics.DoF3rdTs_1_0, ax.dynamics)
            sub.receive_in_background(self._on_dynamics(i))
            self._subs.append(sub)

    def _stop_dynamics(self) -> None:
        for sub in self._subs:
            sub.close()
        self._subs.clear()

    def close(self) -> None:
        """Leave the bus (a shared node: close this coordinator's ports only); idempotent."""
        if self._node is not None and self._shared_node is None:
            self._node.close()
        elif self._node is not None:
            self._stop_dynamics()
            for port in [*self._pubs, *self._clients, *filter(None, [self._start_pub])]:
                port.close()
            self._pubs, self._clients, self._start_pub = [], [], None
        self._node = None

    async def __aenter__(self) -> Coordinator:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()

    def _on_dynamics(self, i: int) -> Callable[[Any, Any], Any]:
        async def handler(msg: Any, _meta: Any) -> None:
            kin = msg.value.kinematics
            p, v, a = float(kin.base.position), float(kin.base.velocity), float(kin.acceleration)
            t = msg.timestamp.microsecond * 1e-6
            self._latest[i] = (t, p, v, a)
            if self._recorders is not None:
                self._recorders[i].add(t, p, v, a)
            self._fresh.set()

        return handler

    # ---------------------------------------------------------------- bus reads

    async def read_register(self, i: int, name: str) -> Any:
        """A register of axis ``i``: a string, or a list of floats; raises :class:`CoordError` if unanswered
        (:func:`~cyphal_common.register_reads.read_register`) or absent."""
        answer = await read_register(self._clients[i], name)
        if answer is None:
            raise CoordError(f"{self.axes[i].label}: no answer to a read of {name} within {sum(READ_TIMEOUTS_S):g} s "
                             f"({len(READ_TIMEOUTS_S)} requests): is the node up, and is this host keeping up with "
                             f"the bus?")
        if answer.value is None:
            raise CoordError(f"{self.axes[i].label}: no register {name}")
        return answer.value

    async def limits(self, i: int) -> ProfileLimits:
        """Axis ``i``'s default profile limits (its ``servo.profile.*`` registers)."""
        names = ("velocity", "acceleration", "jerk")
        v, a, j = await gather_all(self.read_register(i, f"servo.profile.{n}") for n in names)
        return ProfileLimits(v[0], v[1], a[0], a[1], j[0])

    async def motion(self, i: int) -> dict[str, Any]:
        """Axis ``i``'s ``sys.motion`` register, parsed."""
        return dict(json.loads(await self.read_register(i, "sys.motion")))

    async def states(self, timeout: float = 3.0) -> list[tuple[float, float, float, float]]:
        """The latest (t, p, v, a) of every axis, waiting up to ``timeout`` for the first ``dynamics`` of each."""
        self._start_dynamics()
        deadline = time.monotonic() + timeout
        while any(s is None for s in self._latest):
            self._fresh.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                silent = [ax.label + f" (subject {ax.dynamics})" for ax, s in zip(self.axes, self._latest, strict=True)
                          if s is None]
                raise CoordError(f"no dynamics from {', '.join(silent)}: is servo.dynamics_rate set, the "
                                 f"dynamics port configured, and its drive reporting (a node publishes measurements "
                                 f"only)?")
            try:
                await asyncio.wait_for(self._fresh.wait(), left)
            except TimeoutError:
                pass
        return [s for s in self._latest if s is not None]

    # ---------------------------------------------------------------- the move

    async def move(
        self,
        targets: Sequence[float],
        sync: Sync | str = Sync.PHASE,
        hold_s: float | None = None,
        on_sent: Callable[[SyncPlan], None] | None = None,
        on_result: Callable[[MoveResult], None] | None = None,
        record: bool = False,
        held: Collection[int] = (),
    ) -> MoveResult:
        """Move every axis to its target together; returns once measured and the hold has ended.

        :param hold_s: keep repeating the final setpoints this long after the planned end (None: until cancelled;
            the result is reported through ``on_result`` before the hold).
        :param record: receive ``dynamics`` during the move to measure the straight-line deviation and each axis's
            lag. The subscriptions are closed for the burst either way (at high ``dynamics`` rates the receptions
            would delay it on this event loop: 3 × 1 kHz dynamics spread a 3-setpoint burst over ~4 ms) and, when
            recording, opened again right after it; recording costs this process CPU time during the move.
        :param held: indices of axes that keep their target: sent it with their own limits, outside the
            synchronisation and the spread (see :func:`~._sync.synchronize`). An axis at rest within its node's
            ``servo.arrival_tolerance`` of its target is held anyway.
        """

        if len(targets) != len(self.axes):
            raise CoordError(f"{len(targets)} targets for {len(self.axes)} axes")
        await self.start()
        axes_info = await self.axes_info()
        states = await self.start_states()
        t_plan = time.perf_counter()
        seg = checked_segment(states, targets, axes_info, sync, held)
        plan, motions, wire, predicted = seg.plan, seg.motions, seg.wire, seg.predicted
        planning_s = time.perf_counter() - t_plan
        if plan.fallback:
            _logger.warning("phase sync infeasible, using time sync: %s", plan.fallback)
        msgs = commands(seg)
        repeat_s = axes_info.repeat_s
        # No receptions during the burst (they would run between its sends on this event loop); recording
        # resumes right after it, before any axis moves far (the axes are at their start before the first sample).
        self._stop_dynamics()
        if record:
            self._recorders = [Recorder() for _ in self.axes]
        sent_at = time.time()
        t_burst = time.perf_counter()
        await self._burst(msgs)
        burst_s = time.perf_counter() - t_burst
        lead = await self._start()
        if record:
            self._start_dynamics()
        if on_sent is not None:
            on_sent(plan)

        async def repeat() -> None:
            next_at = time.monotonic() + repeat_s
            while True:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                await self._burst(msgs)
                next_at += repeat_s

        end_mono = time.monotonic() + lead + max(predicted) + 0.15
        feeder = asyncio.create_task(repeat())
        try:
            await asyncio.sleep(max(0.0, end_mono - time.monotonic()))
            result = await self._measure(plan, motions, wire, predicted, sent_at, burst_s, planning_s, lead)
            if on_result is not None:
                on_result(result)
            if hold_s is None:
                await asyncio.Event().wait()  # Until cancelled (Ctrl-C).
            else:
                await asyncio.sleep(hold_s)
        finally:
            await cancel_and_wait([feeder])  # Re-cancels: pycyphal's send can swallow a cancellation.
        return result

    async def axes_info(self) -> AxesInfo:
        """What a move needs to know of every axis (read once per move or path), after checking the start subject."""
        n = len(self.axes)
        limits = await gather_all(self.limits(i) for i in range(n))
        deadman = await gather_all(self.read_register(i, "servo.deadman_timeout") for i in range(n))
        tolerance = await gather_all(self.read_register(i, "servo.arrival_tolerance") for i in range(n))
        await self._check_start_subject()
        return AxesInfo(tuple(limits), tuple(t[0] for t in tolerance), min(0.1, min(d[0] for d in deadman) / 4.0))

    async def start_states(self) -> list[tuple[float, float, float]]:
        """Every axis's (p, v, a) to plan from: measured, snapped to rest below :data:`REST_VELOCITY`, and an
        engaged axis at rest from its reference (what the node itself plans from, not the residual off it)."""
        self._start_dynamics()
        states = await self.states()
        references = await gather_all(self.read_register(i, "sys.reference") for i in range(len(self.axes)))
        out = []
        for (_, p, v, a), ref in zip(states, references, strict=True):
            if abs(v) < REST_VELOCITY and abs(a) < 100 * REST_VELOCITY:
                v = a = 0.0
            if len(ref) == 3 and math.isfinite(ref[0]) and ref[1] == 0.0 and ref[2] == 0.0:
                p, v, a = ref[0], 0.0, 0.0
            out.append((p, v, a))
        return out

    async def _burst(self, msgs: Sequence[Any]) -> None:
        """Publish one message per axis back to back. Sequential awaits are the shortest burst: measured on
        loopback UDP ~0.2 ms for three (asyncio.gather's task creation made it ~0.7 ms), ~1 ms on udpmc CAN.

        The session's first burst goes out twice, every axis once and then again, as does its first start
        (:meth:`publish_start`). A coordinator run again within the 2 s transfer-ID timeout under the same node-ID
        continues its transfer-IDs (``continue_after_restart``), but on CAN they are counted modulo 32: a receiver
        drops a first transfer whose transfer-ID equals the last it took from that node, one in 32. A dropped first
        setpoint left its axis without a staged setpoint when the start came, and it never moved. The copy is the
        next transfer-ID, which the receiver takes; a node ignores a repeated setpoint or start."""
        for _ in range(self._copies("burst")):
            for pub, msg in zip(self._pubs, msgs, strict=True):
                await pub.publish(msg)

    def _copies(self, kind: str) -> int:
        """How many times to send this ``kind`` ("burst" or "start"): twice the session's first, then once."""
        first = kind in self._first_sends
        self._first_sends.discard(kind)
        return 2 if first else 1

    async def _start_subjects(self) -> list[int | None]:
        """Each axis's ``uavcan.sub.motion_start.id`` (None: unset or unreadable)."""

        async def port_id(i: int) -> int | None:
            try:
                v = list(await self.read_register(i, "uavcan.sub.motion_start.id"))
            except CoordError:
                return None
            return int(v[0]) if v and int(v[0]) <= MAX_SUBJECT_ID else None

        return await gather_all(port_id(i) for i in range(len(self.axes)))

    async def _choose_start(self) -> None:
        """Settle :attr:`start_subject` and :attr:`start_path` from the request: given, found on every axis, or
        none (reception)."""
        req = self._start_request
        if req is None:
            self.start_subject, self.start_path = None, "each axis on its setpoint's reception (start message off)"
        elif isinstance(req, int):
            self.start_subject, self.start_path = req, f"one start message on subject {req} (given)"
        else:
            ids = await self._start_subjects()
            unset = [ax.label for ax, v in zip(self.axes, ids, strict=True) if v is None]
            if not unset and len(set(ids)) == 1:
                self.start_subject = ids[0]
                self.start_path = f"one start message on subject {ids[0]} (every axis's uavcan.sub.motion_start.id)"
                self._start_checked = True
            else:
                why = (f"no motion_start subject on {', '.join(unset)}" if unset
                       else f"the axes' motion_start subjects differ ({', '.join(map(str, ids))})")
                self.start_subject, self.start_path = None, f"each axis on its setpoint's reception: {why}"

    async def _check_start_subject(self) -> None:
        """With a start subject, every node must subscribe to it (else it would start at its setpoint's reception,
        or never): checked once per coordinator."""
        if self.start_subject is None or self._start_checked:
            return
        ids = await self._start_subjects()
        wrong = [f"{ax.label} ({'none' if v is None else v})" for ax, v in zip(self.axes, ids, strict=True)
                 if v != self.start_subject]
        if wrong:
            raise CoordError(f"not subscribed to the start subject {self.start_subject} "
                             f"(uavcan.sub.motion_start.id): {', '.join(wrong)}")
        self._start_checked = True

    async def _start(self) -> float:
        """With a start subject, publish the start ``start_lead_s`` ahead; returns the lead [second] (0 without)."""
        if self._start_pub is None:
            return 0.0
        await self.publish_start(self.sync_now() + self.start_lead_s)
        return self.start_lead_s

    def sync_now(self) -> float:
        """Now in the nodes' synchronized time (with a start subject) [second]."""
        return float(self._timesync.now_s())

    async def publish_start(self, at_s: float) -> None:
        """One start message naming ``at_s`` (synchronized time): every staged setpoint starts then."""
        import uavcan.time

        msg = uavcan.time.SynchronizedTimestamp_1_0(microsecond=round(at_s * 1e6))
        for _ in range(self._copies("start")):  # The first twice, as the first burst (see _burst).
            await self._start_pub.publish(msg)

    async def _measure(self, plan: SyncPlan, motions: list[AxisMotion], wire: list[ProfileLimits],
                       predicted: list[float], sent_at: float, burst_s: float, planning_s: float,
                       lead_s: float) -> MoveResult:
        from servo_node.otg import plan as otg_plan

        reports = await gather_all(self.motion(i) for i in range(len(self.axes)))
        recorded = self._recorders is not None
        recs = self._recorders or [Recorder() for _ in self.axes]
        self._recorders = None
        rejected: list[str] = []
        axes = []
        # Each node's plan: the same OTG from the same inputs (the coordinator predicted its duration exactly).
        trajs = [otg_plan(m.p0, m.v0, m.a0, m.target, 0.0, *lim.as_tuple()) for m, lim in zip(motions, wire,
                                                                                           strict=True)]
        for i, (ax, m, mot, pred, rec, traj, ap) in enumerate(zip(self.axes, reports, motions, predicted, recs, trajs,
                                                                   plan.axes, strict=True)):
            rep = AxisReport.of(ax.label, m, mot, pred, rec if recorded else None, traj, ap.held)
            axes.append(rep)
            if not rep.moves:
                continue
            if not (rep.node_start >= sent_at - 0.05):
                why = await self.read_register(i, "sys.last_rejection")
                _logger.warning("%s did not take its setpoint (its plan started %.3f s before the burst); its last "
                                "rejection: %s", ax.label, sent_at - rep.node_start, why or "none")
                rejected.append(f"{ax.label}: {why or 'not taken'}")
            elif rep.stopped:
                _logger.warning("%s did not follow this move's plan (its plan is a %s's of %.6f s, this move's "
                                "%.6f s): no arrival to report", ax.label, rep.kind, rep.node_duration, pred)
        window = lead_s + max(predicted) + 0.1
        deviation, ref_dev, rate = line_measures(recs if recorded else None, motions, plan, trajs, axes, sent_at,
                                                 window)
        return MoveResult(plan, tuple(axes), sent_at, burst_s, planning_s, deviation, ref_dev, rate, tuple(rejected))
