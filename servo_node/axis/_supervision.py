"""An axis's supervision: the edges it acts on and the messages it publishes on its own.

Each pass (:meth:`Supervision.supervise`, every :data:`SUPERVISE_PERIOD_S` from the node's one supervision task, every
:data:`SUPERVISE_IDLE_PERIOD_S` while the axis is idle) reports a fault the loop counted once, holds a drive's own
fault until a re-arm, ends a drive-lost error when the drive reports again, lets the gate's timeouts stop the loop
(a follower's: after the loop's own lost-leader stop) and logs a state change once. ``status`` and ``dynamics`` go
out when due, ``feedback`` from its own task. ``dynamics`` (fresh, trusted measurements only) is every sample the
loop traced at ``servo.dynamics_rate`` in loop time (``control/_trace.py``), each stamped with its own time: a pass
that comes late publishes the samples due meanwhile, so the stream is the joint's motion whatever this event loop's
lateness (on the simulated clock: the latest sample, stamped when published).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import pycyphal
import zubax.service.actuator
from pycyphal.application.heartbeat_publisher import Health

from cyphal_common.clocks import system_minus_monotonic_s

from ..arming import ServoState
from ..control import ControlLoop, LoopSample
from ..control import _layout as L
from ..diagnostics import Severity
from ..errors import ErrorCode
from ._reports import dynamics_message, feedback_message, status_message, traced_dynamics_message
from ._setpoints import FAILS_AGAIN, SetpointPath
from ._state import AxisState

SUPERVISE_PERIOD_S = 0.01
"""How often the gate's timeouts and the loop's faults are looked at while the axis needs watching [second]."""

SUPERVISE_IDLE_PERIOD_S = 0.05
"""How often while it does not (:meth:`Supervision.watching`: nothing engaged, armed, stopping, staged, followed or in
error), so only reports can wait (the loop acts on its own faults and deadman in the tick). At 100 Hz, an idle
one-axis node's passes cost about 2 % of a core [second]."""

MISSED_REPORT_PERIOD_S = 10.0
"""Missed ticks of the loop are reported by diagnostic at most this often, with the count since the last report
(``sys.timing`` has every one) [second]."""

REARM_POLL_S = 0.2
"""While the drive is in fault, ``servo.drive.rearm`` is looked at this often [second]."""

LOST_LEADER_GRACE_S = 0.05
"""A follower's gate expires on the same leader samples the loop judges a lost leader by: the loop stops on its
own (and says why) within a tick or two; the gate stops it only if it has not within this [second]."""

DYNAMICS_BURST = 64
"""Traced samples published per pass at most: a pass after a long stall publishes the backlog over several passes
(due again at once), so it never holds the event loop for long [samples]."""

_logger = logging.getLogger(__name__)


class Supervision:
    """The supervision of one axis: its edges (:meth:`supervise`), ``status``, ``dynamics`` and ``feedback``.

    :param path: the axis's setpoint path (a staged start that lapsed is refused through it).
    :param pubs: the axis's configured publications by name (``feedback``, ``status``, ``dynamics``).
    :param health: the axis's health (for ``feedback``).
    """

    def __init__(
        self,
        state: AxisState,
        path: SetpointPath,
        pubs: dict[str, pycyphal.presentation.Publisher[Any]],
        health: Callable[[], Health],
    ) -> None:
        self._s = state
        self._path = path
        self.pubs = pubs
        self._health = health
        self._drive_fault: tuple[ErrorCode, str] | None = None
        self._rearm_count = state.registers.real("servo.drive.rearm")
        self._rearm_check_at = 0.0
        self._feedback_fault: ErrorCode | None = None
        """The loop's latest feedback fault that no setpoint has ended yet (a silent drive's error may cover it)."""
        self._next_supervise = self._next_status = self._next_dynamics = math.inf  # supervise_due: from start.
        self._dynamics_period = math.inf
        self._traced_loop: ControlLoop | None = None
        self._traced = 0
        """The next trace entry to publish (of :attr:`_traced_loop`'s trace)."""
        self._seen_error_count = 0
        self._seen_missed = self._reported_missed = 0
        self._missed_report_at = -math.inf
        self._backstop_at = math.inf
        self._state = state.gate.update(state.now())

    def start(self) -> None:
        """The loop runs: supervision, ``status`` and ``dynamics`` are due from now on."""
        now = time.monotonic()
        self._next_supervise = self._next_status = now
        dynamics_rate = self._s.registers.real("servo.dynamics_rate")
        self._dynamics_period = 1.0 / dynamics_rate
        self._next_dynamics = now if "dynamics" in self.pubs else math.inf  # Nothing to build without the port.

    def supervise(self) -> LoopSample:
        """Act on edges: a fault the loop counted, a drive that reports again, the gate's timeouts."""
        st = self._s
        loop = st.started_loop()
        now = st.now()
        s = st.last_sample = loop.sample()
        gate = st.gate
        if s.error_count > self._seen_error_count:
            self._seen_error_count = s.error_count
            if s.error is not ErrorCode.NONE:
                code = s.error
                if code in FAILS_AGAIN:
                    st.failed_setpoint = st.setpoint
                if code.feedback:
                    self._feedback_fault = code
                if code is ErrorCode.STOP_TIMEOUT and st.drive is not None:
                    st.drive.escalate(code.text)  # Its other channels (CiA 402: SDO, NMT); it reports the outcome.
                gate.on_error(code.text, code)
                st.diag.report(f"{st.names.label}servo error: {code.text}")
                # The loop stops on its own faults (and keeps a silent drive braking); nothing to command here.
        self._report_missed_ticks(s)
        drive_fault = self._supervise_drive()
        if drive_fault is not None:
            pass  # The drive's own report holds the error until a re-arm.
        elif gate.error_code is ErrorCode.DRIVE_LOST and s.error is ErrorCode.NONE:
            if gate.update(now) is ServoState.ERROR:
                self._drive_back("the drive reports again; waiting for a setpoint", "drive feedback restored")
        if st.follower is not None:
            st.follower.supervise(now)
        self._report_peers()
        if st.staging is not None and (lapsed := st.staging.lapsed(now)) is not None:
            self._path.refuse_start(lapsed)
        state = gate.update(now)
        if state is ServoState.ENGAGED:
            self._feedback_fault = None
        following = s.engaged and s.mode == L.MODE_MIMIC
        if state is not ServoState.ENGAGED and self._state is ServoState.ENGAGED:
            if state is ServoState.EXPIRED and following:
                self._backstop_at = now + LOST_LEADER_GRACE_S  # The loop's own lost-leader stop comes first.
            else:
                loop.stop(immediate=st.registers.flag("servo.stop.disengage_immediately"))
        if now >= self._backstop_at:
            self._backstop_at = math.inf
            if following and state is not ServoState.ENGAGED:
                loop.stop(immediate=st.registers.flag("servo.stop.disengage_immediately"))
        if state is not self._state:
            _logger.info("%sServo %s -> %s: %s", st.names.label, self._state, state, gate.reason)
            self._state = state
            st.feedback_due.set()
        return s

    def _report_missed_ticks(self, s: LoopSample) -> None:
        """Ticks the loop missed (its host too busy for it): health ADVISORY for a second, a diagnostic at most every
        :data:`MISSED_REPORT_PERIOD_S` with the count since the last one."""
        if s.missed_ticks <= self._seen_missed:
            return
        st = self._s
        now = time.monotonic()
        self._seen_missed = s.missed_ticks
        st.counters.ticks_missed_at = now
        if now >= self._missed_report_at:
            st.diag.report(f"{st.names.label}control loop missed {s.missed_ticks - self._reported_missed} ticks "
                           f"(late up to {s.late_max_s * 1e3:.1f} ms): the host is too busy for "
                           f"servo.loop_rate; see sys.timing", Severity.WARNING)
            self._reported_missed = s.missed_ticks
            self._missed_report_at = now + MISSED_REPORT_PERIOD_S

    def watching(self, s: LoopSample) -> bool:
        """Whether the axis needs a pass every :data:`SUPERVISE_PERIOD_S`: its gate engaged or armed by readiness (a
        readiness that drops right after a setpoint engaged it stops the loop at the next pass), its loop engaged (a
        move, a stop, a hold), a staged start or a leader to follow, a backstop due, an error or a drive fault."""
        st = self._s
        gate = st.gate
        return (s.engaged or self._state is ServoState.ENGAGED or (gate.gated and gate.armed(st.now()))
                or st.staging is not None or st.follower is not None or self._backstop_at != math.inf
                or self._drive_fault is not None or gate.error_code is not ErrorCode.NONE)

    def _report_peers(self) -> None:
        """What the pinned peers' guards noticed: the drive's (always), the time master's (node-wide, while a
        follower or a staged start depends on synchronized time)."""
        st = self._s
        for note in st.drive.take_notes() if st.drive is not None else []:
            st.diag.report(f"{st.names.label}{note}")
        notes = st.timesync.take_notes()
        if st.follower is not None or st.staging is not None:
            for note in notes:
                st.diag.report(note)

    def rearm(self) -> None:
        """The user re-armed the drive (the command or ``servo.drive.rearm``): its fault clearing ends in STANDBY."""
        self._feedback_fault = None

    def _drive_back(self, recovered: str, restored: str) -> None:
        """The drive answers again: STANDBY (``recovered``), or the loop's feedback fault that came before or during
        the silence and that no setpoint or re-arm has ended (the silence's error covered it in ``sys.status``)."""
        st = self._s
        pending = self._feedback_fault
        if pending is not None:
            st.gate.on_error(f"{pending.text} (before the drive answered again)", pending)
            st.diag.report(f"{st.names.label}{restored}; its feedback fault stands: {pending.text}", Severity.INFO)
        else:
            st.gate.on_recovered(recovered)
            st.diag.report(f"{st.names.label}{restored}", Severity.INFO)

    def _supervise_drive(self) -> tuple[ErrorCode, str] | None:
        """The drive's own reports: its warnings to the diagnostics; its fault (code and text) as the axis's error
        (once per fault), until a re-arm or the drive answering again (:meth:`_drive_back`)."""
        st = self._s
        drive = st.drive
        if drive is None:
            return None
        for note in drive.events():
            st.diag.report(f"{st.names.label}drive: {note}")
        fault = drive.fault()
        if fault is not None and time.monotonic() >= self._rearm_check_at:
            self._rearm_check_at = time.monotonic() + REARM_POLL_S
            count = st.registers.real("servo.drive.rearm")
            if count != self._rearm_count:  # The user wrote servo.drive.rearm: the same as the re-arm command.
                self._rearm_count = count
                self.rearm()
                drive.rearm()
        if fault is not None and (fault != self._drive_fault or st.gate.error_code is not fault[0]):
            # Also when an error of the loop took its place: a drive that never answered (a failed bring-up) is
            # silent too, and the loop's drive-lost must not hide the drive's own reason.
            st.gate.on_error(fault[1], fault[0])
            if fault != self._drive_fault:
                st.diag.report(f"{st.names.label}servo error: {fault[1]}")
        elif fault is None and self._drive_fault is not None and st.gate.error_code is self._drive_fault[0]:
            self._drive_back("the drive is back (re-armed, or it answers now); waiting for a setpoint",
                             "drive fault cleared")
        self._drive_fault = fault
        return fault

    async def supervise_due(self, now: float, slack: float = 0.0) -> float:
        """One pass of the periodic work (see :meth:`~servo_node.axis.Axis.supervise_due`); returns when this axis
        is due next [second, ``time.monotonic``]."""
        st = self._s
        try:
            s = None
            if now + slack >= self._next_supervise:
                s = self.supervise()
                self._next_supervise = now + (SUPERVISE_PERIOD_S if self.watching(s) else SUPERVISE_IDLE_PERIOD_S)
            if now + slack >= self._next_status:
                self._next_status = max(self._next_status + 1.0, now)
                pub = self.pubs.get("status")
                if pub is not None:
                    await pub.publish(self._status_message(s if s is not None else st.started_loop().sample()))
            if now >= self._next_dynamics:
                self._next_dynamics = max(self._next_dynamics + self._dynamics_period, now)
                if st.loop_clock == "real":
                    if not await self._publish_traced():
                        self._next_dynamics = now  # A backlog left: due again at once.
                else:
                    s = s if s is not None else st.started_loop().sample()
                    if s.measured:  # No measurement, no dynamics: zeros or a silent drive's last state are not news.
                        await self.pubs["dynamics"].publish(dynamics_message(s, False, st.timesync.offset_s))
        except pycyphal.transport.ResourceClosedError:
            raise
        except Exception:  # A bug here must not end supervision: log it and keep going.
            _logger.exception("%sSupervision failed", st.names.label)
        return min(self._next_supervise, self._next_status, self._next_dynamics)

    async def _publish_traced(self) -> bool:
        """Publish the loop's traced samples not published yet (at most :data:`DYNAMICS_BURST`); False if some are
        left. Samples the loop overwrote before this pass came are counted as lost (``sys.timing``)."""
        st = self._s
        loop = st.started_loop()
        if loop is not self._traced_loop:  # Started, or restarted: its trace, from now on.
            self._traced_loop, self._traced = loop, int(loop.arrays.trace[L.TRACE_COUNT])
        first, rows = loop.trace_since(self._traced)
        st.counters.dynamics_lost += first - self._traced
        self._traced = first
        if not len(rows):
            return True
        pub, offset = self.pubs["dynamics"], st.timesync.offset_s
        clock = system_minus_monotonic_s()
        for row in rows[:DYNAMICS_BURST]:
            await pub.publish(traced_dynamics_message(row, clock + offset))
            self._traced += 1
        return len(rows) <= DYNAMICS_BURST

    async def feedback_task(self) -> None:
        """``feedback`` right after each applied setpoint and state change, and at least once per second."""
        st = self._s
        try:
            while not st.closed:  # Also ends it if a cancellation was swallowed inside a publish.
                try:
                    await asyncio.wait_for(st.feedback_due.wait(), timeout=1.0)
                except TimeoutError:
                    pass
                st.feedback_due.clear()
                engaged = st.gate.update(st.now()) is ServoState.ENGAGED
                await self.pubs["feedback"].publish(
                    feedback_message(engaged, self._health(), st.started_loop().sample().demand_factor))
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass

    def _status_message(self, s: LoopSample) -> zubax.service.actuator.Status_1_0:
        """``status`` from the loop's sample ``s``, the gate and the error counts."""
        st = self._s
        errors = st.counters.setpoints_rejected + st.registry.refused_writes + s.error_count
        in_error = st.gate.update(st.now()) is ServoState.ERROR
        return status_message(s, st.gate.error_code, in_error, errors)
