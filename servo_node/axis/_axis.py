"""One servo axis: its ports, arming gate, control loop and drive, and its lifecycle (start, safe stop, close).

An :class:`Axis` lives as long as one pycyphal node (the shell re-creates it on RESTART; its counters survive).
Nothing here computes motion: setpoints are validated (:mod:`._intake`), gated (:mod:`servo_node.arming`) and
handed to the :class:`~servo_node.control.ControlLoop`, which does all numerics in its own thread.

The axis is three parts over one shared state (:mod:`._state`): the setpoint path (:mod:`._setpoints`: every
command in, through the gate, to the loop), the supervision (:mod:`._supervision`: the edges it acts on, and
``status``, ``dynamics`` and ``feedback`` out) and the views (:mod:`._views`: health and the ``sys.*``
registers). This module builds them around the ports and runs the lifecycle; its other methods hand on to them.

State changes are edges: an error is reported once when the loop counts it, a state change is logged once, and
an error holds while its cause persists (a silent drive, the very setpoint that was infeasible); the drive
reporting again ends a drive error in STANDBY.

Clocks: with ``loop_clock="real"`` the axis runs on ``time.monotonic``; with ``"simulated"`` the axis's time is
the loop's simulated time, which only :meth:`Axis.advance` moves (deterministic tests).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pycyphal
import pycyphal.application
import uavcan.time
import zubax.physics.dynamics
import zubax.service
import zubax.service.actuator
from pycyphal.application.heartbeat_publisher import Health

from cyphal_common.errors import ConfigurationError
from cyphal_common.tasks import cancel_and_wait
from cyphal_common.timesync import TimeSync

from ..arming import ArmingGate
from ..control import ControlLoop, ControlThread, LoopConfig, LoopSample
from ..diagnostics import Diagnostics
from ..drive import Drive
from ..errors import ErrorCode
from ..registers import NODE_ANY, AxisNames, AxisRegisters, ServoRegistry
from ..staging import Staging
from ._config import drive_from_registers, loop_config, setpoint_floors
from ._counters import AxisCounters
from ._follower import Follower
from ._intake import Received, SetpointIntake, SetpointPort
from ._interfaces import TELEGA
from ._setpoints import SetpointPath
from ._state import AxisState
from ._supervision import SUPERVISE_PERIOD_S, Supervision
from ._udral_face import UdralFace
from ._views import AxisViews

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
        started_at_s = time.monotonic() if started_at_s is None else started_at_s
        self._control_thread = control_thread
        self.registers = AxisRegisters(registry, names)
        self.registers.declare()
        self.counters = counters
        self.loop_clock = loop_clock
        self._node = node
        self._diag = diagnostics
        intake = SetpointIntake(self.registers, counters, diagnostics)
        setpoint_port: SetpointPort | None
        try:
            setpoint_port = SetpointPort(node, names.port("setpoint_servo"))
        except pycyphal.application.PortNotConfiguredError:
            setpoint_port = None
        self._readiness_sub = _subscriber(node, zubax.service.Readiness_1_0, names.port("readiness"))
        self._start_sub = _subscriber(node, uavcan.time.SynchronizedTimestamp_1_0, names.port("motion_start"))
        pubs: dict[str, pycyphal.presentation.Publisher[Any]] = {}
        for name, dtype in _PUBLICATIONS.items():
            pub = _publisher(node, dtype, names.port(name))
            if pub is not None:
                pubs[name] = pub
        udral = UdralFace(node, names, self.registers.text("servo.drive.kind") == "rotational",
                          int(self.registers.real("servo.udral.group_index")),
                          self.registers.text("servo.udral.group_quantity"),
                          self.registers.real("servo.udral.bus_voltage"))
        gated = self._readiness_sub is not None or udral.gates
        self.gate = ArmingGate(gated, self.registers.real("servo.deadman_timeout"))
        staging = Staging(self.gate.deadman_timeout_s) if self._start_sub is not None else None
        master = int(registry.real("servo.time_sync.master_node_id"))
        timesync = TimeSync.of(node, registry.text("servo.time_sync"), None if master == NODE_ANY else master)
        # The parts read the time through the axis's own now(), as the axis itself does.
        self._s = AxisState(names, self.registers, registry, counters, diagnostics, loop_clock, lambda: self.now(),
                            intake, self.gate, staging, udral, timesync)
        self._path = SetpointPath(self._s, setpoint_port)
        self._views = AxisViews(self._s, restarts, started_at_s)
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
        intake.floors = setpoint_floors(self.config.envelope)
        self._views.serve()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._supervision = Supervision(self._s, self._path, pubs, self._views.health)
        self._s.follower = Follower.create(
            node, names, self.registers, timesync, loop_clock == "real", diagnostics, self.now
        )
        if self._s.follower is not None:
            self._views.serve_mimic()
            if self._s.follower.fault:
                diagnostics.report(f"{names.label}{self._s.follower.fault}")

    # ---------------------------------------------------------------- lifecycle

    @property
    def loop(self) -> ControlLoop:
        """The control loop (exists from :meth:`start` on)."""
        return self._s.started_loop()

    @property
    def moving(self) -> bool:
        """True while the loop commands the drive (moving, holding, or stopping)."""
        return self._s.loop is not None and self._s.loop.sample().engaged

    @property
    def _drive(self) -> Drive | None:
        """The drive (from :meth:`start` until :meth:`close`)."""
        return self._s.drive

    @property
    def _follower(self) -> Follower | None:
        """A follower's leader input (None unless ``mimic_leader`` is configured)."""
        return self._s.follower

    @property
    def _timesync(self) -> TimeSync:
        """The node's time synchronisation."""
        return self._s.timesync

    async def start(self) -> None:
        """Load the loop's kernels (off the event loop), start the loop, the drive link and the tasks; idempotent."""
        s = self._s
        if self._started or s.closed:
            return
        self._started = True
        try:
            drive = s.drive = drive_from_registers(self.registers, self._node, self.names.port(""))
        except ConfigurationError as ex:
            self._disable(str(ex))  # No drive, no loop: sys.status says why; nothing can move.
            return
        # Loading (or compiling) the numba kernels takes a while; off the event loop, heartbeats keep going.
        loop = await asyncio.get_running_loop().run_in_executor(None, self._start_loop, drive)
        s.loop = loop
        if s.closed:  # Closed while the kernels loaded.
            loop.close()
            return
        s.last_sample = loop.sample()
        drive.start()
        if self._readiness_sub is not None:
            self._readiness_sub.receive_in_background(self._path.on_readiness)
        if self._start_sub is not None:
            self._start_sub.receive_in_background(self._path.on_start)
        s.udral.start(self._path.on_udral_setpoint, self._path.on_udral_readiness, loop.sample,
                      self._views.udral_state)
        if s.follower is not None:
            s.follower.on_sample = self._path.on_leader_sample
            s.follower.on_state = s.feedback_due.set
            s.follower.start(loop.arrays.lead)
        self._supervision.start()
        self._tasks = []
        # Without the feedback port its task would wake for every setpoint to build nothing.
        if "feedback" in self._supervision.pubs:
            feedback = self._supervision.feedback_task()
            self._tasks.append(asyncio.create_task(feedback, name=f"{self.names.label}feedback"))
        if self._path.port is not None:
            self._tasks.append(asyncio.create_task(self._path.run(), name=f"{self.names.label}setpoints"))

    def _disable(self, fault: str) -> None:
        """This axis cannot actuate as configured: an error with the reason, every setpoint refused."""
        if not self.fault:
            self.fault = fault
            self._s.intake.fault = fault
            self.gate.on_error(fault, ErrorCode.DRIVE_INCAPABLE)
            self._diag.report(f"{self.names.label}servo disabled: {fault}")

    def _start_loop(self, drive: Drive) -> ControlLoop:
        """Build the loop and attach it to the control thread (in an executor: the kernels load here)."""
        loop = ControlLoop(self.config, drive, clock=self.loop_clock)
        loop.start(self._control_thread)
        return loop

    async def safe_stop(self, reason: str) -> None:
        """Bring the joint to rest before the axis goes away: no setpoint applies from now on, the loop makes its
        jerk-limited stop (and holds until the drive is at rest), then the drive gets STANDBY.

        Waits until the loop reports the joint disengaged, or the stop's bound passes (then the force is removed
        and that is reported).
        """
        self._s.halting = True
        self.gate.halt(f"stopping: {reason}")
        loop = self._s.loop
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
        if self._s.drive is not None:
            await self._s.drive.stop()  # The loop is disengaged: STANDBY goes out to the drive.

    async def close(self) -> None:
        """Cancel and await the tasks, give the drive STANDBY, close the ports and the loop; idempotent.

        Call :meth:`safe_stop` first unless the joint may coast (the loop disengages at once here).
        """
        s = self._s
        if s.closed:
            return
        s.closed = True
        s.halting = True
        tasks, self._tasks = self._tasks, []
        s.feedback_due.set()
        await cancel_and_wait(tasks)
        await s.udral.close()
        if s.drive is not None:
            await s.drive.stop()
            s.drive = None
        if self._path.port is not None:
            self._path.port.close()
        if s.follower is not None:
            s.follower.close()
        pubs = self._supervision.pubs
        for port in (self._readiness_sub, self._start_sub, *pubs.values()):
            if port is not None:
                port.close()
        pubs.clear()
        if s.loop is not None:
            s.loop.close()

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
            return self._s.loop.sample().time_s if self._s.loop is not None else 0.0
        return time.monotonic()

    def advance(self, seconds: float) -> None:
        """Simulated clock only: run the loop for ``seconds``, supervising every :data:`SUPERVISE_PERIOD_S`."""
        remaining = seconds
        while remaining > 1e-9:
            step = min(SUPERVISE_PERIOD_S, remaining)
            self.loop.advance(step)
            remaining -= step
            self.supervise()

    # ---------------------------------------------------------------- the setpoint path (._setpoints)

    def set_collision(self, collided: bool) -> None:
        """Another node uses our node-ID: stop and refuse setpoints until that is over (or the node restarts)."""
        self._path.set_collision(collided)

    def apply(self, received: Received, interface: str = TELEGA) -> bool:
        """The one place where a setpoint commands the loop (see :meth:`._setpoints.SetpointPath.apply`)."""
        return self._path.apply(received, interface)

    def start_staged(self, at_s: float, received_at_s: float, source: int | None) -> bool:
        """A start message for ``at_s`` (see :meth:`._setpoints.SetpointPath.start_staged`)."""
        return self._path.start_staged(at_s, received_at_s, source)

    # ---------------------------------------------------------------- supervision (._supervision)

    def supervise(self) -> LoopSample:
        """Act on edges: a fault the loop counted, a drive that reports again, the gate's timeouts."""
        return self._supervision.supervise()

    def rearm(self) -> Future[bool] | None:
        """Reset a drive fault (the user's explicit command): a future that holds whether the drive is ready again
        under our control (:meth:`~servo_node.drive.Drive.rearm`); None if this axis's drive has nothing to re-arm."""
        if self._s.drive is None:
            return None
        self._supervision.rearm()
        return self._s.drive.rearm()

    def home(self) -> bool:
        """Home the drive (the user's explicit command), only while the loop does not command it."""
        return self._s.drive is not None and not self.moving and self._s.drive.home()

    @property
    def supervised(self) -> bool:
        """True while :meth:`supervise_due` has work: the loop runs and the axis is not closed."""
        return self._s.loop is not None and not self._s.closed

    async def supervise_due(self, now: float, slack: float = 0.0) -> float:
        """One pass of the periodic work the node's one supervision task does for every axis: :meth:`supervise`
        every :data:`SUPERVISE_PERIOD_S`, ``status`` at 1 Hz and ``dynamics`` at ``servo.dynamics_rate`` (each only
        when due, and only if its port is configured).

        :param now: ``time.monotonic()`` [second] of this pass.
        :param slack: supervision and ``status`` due within this much after ``now`` [second] are done now, and the
            next supervision counts from ``now``: the axes of a node fall into step and share one wake-up.
        :returns: when this axis is due next [second, ``time.monotonic``].
        """
        return await self._supervision.supervise_due(now, slack)

    # ---------------------------------------------------------------- views (._views)

    def health(self) -> Health:
        """WARNING in error, ADVISORY for a second after a rejected setpoint, else NOMINAL."""
        return self._views.health()

    def status(self) -> dict[str, Any]:
        """``sys.status`` (see :func:`~servo_node.axis._reports.status_view`)."""
        return self._views.status()

    def mimic(self) -> dict[str, Any]:
        """``sys.mimic`` (a follower only; see :meth:`~servo_node.axis._follower.Follower.view`)."""
        return self._views.mimic()

    def motion(self) -> dict[str, Any]:
        """``sys.motion`` (see :func:`~servo_node.axis._reports.motion_view`)."""
        return self._views.motion()

    def reference(self) -> list[float]:
        """``sys.reference`` (see :func:`~servo_node.axis._reports.reference_view`)."""
        return self._views.reference()

    def counts(self) -> dict[str, Any]:
        """``sys.counters`` (see :func:`~servo_node.axis._reports.counters_view`)."""
        return self._views.counts()

    def events(self) -> dict[str, Any]:
        """``sys.events`` (see :func:`~servo_node.axis._reports.events_view`)."""
        return self._views.events()


def stop_deadline_s(s: LoopSample, config: LoopConfig) -> float:
    """Loop time by which a stop the loop has taken must have ended: the bound it fixed up front, and a margin."""
    start_s = s.plan_start_s if math.isfinite(s.plan_start_s) else s.time_s
    bound_s = s.stop_bound_s if math.isfinite(s.stop_bound_s) else config.stop_bound_s()
    return max(start_s + bound_s, s.time_s) + STOP_MARGIN_S


def _subscriber(node: pycyphal.application.Node, dtype: Any, name: str) -> pycyphal.presentation.Subscriber[Any] | None:
    """A subscriber on the port ``name``; None if it is not configured."""
    try:
        return node.make_subscriber(dtype, name)
    except pycyphal.application.PortNotConfiguredError:
        return None


def _publisher(node: pycyphal.application.Node, dtype: Any, name: str) -> pycyphal.presentation.Publisher[Any] | None:
    """A publisher on the port ``name``; None if it is not configured."""
    try:
        return node.make_publisher(dtype, name)
    except pycyphal.application.PortNotConfiguredError:
        return None
