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
   duration ``T``: the *planned* arrival spread (of t0 + T) and line (the nodes' plans from their t0). A node starts
   a setpoint's plan at its reception (``servo_node.control._stages.plan_start``), or with a start subject
   (``start_subject``; every node's ``uavcan.sub.motion_start.id``) at the instant one
   ``uavcan.time.SynchronizedTimestamp.1.0`` names ``start_lead_s`` ahead (:mod:`servo_node.staging`). An axis whose
   plan a stop replaced is reported as stopped and left out of the spreads;
5. with ``record``, what the joints did, from their own ``dynamics`` samples and stamps (:mod:`._joints`): each
   axis's arrival (its last entry into ±0.1 % of its stroke), their spread, the straight-line deviation, and where
   samples were lost (those stretches are not judged); and each axis's lag behind its plan started at t0.

The session's parts live beside it: the axes (:mod:`._axes`), the planned move and its commands
(:mod:`._segment`), the result and its measurement (:mod:`._result`, :mod:`._joints`, :mod:`._measure`), the
synchronisation math (:mod:`._sync`).
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

from cyphal_common.collector import freeze_start_up_objects
from cyphal_common.register_reads import READ_TIMEOUTS_S, read_register
from cyphal_common.tasks import cancel_and_wait, gather_all
from servo_node.setpoint import Floors, ProfileLimits

from ._axes import Axis, CoordError
from ._cadence import Cadence, repeat
from ._joints import LINE_WARN
from ._listen import Listener
from ._result import AxisReport, MoveResult, Recorder, after_arrival, line_measures
from ._segment import AxesInfo, Segment, checked_segment, commands, within_envelope
from ._start import START_AUTO, StartMessages, check_start_subject, choose_start
from ._sync import AxisMotion, Sync, SyncPlan, optimal_duration

NODE_NAME = "io.github.cyphal_servo.coord"

REST_VELOCITY = 1e-3
"""A measured |v| below this [unit/s] (and |a| below 100× this) counts as at rest: the node plans such a start
from rest (its reference is at rest), and phase sync needs rest."""

SETTLE_S = 0.1
"""A move is judged up to this long after its planned end [second] (the arrival: the last entry into the band)."""

JUDGED_BEFORE_START_S = 0.005
"""A move on a start message is judged from this long before the instant it names [second]."""

START_REPEAT_PERIODS = 2
"""A start is repeated with the setpoints until its instant is this many repetition periods past (at most half
the shortest deadman, inside which a node still takes a start)."""

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
        line_threshold: float = LINE_WARN,
        node: Any = None,
    ) -> None:
        if not axes:
            raise ValueError("no axes")
        if not 0.0 < start_lead_s <= 0.5:
            raise ValueError(f"start lead {start_lead_s} s: must be in (0, 0.5]")
        if isinstance(start_subject, str) and start_subject != START_AUTO:
            raise ValueError(f"start subject {start_subject!r}: a subject-ID, {START_AUTO!r} or None")
        self.axes = list(axes)
        self.line_threshold = line_threshold
        """A measured straight-line deviation above this fraction of the stroke is a warning (and ``--check-line``'s
        failure)."""
        self._start_request = start_subject
        self.start_subject: int | None = None
        self.start_path = ""
        self.start_lead_s = start_lead_s
        self._starts: StartMessages | None = None
        self._first_burst = True  # Not sent yet in this session: the first goes twice (see _burst).
        self._start_checked = False
        self._hold: asyncio.Task[None] | None = None
        """The repetition of the last move's setpoints, until the next move's burst takes over."""
        self._timesync: Any = None
        self._env = dict(os.environ if environment is None else environment)
        self._node: Any = None
        self._shared_node = node
        self._pubs: list[Any] = []
        self._clients: list[Any] = []
        self.listener: Listener | None = None
        """The axes' ``dynamics`` (after :meth:`start`)."""

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
        self.listener = Listener(pres.transport, self.axes)
        for ax in self.axes:
            pub = pres.make_publisher(zubax.telega.ServoCommand_1_0, ax.setpoint)
            pub.priority = pycyphal.transport.Priority.HIGH
            continue_after_restart(pub)  # A move run again at once must not be taken for a repeat of the last.
            self._pubs.append(pub)
            client = pres.make_client_with_fixed_service_id(uavcan.register.Access_1_0, ax.node_id)
            continue_after_restart(client)  # …nor its register reads (a server drops a repeated request unanswered).
            self._clients.append(client)
        node.start()  # Idempotent (a shared node is started already).
        self.start_subject, self.start_path, self._start_checked = await choose_start(self, self._start_request)
        if self.start_subject is not None:
            import uavcan.time

            from cyphal_common.timesync import TimeSync

            start_pub = pres.make_publisher(uavcan.time.SynchronizedTimestamp_1_0, self.start_subject)
            start_pub.priority = pycyphal.transport.Priority.HIGH
            continue_after_restart(start_pub)
            self._timesync = TimeSync.of(node, "slave")  # The nodes' synchronized time, where a master is heard.
            self._starts = StartMessages(start_pub, self.sync_now)
        # Load (or compile) the OTG kernels now, off the event loop, so the move's planning time is planning only.
        await asyncio.get_running_loop().run_in_executor(None, optimal_duration,
                                                         AxisMotion(0.0, 0.0, 0.0, 1.0, ProfileLimits(-1, 1, -1, 1, 1)))
        if self._shared_node is None:  # This process is the coordinator's (a console freezes its own).
            freeze_start_up_objects()

    def close(self) -> None:
        """Leave the bus (a shared node: close this coordinator's ports only); idempotent."""
        if self.listener is not None:
            self.listener.stop()
        if self._node is not None and self._shared_node is None:
            self._node.close()
        elif self._node is not None:
            for port in [*self._pubs, *self._clients, *([self._starts.pub] if self._starts else [])]:
                port.close()
            self._pubs, self._clients, self._starts = [], [], None
        self._node = None

    async def __aenter__(self) -> Coordinator:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()

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

    async def limits(self, i: int) -> tuple[ProfileLimits, Floors]:
        """Axis ``i``'s own limits: its default profile (``servo.profile.*``) within its envelope (``sys.envelope``,
        into which the node clips every setpoint's limits: planned with more, its plan would not be the one the
        coordinator predicted, nor on the line); and the smallest limits its node accepts (1e-4 of the envelope)."""
        names = ("velocity", "acceleration", "jerk")
        v, a, j = await gather_all(self.read_register(i, f"servo.profile.{n}") for n in names)
        own = ProfileLimits(v[0], v[1], a[0], a[1], j[0])
        try:
            env = list(await self.read_register(i, "sys.envelope"))
        except CoordError:  # A node without the register (an older version): its profile as it is.
            env = []
        return within_envelope(own, env)

    async def motion(self, i: int) -> dict[str, Any]:
        """Axis ``i``'s ``sys.motion`` register, parsed."""
        return dict(json.loads(await self.read_register(i, "sys.motion")))

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
        :param record: receive ``dynamics`` during the move to measure what the joints did (:mod:`._joints`: their
            arrival spread and straight-line deviation, from their own samples) and each axis's lag behind its plan.
            The subscriptions are closed for the burst either way (at high ``dynamics`` rates the receptions would
            delay it on this event loop: 3 × 1 kHz dynamics spread a 3-setpoint burst over ~4 ms) and, when
            recording, opened again right after it, each axis's recording starting from its last sample before the
            burst; recording costs this process CPU time during the move.
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
        plan, predicted = seg.plan, seg.predicted
        planning_s = time.perf_counter() - t_plan
        if plan.fallback:
            _logger.warning("phase sync infeasible, using time sync: %s", plan.fallback)
        msgs = commands(seg)
        repeat_s = axes_info.repeat_s
        # On CAN no receptions during the burst (a publication there yields to the event loop, and receptions would
        # run between its sends; a UDP publication does not yield): recording resumes right after it, from each
        # axis's last sample before it (at rest at its start).
        dyn = self.dynamics
        if self._publication_yields():
            dyn.stop()
        if record:
            dyn.record()
        await self._end_hold()  # One repetition per axis: the previous move's setpoints stop with this burst.
        sent_at = time.time()
        stamp_from = self.stamp_now()
        t_burst = time.perf_counter()
        await self._burst(msgs)
        burst_s = time.perf_counter() - t_burst
        cadence = Cadence(repeat_s, axes_info.deadman_s, time.monotonic())
        lead = await self._start()
        if lead > 0.0:
            stamp_from = self.start_at - JUDGED_BEFORE_START_S  # At rest until then: judged from the start.
        stamp_to = (self.start_at if lead > 0.0 else stamp_from) + max(predicted) + SETTLE_S
        if record:
            dyn.start()
        if on_sent is not None:
            on_sent(plan)

        async def send() -> None:
            """The setpoints again, the start too while young (:meth:`repeat_start`)."""
            await self._burst(msgs)
            await self.repeat_start(START_REPEAT_PERIODS * repeat_s)

        async def mid_move() -> list[dict[str, Any]] | None:
            """Every node's ``sys.motion`` half-way: its plan, should a stop replace it after its arrival (a
            deadman that expired while this process was held up) before the end is read."""
            await asyncio.sleep(lead + 0.5 * max(predicted))
            try:
                return await gather_all(self.motion(i) for i in range(len(self.axes)))
            except CoordError:
                return None

        end_mono = time.monotonic() + lead + max(predicted) + 0.15
        # Until the next move's burst (:meth:`_end_hold`) or this move's end.
        feeder = self._hold = asyncio.create_task(repeat(send, cadence))
        mid = asyncio.create_task(mid_move())
        try:
            await asyncio.sleep(max(0.0, end_mono - time.monotonic()))
            result = await self._measure(seg, axes_info, sent_at, (stamp_from, stamp_to), burst_s, planning_s, lead,
                                         await mid, cadence)
            if on_result is not None:
                on_result(result)
            if hold_s is None:
                await asyncio.Event().wait()  # Until cancelled (Ctrl-C).
            else:
                await asyncio.sleep(hold_s)
        finally:
            await cancel_and_wait([feeder, mid])  # Re-cancels: pycyphal's send can swallow a cancellation.
        return result

    async def axes_info(self) -> AxesInfo:
        """What a move needs to know of every axis (read once per move or path), after checking the start subject."""
        n = len(self.axes)
        limits, floors = zip(*await gather_all(self.limits(i) for i in range(n)), strict=True)
        deadman = await gather_all(self.read_register(i, "servo.deadman_timeout") for i in range(n))
        tolerance = await gather_all(self.read_register(i, "servo.arrival_tolerance") for i in range(n))
        rates = await gather_all(self.read_register(i, "servo.dynamics_rate") for i in range(n))
        if self.start_subject is not None and not self._start_checked:
            await check_start_subject(self, self.start_subject)
            self._start_checked = True
        shortest = min(d[0] for d in deadman)
        return AxesInfo(tuple(limits), tuple(t[0] for t in tolerance), min(0.1, shortest / 4.0),
                        tuple(1.0 / r[0] for r in rates), tuple(floors), shortest)

    async def start_states(self) -> list[tuple[float, float, float]]:
        """Every axis's (p, v, a) to plan from: measured, snapped to rest below :data:`REST_VELOCITY`, and an
        engaged axis at rest from its reference (what the node itself plans from, not the residual off it)."""
        states = await self.dynamics.states()
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

        The session's first burst goes out twice (as its first start): a coordinator run again under the same
        node-ID within the 2 s transfer-ID timeout continues its transfer-IDs, but on CAN modulo 32, and a receiver
        drops a first transfer whose transfer-ID equals the last it took from that node (one in 32: that axis never
        moved). The copy is the next transfer-ID; a node ignores a repeated setpoint or start."""
        for _ in range(2 if self._first_burst else 1):
            for pub, msg in zip(self._pubs, msgs, strict=True):
                await pub.publish(msg)
        self._first_burst = False

    async def _start(self) -> float:
        """With a start subject, publish the start ``start_lead_s`` ahead; returns the lead [second] (0 without)."""
        if self._starts is None:
            return 0.0
        await self.publish_start(self.sync_now() + self.start_lead_s)
        return self.start_lead_s

    def _publication_yields(self) -> bool:
        """A publication on this transport yields to the event loop (CAN: its frames go through the media's
        thread); UDP's sends at once (``cyphal_common/transport/_udp_emission.py``)."""
        import pycyphal.transport.udp

        return not isinstance(self._node.presentation.transport, pycyphal.transport.udp.UDPTransport)

    def sync_now(self) -> float:
        """Now in the nodes' synchronized time (with a start subject) [second]."""
        return float(self._timesync.now_s())

    @property
    def start_at(self) -> float:
        """The instant the last start named (synchronized time; NaN: none) [second]."""
        return self._starts.at_s if self._starts is not None else math.nan

    async def publish_start(self, at_s: float) -> None:
        """One start message naming ``at_s`` (synchronized time): every staged setpoint starts then."""
        assert self._starts is not None
        await self._starts.publish(at_s)

    async def repeat_start(self, window_s: float) -> None:
        """The last start again while young (:meth:`StartMessages.repeat`); nothing without a start subject."""
        if self._starts is not None:
            await self._starts.repeat(window_s)

    async def _end_hold(self) -> None:
        """Stop the last move's repetition (its setpoints would otherwise be staged against the next move's)."""
        hold, self._hold = self._hold, None
        if hold is not None and not hold.done():
            await cancel_and_wait([hold])

    async def _measure(self, seg: Segment, info: AxesInfo, sent_at: float, judged: tuple[float, float],
                       burst_s: float, planning_s: float, lead_s: float,
                       mid: Sequence[dict[str, Any]] | None, cadence: Cadence) -> MoveResult:
        """The result of a move: the nodes' reports (``mid``: their ``sys.motion`` half-way), the longest pause of
        its setpoints (``cadence``) and, if recorded, the joints over ``judged`` (the window [from, to] on the
        samples' clock, once the samples reach its end)."""
        from servo_node.otg import plan as otg_plan

        plan, motions, predicted = seg.plan, seg.motions, seg.predicted
        window = lead_s + max(predicted) + SETTLE_S
        dyn = self.dynamics
        recorded = dyn.recorders is not None
        if recorded:
            await dyn.await_samples(judged[1])
        reports = await gather_all(self.motion(i) for i in range(len(self.axes)))
        if mid is not None:
            reports = [after_arrival(end, half) for end, half in zip(reports, mid, strict=True)]
        recs = dyn.take() or [Recorder() for _ in self.axes]
        rejected: list[str] = []
        axes = []
        # Each node's plan: the same OTG from the same inputs (the coordinator predicted its duration exactly).
        trajs = [otg_plan(m.p0, m.v0, m.a0, m.target, 0.0, *lim.as_tuple()) for m, lim in zip(motions, seg.wire,
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
        joints, ref_dev, rate = line_measures(recs if recorded else None, info.periods, motions, plan, trajs, axes,
                                              sent_at, window, judged)
        deviation = joints.line.deviation if joints is not None else math.nan
        return MoveResult(plan, tuple(axes), sent_at, burst_s, planning_s, deviation, ref_dev, rate, tuple(rejected),
                          joints, self.line_threshold, cadence.longest, cadence.deadman_s)

    @property
    def dynamics(self) -> Listener:
        """The axes' ``dynamics`` (:meth:`start` first)."""
        if self.listener is None:
            raise CoordError("the coordinator is not started")
        return self.listener

    def stamp_now(self) -> float:
        """Now on the clock of the nodes' ``dynamics`` stamps (Cyphal synchronized time) [second]."""
        return self.sync_now() if self._timesync is not None else time.time()
