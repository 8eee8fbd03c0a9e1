"""One servo axis: its ports, arming gate, setpoint intake, control loop, drive, status registers and publications.

An :class:`Axis` lives as long as one pycyphal node (the shell re-creates it on RESTART; its counters survive).
Nothing here computes motion: setpoints are validated (:mod:`._intake`), gated (:mod:`servo_node.arming`) and
handed to the :class:`~servo_node.control.ControlLoop`, which does all numerics in its own thread.

State changes are edges: an error is reported once when the loop counts it, a state change is logged once, and
an error holds while its cause persists (a silent drive, the very setpoint that was infeasible); the drive
reporting again ends a drive error in STANDBY.

Clocks: with ``loop_clock="real"`` the axis runs on ``time.monotonic``; with ``"simulated"`` the axis's time is
the loop's simulated time, which only :meth:`Axis.advance` moves (deterministic tests).

Why ~780 lines (held there by ``tests/test_architecture.py``): ports, intake task, supervision edges, safe stop and
a follower's engagement share the axis's state; what needs none of it lives apart (:mod:`._intake`,
:mod:`._reports`, :mod:`._follower`). The setpoint path, supervision and views as objects of their own: still to do.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import pycyphal
import pycyphal.application
import uavcan.time
import zubax.physics.dynamics
import zubax.service
import zubax.service.actuator
import zubax.telega
from pycyphal.application.heartbeat_publisher import Health

from cyphal_common.clocks import system_minus_monotonic_s
from cyphal_common.errors import ConfigurationError, ServoError
from cyphal_common.tasks import cancel_and_wait
from cyphal_common.timesync import TimeSync

from ..arming import ArmingGate, ServoState
from ..control import ControlLoop, ControlThread, LoopConfig, LoopSample, MimicSample
from ..control import _layout as L
from ..diagnostics import Diagnostics, Severity
from ..drive import Drive
from ..errors import ErrorCode
from ..registers import NODE_ANY, AxisNames, AxisRegisters, ServoRegistry
from ..setpoint import Setpoint
from ..staging import Staging, Start
from ._config import drive_from_registers, loop_config, setpoint_floors
from ._follower import Follower
from ._intake import Received, SetpointIntake, SetpointPort, decode_setpoint, reception_time_s
from ._reports import (
    AxisCounters,
    EventCounts,
    counters_view,
    dynamics_message,
    events_view,
    feedback_message,
    json_register,
    motion_view,
    real64_register,
    reference_view,
    status_message,
    status_view,
    text_register,
)
from ._udral_face import Fields, UdralFace

SUPERVISE_PERIOD_S = 0.01
"""How often the gate's timeouts and the loop's faults are looked at [second]."""

REARM_POLL_S = 0.2
LOST_LEADER_GRACE_S = 0.05
"""A follower's gate expires on the same leader samples the loop judges a lost leader by: the loop stops on its
own (and says why) within a tick or two; the gate stops it only if it has not within this [second]."""
"""While the drive is in fault, ``servo.drive.rearm`` is looked at this often [second]."""

STOP_MARGIN_S = 0.5
"""Slack of a safe stop's bound beyond the planned stop and the hold [second]."""

_PUBLICATIONS: dict[str, Any] = {
    "feedback": zubax.service.actuator.Feedback_1_0,
    "status": zubax.service.actuator.Status_1_0,
    "dynamics": zubax.physics.dynamics.DoF3rdTs_1_0,
}

_logger = logging.getLogger(__name__)


class Axis:
    """One servo on a node: construct (ports), ``await start()`` (loop, drive, tasks), ``await close()``.

    :param node: the pycyphal node this axis's ports live on.
    :param names: the axis's naming scheme (``AxisNames()``: the single, unprefixed axis).
    :param counters: event counts that outlive this axis (kept by the shell across RESTART).
    :param loop_clock: ``"real"`` or ``"simulated"`` (see the module docstring).
    :param restarts: how many times the node restarted (for ``sys.counters``).
    :param control_thread: the thread that ticks this axis's loop with the node's other axes (real clock; None:
        a thread of its own).
    """

    def __init__(
        self,
        node: pycyphal.application.Node,
        registry: ServoRegistry,
        names: AxisNames,
        diagnostics: Diagnostics,
        counters: AxisCounters,
        loop_clock: str = "real",
        restarts: Callable[[], int] = lambda: 0,
        started_at_s: float | None = None,
        control_thread: ControlThread | None = None,
    ) -> None:
        self.names = names
        self._control_thread = control_thread
        self.registers = AxisRegisters(registry, names)
        self.registers.declare()
        self.counters = counters
        self.loop_clock = loop_clock
        self._node = node
        self._registry = registry
        self._diag = diagnostics
        self._restarts = restarts
        self._started_at_s = time.monotonic() if started_at_s is None else started_at_s
        self._intake = SetpointIntake(self.registers, counters, diagnostics)
        try:
            self._setpoint_port: SetpointPort | None = SetpointPort(node, names.port("setpoint_servo"))
        except pycyphal.application.PortNotConfiguredError:
            self._setpoint_port = None
        self._collided = False
        self._readiness_sub = _subscriber(node, zubax.service.Readiness_1_0, names.port("readiness"))
        self._start_sub = _subscriber(node, uavcan.time.SynchronizedTimestamp_1_0, names.port("motion_start"))
        self._pubs: dict[str, pycyphal.presentation.Publisher[Any]] = {}
        for name, dtype in _PUBLICATIONS.items():
            pub = _publisher(node, dtype, names.port(name))
            if pub is not None:
                self._pubs[name] = pub
        self._udral = UdralFace(node, names, self.registers.text("servo.drive.kind") == "rotational",
                                int(self.registers.real("servo.udral.group_index")),
                                self.registers.text("servo.udral.group_quantity"),
                                self.registers.real("servo.udral.bus_voltage"))
        gated = self._readiness_sub is not None or self._udral.gates
        self.gate = ArmingGate(gated, self.registers.real("servo.deadman_timeout"))
        self._staging = Staging(self.gate.deadman_timeout_s) if self._start_sub is not None else None
        self._reported_start_refusal = ""
        notes: list[str] = []
        self.fault = ""
        """Why this axis cannot actuate at all (its configuration); empty when it can."""
        try:
            self.config: LoopConfig = loop_config(self.registers, notes)
        except ConfigurationError as ex:
            self.config = LoopConfig()
            self._disable(str(ex))
        for note in notes:
            diagnostics.report(f"{names.label}{note}")
        self._intake.floors = setpoint_floors(self.config.envelope)
        self.registers.serve("sys.status", json_register(self.status))
        self.registers.serve("sys.motion", json_register(self.motion))
        self.registers.serve("sys.reference", real64_register(self.reference))
        self.registers.serve("sys.counters", json_register(self.counts))
        self.registers.serve("sys.events", json_register(self.events))
        self.registers.serve("sys.drive", json_register(lambda: self._drive.view() if self._drive else {}))
        self.registers.serve("sys.last_rejection", text_register(lambda: self.counters.last_rejection))
        self._loop: ControlLoop | None = None
        self._drive: Drive | None = None
        self._drive_fault: tuple[ErrorCode, str] | None = None
        self._rearm_count = self.registers.real("servo.drive.rearm")
        self._rearm_check_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._next_supervise = self._next_status = self._next_dynamics = math.inf  # supervise_due: from start.
        self._dynamics_period = math.inf
        self._started = False
        self._closed = False
        self._halting = False
        self._setpoint: Setpoint | None = None
        self._failed_setpoint: Setpoint | None = None
        self._last_sample: LoopSample | None = None
        self._seen_error_count = 0
        self._backstop_at = math.inf
        self._state = self.gate.update(self.now())
        self._feedback_due = asyncio.Event()
        master = int(registry.real("servo.time_sync.master_node_id"))
        self._timesync = TimeSync.of(node, registry.text("servo.time_sync"), None if master == NODE_ANY else master)
        self._follower = Follower.create(
            node, names, self.registers, self._timesync, loop_clock == "real", diagnostics, self.now
        )
        if self._follower is not None:
            self.registers.serve("sys.mimic", json_register(self.mimic))
            if self._follower.fault:
                diagnostics.report(f"{names.label}{self._follower.fault}")

    # ---------------------------------------------------------------- lifecycle

    @property
    def loop(self) -> ControlLoop:
        """The control loop (exists from :meth:`start` on)."""
        if self._loop is None:
            raise ServoError(f"axis {self.names.axis!r} is not started")
        return self._loop

    @property
    def moving(self) -> bool:
        """True while the loop commands the drive (moving, holding, or stopping)."""
        return self._loop is not None and self._loop.sample().engaged

    async def start(self) -> None:
        """Load the loop's kernels (off the event loop), start the loop, the drive link and the tasks; idempotent."""
        if self._started or self._closed:
            return
        self._started = True
        try:
            self._drive = drive_from_registers(self.registers, self._node, self.names.port(""))
        except ConfigurationError as ex:
            self._disable(str(ex))  # No drive, no loop: sys.status says why; nothing can move.
            return
        # Loading (or compiling) the numba kernels takes a while; off the event loop, heartbeats keep going.
        loop = await asyncio.get_running_loop().run_in_executor(None, self._start_loop, self._drive)
        self._loop = loop
        if self._closed:  # Closed while the kernels loaded.
            loop.close()
            return
        self._last_sample = loop.sample()
        self._drive.start()
        if self._readiness_sub is not None:
            self._readiness_sub.receive_in_background(self._on_readiness)
        if self._start_sub is not None:
            self._start_sub.receive_in_background(self._on_start)
        self._udral.start(self._on_udral_setpoint, self._on_udral_readiness, loop.sample, self._udral_state)
        if self._follower is not None:
            self._follower.on_sample = self._on_leader_sample
            self._follower.on_state = self._feedback_due.set
            self._follower.start(loop.arrays.lead)
        now = time.monotonic()
        self._next_supervise = self._next_status = now
        dynamics_rate = self.registers.real("servo.dynamics_rate")
        self._dynamics_period = 1.0 / dynamics_rate
        self._next_dynamics = now if "dynamics" in self._pubs else math.inf  # Nothing to build without the port.
        self._tasks = []
        if "feedback" in self._pubs:  # Without the port its task would wake for every setpoint to build nothing.
            self._tasks.append(asyncio.create_task(self._feedback_task(), name=f"{self.names.label}feedback"))
        if self._setpoint_port is not None:
            self._tasks.append(asyncio.create_task(self._setpoint_task(), name=f"{self.names.label}setpoints"))

    def _disable(self, fault: str) -> None:
        """This axis cannot actuate as configured: an error with the reason, every setpoint refused."""
        if not self.fault:
            self.fault = fault
            self._intake.fault = fault
            self.gate.on_error(fault, ErrorCode.DRIVE_INCAPABLE)
            self._diag.report(f"{self.names.label}servo disabled: {fault}")

    def _start_loop(self, drive: Drive) -> ControlLoop:
        loop = ControlLoop(self.config, drive, clock=self.loop_clock)
        loop.start(self._control_thread)
        return loop

    async def safe_stop(self, reason: str) -> None:
        """Bring the joint to rest before the axis goes away: no setpoint applies from now on, the loop makes its
        jerk-limited stop (and holds until the drive is at rest), then the drive gets STANDBY.

        Waits until the loop reports the joint disengaged, or the stop's bound passes (then the force is removed
        and that is reported).
        """
        self._halting = True
        self.gate.halt(f"stopping: {reason}")
        loop = self._loop
        if loop is None:
            return
        s = loop.sample()
        if s.engaged:
            issued_at_s = s.time_s
            loop.stop(immediate=self.registers.flag("servo.stop.disengage_immediately"))
            deadline_s = math.nan  # Loop time; known once the loop has taken the stop.
            wall_limit = time.monotonic() + 1.0 + STOP_MARGIN_S
            while s.engaged:
                await self._pass(SUPERVISE_PERIOD_S)
                s = loop.sample()
                if math.isnan(deadline_s) and s.time_s > issued_at_s:
                    deadline_s = stop_deadline_s(s, self.config)
                    wall_limit = time.monotonic() + (deadline_s - s.time_s) + STOP_MARGIN_S
                late = s.time_s >= deadline_s or (self.loop_clock == "real" and time.monotonic() > wall_limit)
                if s.engaged and late:
                    self._diag.report(f"{self.names.label}safe stop: not at rest within its bound; force removed")
                    loop.stop(immediate=True)
                    await self._pass(SUPERVISE_PERIOD_S)
                    break
            _logger.info("%sSafe stop done at %.6g (v %.3g)", self.names.label, s.position, s.velocity)
        if self._drive is not None:
            await self._drive.stop()  # The loop is disengaged: STANDBY goes out to the drive.

    async def close(self) -> None:
        """Cancel and await the tasks, give the drive STANDBY, close the ports and the loop; idempotent.

        Call :meth:`safe_stop` first unless the joint may coast (the loop disengages at once here).
        """
        if self._closed:
            return
        self._closed = True
        self._halting = True
        tasks, self._tasks = self._tasks, []
        self._feedback_due.set()
        await cancel_and_wait(tasks)
        await self._udral.close()
        if self._drive is not None:
            await self._drive.stop()
            self._drive = None
        if self._setpoint_port is not None:
            self._setpoint_port.close()
        if self._follower is not None:
            self._follower.close()
        for port in (self._readiness_sub, self._start_sub, *self._pubs.values()):
            if port is not None:
                port.close()
        self._pubs.clear()
        if self._loop is not None:
            self._loop.close()

    async def _pass(self, seconds: float) -> None:
        """Let ``seconds`` of the axis's time pass (the simulated clock is advanced here)."""
        if self.loop_clock == "simulated":
            self.advance(seconds)
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(seconds)

    def now(self) -> float:
        """The axis's time [second]: ``time.monotonic``, or the loop's simulated time."""
        if self.loop_clock == "simulated":
            return self._loop.sample().time_s if self._loop is not None else 0.0
        return time.monotonic()

    def advance(self, seconds: float) -> None:
        """Simulated clock only: run the loop for ``seconds``, supervising every :data:`SUPERVISE_PERIOD_S`."""
        remaining = seconds
        while remaining > 1e-9:
            step = min(SUPERVISE_PERIOD_S, remaining)
            self.loop.advance(step)
            remaining -= step
            self.supervise()

    # ---------------------------------------------------------------- inputs

    async def _setpoint_task(self) -> None:
        """Setpoints from the raw subject: what queued up is judged in order, only the newest valid one applied."""
        port = self._setpoint_port
        assert port is not None
        try:
            while not self._closed:
                try:
                    newest: Received | None = None
                    for transfer in await port.receive(1.0):
                        decoded = decode_setpoint(transfer, port.zero_padded)
                        if isinstance(decoded, str):
                            self.counters.setpoints_bad_payload += 1
                            self._intake.reject(decoded)
                            continue
                        at_s = self.now() if self.loop_clock == "simulated" else reception_time_s(transfer)
                        newest = self._intake.accept(decoded, at_s, transfer.source_node_id) or newest
                    if newest is not None:
                        self.apply(newest)
                    self._watch_publishers(port.publishers(time.monotonic()))
                    self.counters.setpoints_coalesced = port.coalesced
                except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
                    raise
                except Exception:  # A bug here must not end the intake: log it and keep going.
                    _logger.exception("%sSetpoint intake failed", self.names.label)
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass

    def _watch_publishers(self, count: int) -> None:
        """Publishers seen on the setpoint subject in the last second; more than one is a warning (on change)."""
        before, self.counters.setpoint_publishers = self.counters.setpoint_publishers, count
        if count > 1 and before <= 1:
            self._diag.report(f"{self.names.label}{count} publishers on the setpoint subject: they fight each other")
        elif count <= 1 < before:
            self._diag.report(f"{self.names.label}one publisher on the setpoint subject again", Severity.INFO)

    def set_collision(self, collided: bool) -> None:
        """Another node uses our node-ID: stop and refuse setpoints until that is over (or the node restarts)."""
        self._collided = collided
        if collided:
            self.gate.on_error("node-ID collision: another node uses this node-ID", ErrorCode.NODE_ID_COLLISION)
            if self._loop is not None:
                self._loop.stop()
        elif self.gate.error_code is ErrorCode.NODE_ID_COLLISION:
            self.gate.on_recovered("the node-ID collision is over; waiting for a setpoint")

    def _on_udral_setpoint(self, fields: Fields | str, meta: pycyphal.transport.TransferFrom) -> None:
        """A UDRAL setpoint (single or group): the same intake, gate and loop as the Telega one."""
        if isinstance(fields, str):
            self._intake.reject(fields)
            return
        at_s = self.now() if self.loop_clock == "simulated" else reception_time_s(meta)
        position, velocity, force, v_lim, a_lim = fields
        received = self._intake.accept_fields(position, velocity, force, v_lim, a_lim, 0.0, at_s,
                                              meta.source_node_id, zero_velocity_holds=True)
        if received is not None:
            self.apply(received)
            self._udral.applied()  # Published after every setpoint, even in STANDBY (the service's rule).

    def _on_udral_readiness(self, value: int, meta: pycyphal.transport.TransferFrom) -> None:
        self.gate.on_readiness(value, self.now() if self.loop_clock == "simulated" else reception_time_s(meta))
        self._udral.applied()

    def _udral_state(self) -> tuple[bool, int, int]:
        """(engaged, health, error count) for the UDRAL publications."""
        s = self.loop.sample()
        errors = self.counters.setpoints_rejected + self._registry.refused_writes + s.error_count
        return self.gate.update(self.now()) is ServoState.ENGAGED, int(self.health()), errors

    async def _on_readiness(self, msg: zubax.service.Readiness_1_0, meta: pycyphal.transport.TransferFrom) -> None:
        received_at_s = self.now() if self.loop_clock == "simulated" else reception_time_s(meta)
        self.gate.on_readiness(int(msg.value), received_at_s)

    async def _on_start(
        self, msg: uavcan.time.SynchronizedTimestamp_1_0, meta: pycyphal.transport.TransferFrom
    ) -> None:
        """A coordinated start: its synchronized time mapped onto the loop's clock (both read now)."""
        received_at_s = self.now() if self.loop_clock == "simulated" else reception_time_s(meta)
        at_sync_s = int(msg.microsecond) * 1e-6 - self._timesync.offset_s  # On this node's system clock.
        if self.loop_clock == "simulated":
            at_s = self.now() + (at_sync_s - time.time())
        else:
            at_s = at_sync_s - system_minus_monotonic_s()
        self.start_staged(at_s, received_at_s, meta.source_node_id)

    def apply(self, received: Received) -> bool:
        """The one place where a setpoint commands the loop; returns True if it was applied (counted either way).

        With a start subject (:mod:`servo_node.staging`) a setpoint other than the active one waits for its start."""
        sp, rx = received.setpoint, received.received_at_s
        if not self._may_apply(sp):
            return False
        if self._staging is None:
            return self._command(sp, rx, rx)
        # Only a command in force is active: after an expiry or a stop even the same setpoint waits for a start.
        active = self._setpoint if self.gate.update(self.now()) is ServoState.ENGAGED else None
        got = self._staging.offer(sp, rx, active, received.source)
        if got is None:
            self.counters.setpoints_staged += 1
            return False
        if isinstance(got, Start):  # Its start came first.
            self.counters.setpoints_staged += 1
            return self._command_start(got)
        return self._command(sp, rx, got)

    def start_staged(self, at_s: float, received_at_s: float, source: int | None) -> bool:
        """A start message from node ``source`` for ``at_s`` (loop clock), received at ``received_at_s``: apply the
        staged setpoint with its plan starting at ``at_s``; returns True if it was applied. A refusal is counted and
        reported once per reason (``sys.status`` ``refused`` shows the latest)."""
        if self._staging is None:
            return False
        started = self._staging.start(at_s, received_at_s, source)
        if started is None:
            return False  # It waits for its setpoint (which left before it, on another subject).
        if isinstance(started, str):
            self._refuse_start(started)
            return False
        self._reported_start_refusal = ""
        return self._may_apply(started.setpoint) and self._command_start(started)

    def _command_start(self, start: Start) -> bool:
        """A staged setpoint released by its start; counted in ``starts`` if the gate let it through."""
        applied = self._command(start.setpoint, start.received_at_s, start.at_s)
        if applied:
            self.counters.starts += 1
        return applied

    def _refuse_start(self, reason: str) -> None:
        """Count a start that applied nothing; report it once per reason."""
        self.counters.starts_refused += 1
        self.counters.last_refusal = f"start: {reason}"
        if reason != self._reported_start_refusal:
            self._reported_start_refusal = reason
            self._diag.report(f"{self.names.label}start refused: {reason}")

    def _may_apply(self, sp: Setpoint) -> bool:
        """False (counted) if no setpoint may command the loop now: a follower, not running, a persisting error."""
        c = self.counters
        if self._follower is not None:
            self._follower.ignore_setpoint(c)  # It moves with its leader only: a stray publisher can't fight it.
            return False
        if self._loop is None or self._halting:
            c.setpoints_ignored_unarmed += 1  # Still initialising, or stopping for good.
            return False
        state = self.gate.update(self.now())
        if self._collided or (state is ServoState.ERROR and self._error_persists(sp)):
            c.setpoints_ignored_error += 1
            return False
        return True

    def _command(self, sp: Setpoint, received_at_s: float, at_s: float) -> bool:
        """Through the arming gate (deadman from ``received_at_s``) to the loop, to take effect at ``at_s``."""
        c = self.counters
        if not self.gate.on_setpoint(received_at_s):
            c.setpoints_ignored_unarmed += 1
            return False
        c.setpoints_accepted += 1
        # Every valid setpoint goes to the loop with its reception time (the loop's deadman counts from it); the
        # loop re-plans only a different one (or after expiry, standby or an error).
        if sp != self._setpoint:
            self._failed_setpoint = None
        self._setpoint = sp
        assert self._loop is not None
        self._loop.command(sp, at_s)
        self._feedback_due.set()
        return True

    def _on_leader_sample(self, received_at_s: float) -> None:
        """Mimic: a leader sample (engaged, healthy leader) arms the gate as a setpoint does, and engages the loop
        in mimic mode if it does not follow already (it gears in from where the joint is, without a step)."""
        f, loop = self._follower, self._loop
        if f is None or loop is None or self._halting or self._collided or not f.leader_ok:
            return
        if self.gate.update(self.now()) is ServoState.ERROR and self._loop_refuses_motion():
            return
        if not self.gate.on_setpoint(received_at_s):
            return
        s = loop.sample()
        if not (s.engaged and s.mode == L.MODE_MIMIC):
            self.counters.setpoints_accepted += 1
            loop.follow(f.limits(), received_at_s)
            self._feedback_due.set()

    def _loop_refuses_motion(self) -> bool:
        """The drive is silent or its feedback distrusted, or a stop is still braking past its bound: the loop
        refuses motion until that clears (so the gate must not report ENGAGED for a setpoint the loop drops)."""
        s = self.loop.sample()
        return s.error in (ErrorCode.DRIVE_LOST, ErrorCode.STOP_TIMEOUT) or s.feedback_distrusted != 0

    def _error_persists(self, sp: Setpoint) -> bool:
        """True if this setpoint cannot end the error: the loop would refuse it, or it is the one that failed."""
        if self._loop_refuses_motion() or (self._drive is not None and self._drive.fault() is not None):
            return True  # A drive fault holds until a re-arm.
        code = self.gate.error_code
        if code in (ErrorCode.INFEASIBLE, ErrorCode.NUMERICAL_FAILURE):
            return sp == self._failed_setpoint  # The very setpoint that failed: it would fail again.
        return False

    # ---------------------------------------------------------------- supervision

    def supervise(self) -> LoopSample:
        """Act on edges: a fault the loop counted, a drive that reports again, the gate's timeouts."""
        loop = self.loop
        now = self.now()
        s = self._last_sample = loop.sample()
        gate = self.gate
        if s.error_count > self._seen_error_count:
            self._seen_error_count = s.error_count
            if s.error is not ErrorCode.NONE:
                code = s.error
                if code in (ErrorCode.INFEASIBLE, ErrorCode.NUMERICAL_FAILURE):
                    self._failed_setpoint = self._setpoint
                gate.on_error(code.text, code)
                self._diag.report(f"{self.names.label}servo error: {code.text}")
                # The loop stops on its own faults (and keeps a silent drive braking); nothing to command here.
        drive_fault = self._supervise_drive()
        if drive_fault is not None:
            pass  # The drive's own report holds the error until a re-arm.
        elif gate.error_code is ErrorCode.DRIVE_LOST and s.error is ErrorCode.NONE:
            if gate.update(now) is ServoState.ERROR:
                gate.on_recovered("the drive reports again; waiting for a setpoint")
                self._diag.report(f"{self.names.label}drive feedback restored", Severity.INFO)
        if self._follower is not None:
            self._follower.supervise(now)
        self._report_peers()
        if self._staging is not None and (lapsed := self._staging.lapsed(now)) is not None:
            self._refuse_start(lapsed)
        state = gate.update(now)
        following = s.engaged and s.mode == L.MODE_MIMIC
        if state is not ServoState.ENGAGED and self._state is ServoState.ENGAGED:
            if state is ServoState.EXPIRED and following:
                self._backstop_at = now + LOST_LEADER_GRACE_S  # The loop's own lost-leader stop comes first.
            else:
                loop.stop(immediate=self.registers.flag("servo.stop.disengage_immediately"))
        if now >= self._backstop_at:
            self._backstop_at = math.inf
            if following and state is not ServoState.ENGAGED:
                loop.stop(immediate=self.registers.flag("servo.stop.disengage_immediately"))
        if state is not self._state:
            _logger.info("%sServo %s -> %s: %s", self.names.label, self._state, state, gate.reason)
            self._state = state
            self._feedback_due.set()
        return s

    def _report_peers(self) -> None:
        """What the pinned peers' guards noticed: the drive's (always), the time master's (node-wide, while a
        follower or a staged start depends on synchronized time)."""
        for note in self._drive.take_notes() if self._drive is not None else []:
            self._diag.report(f"{self.names.label}{note}")
        notes = self._timesync.take_notes()
        if self._follower is not None or self._staging is not None:
            for note in notes:
                self._diag.report(note)

    def _supervise_drive(self) -> tuple[ErrorCode, str] | None:
        """The drive's own reports: its warnings to the diagnostics; its fault (code and text) as the axis's error
        (once per fault), cleared only by an explicit re-arm (:meth:`rearm`)."""
        drive = self._drive
        if drive is None:
            return None
        for note in drive.events():
            self._diag.report(f"{self.names.label}drive: {note}")
        fault = drive.fault()
        if fault is not None and time.monotonic() >= self._rearm_check_at:
            self._rearm_check_at = time.monotonic() + REARM_POLL_S
            count = self.registers.real("servo.drive.rearm")
            if count != self._rearm_count:  # The user wrote servo.drive.rearm: the same as the re-arm command.
                self._rearm_count = count
                drive.rearm()
        if fault is not None and (fault != self._drive_fault or self.gate.error_code is not fault[0]):
            # Also when an error of the loop took its place: a drive that never answered (a failed bring-up) is
            # silent too, and the loop's drive-lost must not hide the drive's own reason.
            self.gate.on_error(fault[1], fault[0])
            if fault != self._drive_fault:
                self._diag.report(f"{self.names.label}servo error: {fault[1]}")
        elif fault is None and self._drive_fault is not None and self.gate.error_code is self._drive_fault[0]:
            self.gate.on_recovered("the drive is back (re-armed, or it answers now); waiting for a setpoint")
            self._diag.report(f"{self.names.label}drive fault cleared", Severity.INFO)
        self._drive_fault = fault
        return fault

    def rearm(self) -> bool:
        """Reset a drive fault (the user's explicit command); False if this axis's drive has nothing to re-arm."""
        return self._drive is not None and self._drive.rearm()

    def home(self) -> bool:
        """Home the drive (the user's explicit command), only while the loop does not command it."""
        return self._drive is not None and not self.moving and self._drive.home()

    @property
    def supervised(self) -> bool:
        """True while :meth:`supervise_due` has work: the loop runs and the axis is not closed."""
        return self._loop is not None and not self._closed

    async def supervise_due(self, now: float, slack: float = 0.0) -> float:
        """One pass of the periodic work the node's one supervision task does for every axis: :meth:`supervise`
        every :data:`SUPERVISE_PERIOD_S`, ``status`` at 1 Hz and ``dynamics`` at ``servo.dynamics_rate`` (each only
        when due, and only if its port is configured).

        :param now: ``time.monotonic()`` [second] of this pass.
        :param slack: supervision and ``status`` due within this much after ``now`` [second] are done now, and the
            next supervision counts from ``now``: the axes of a node fall into step and share one wake-up.
        :returns: when this axis is due next [second, ``time.monotonic``].
        """
        try:
            s = None
            if now + slack >= self._next_supervise:
                s = self.supervise()
                self._next_supervise = now + SUPERVISE_PERIOD_S
            if now + slack >= self._next_status:
                self._next_status = max(self._next_status + 1.0, now)
                pub = self._pubs.get("status")
                if pub is not None:
                    await pub.publish(self._status_message(s if s is not None else self.loop.sample()))
            if now >= self._next_dynamics:
                self._next_dynamics = max(self._next_dynamics + self._dynamics_period, now)
                s = s if s is not None else self.loop.sample()
                await self._pubs["dynamics"].publish(
                    dynamics_message(s, self.loop_clock == "real", self._timesync.offset_s))
        except pycyphal.transport.ResourceClosedError:
            raise
        except Exception:  # A bug here must not end supervision: log it and keep going.
            _logger.exception("%sSupervision failed", self.names.label)
        return min(self._next_supervise, self._next_status, self._next_dynamics)

    async def _feedback_task(self) -> None:
        """``feedback`` right after each applied setpoint and state change, and at least once per second."""
        try:
            while not self._closed:  # Also ends it if a cancellation was swallowed inside a publish.
                try:
                    await asyncio.wait_for(self._feedback_due.wait(), timeout=1.0)
                except TimeoutError:
                    pass
                self._feedback_due.clear()
                engaged = self.gate.update(self.now()) is ServoState.ENGAGED
                await self._pubs["feedback"].publish(
                    feedback_message(engaged, self.health(), self.loop.sample().demand_factor))
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass

    def _status_message(self, s: LoopSample) -> zubax.service.actuator.Status_1_0:
        errors = self.counters.setpoints_rejected + self._registry.refused_writes + s.error_count
        in_error = self.gate.update(self.now()) is ServoState.ERROR
        return status_message(s, self.gate.error_code, in_error, errors)

    # ---------------------------------------------------------------- views

    def health(self) -> Health:
        """WARNING in error, ADVISORY for a second after a rejected setpoint, else NOMINAL."""
        if self.gate.update(self.now()) is ServoState.ERROR:
            return Health.WARNING
        if time.monotonic() - self.counters.last_rejection_at < 1.0:
            return Health.ADVISORY
        return Health.NOMINAL

    def status(self) -> dict[str, Any]:
        """``sys.status`` (see :func:`~servo_node.axis._reports.status_view`)."""
        g = self.gate
        s = self._last_sample
        expired = s is not None and s.expired
        expired_after_s = s.expired_after_s if s is not None and expired else g.expired_after_s
        expired_at_s = math.nan
        if s is not None and expired and self.loop_clock == "real":
            expired_at_s = system_minus_monotonic_s() + s.expired_at_s  # The loop's clock is time.monotonic.
        state = g.update(self.now())
        extra: dict[str, Any] = dict(self._drive.peers()) if self._drive is not None else {}
        if self._timesync.pinned is not None or self._timesync.master_node_id is not None:
            extra["time_master"] = self._timesync.master_node_id
        if self.counters.last_refusal:
            extra["refused"] = self.counters.last_refusal
        if self._follower is None:
            return status_view(state, g.reason, g.error_code, self._setpoint, expired_after_s, expired_at_s, extra)
        # A follower: its motion is the relation (no setpoint); the lag flag and count, and why it stopped.
        m = MimicSample.read(self.loop.out) if self._loop is not None else None
        reason = self._follower.status_reason(m, state is ServoState.ENGAGED, g.reason)
        extra.update(lag=bool(m.lag) if m else False, lags=m.lag_count if m else 0)
        return status_view(state, reason, g.error_code, None, expired_after_s, expired_at_s, extra)

    def mimic(self) -> dict[str, Any]:
        """``sys.mimic`` (a follower only; see :meth:`~servo_node.axis._follower.Follower.view`)."""
        assert self._follower is not None
        if self._loop is None:
            return {"leader": None}
        s = self._loop.sample()
        following = s.engaged and s.mode == L.MODE_MIMIC
        return self._follower.view(MimicSample.read(self._loop.out), following, self.counters.setpoints_ignored_mimic)

    def motion(self) -> dict[str, Any]:
        """``sys.motion`` (see :func:`~servo_node.axis._reports.motion_view`)."""
        loop = self._loop
        if loop is None:
            return motion_view(None, None, self.loop_clock)
        return motion_view(loop.sample(), loop.link_stats(), self.loop_clock)

    def reference(self) -> list[float]:
        """``sys.reference`` (see :func:`~servo_node.axis._reports.reference_view`)."""
        return reference_view(self._loop.sample() if self._loop is not None else None)

    def counts(self) -> dict[str, Any]:
        """``sys.counters`` (see :func:`~servo_node.axis._reports.counters_view`)."""
        return counters_view(self.counters, self._registry.refused_writes, self._restarts())

    def events(self) -> dict[str, Any]:
        """``sys.events`` (see :func:`~servo_node.axis._reports.events_view`)."""
        s, ts = self._last_sample, self._timesync
        drive = self._drive.peers() if self._drive is not None else {}
        e = EventCounts(
            loop_errors=s.error_count if s is not None else 0,
            feedback_faults=s.feedback_faults if s is not None else 0,
            commands_clipped=s.commands_clipped if s is not None else 0,
            foreign_drive=int(drive.get("foreign", 0)),
            master_changes=ts.master_changes,
            clock_steps=ts.clock_steps,
        )
        return events_view(self.counters, e, time.monotonic() - self._started_at_s)


def stop_deadline_s(s: LoopSample, config: LoopConfig) -> float:
    """Loop time by which a stop the loop has taken must have ended: the bound it fixed up front, and a margin."""
    start_s = s.plan_start_s if math.isfinite(s.plan_start_s) else s.time_s
    bound_s = s.stop_bound_s if math.isfinite(s.stop_bound_s) else config.stop_bound_s()
    return max(start_s + bound_s, s.time_s) + STOP_MARGIN_S


def _subscriber(node: pycyphal.application.Node, dtype: Any, name: str) -> pycyphal.presentation.Subscriber[Any] | None:
    try:
        return node.make_subscriber(dtype, name)
    except pycyphal.application.PortNotConfiguredError:
        return None


def _publisher(node: pycyphal.application.Node, dtype: Any, name: str) -> pycyphal.presentation.Publisher[Any] | None:
    try:
        return node.make_publisher(dtype, name)
    except pycyphal.application.PortNotConfiguredError:
        return None
