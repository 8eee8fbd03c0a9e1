"""The Cyphal side of the servo: ports, registers, arming, commands, and what the node publishes.

:class:`ServoNode` owns one pycyphal node at a time (RESTART re-creates it over the same registry) and one
:class:`~servo_node.control_loop.ControlLoop`, which does all numerics in its own thread. Nothing here computes
motion: setpoints are validated (:mod:`servo_node.setpoint`), gated (:mod:`servo_node.arming`) and handed over.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pycyphal
import pycyphal.application
import uavcan.diagnostic
import uavcan.node
import uavcan.primitive
import zubax.physics.dynamics
import zubax.physics.kinematics
import zubax.service
import zubax.service.actuator
import zubax.telega
from pycyphal.application import register
from pycyphal.application.heartbeat_publisher import Health, Mode

from .arming import ArmingGate, ServoState
from .config import drive_from_registers, loop_config, setpoint_floors
from .control import ControlLoop, LoopConfig, LoopSample
from .drive import Drive
from .errors import ConfigurationError, ErrorCode
from .registers import ServoRegistry
from .setpoint import Floors, ProfileLimits, Rejected, Setpoint, interpret

NODE_NAME = "io.github.cyphal_servo.servo_node"
"""Reverse-domain node name reported by uavcan.node.GetInfo."""

UNSET_PORT_ID = 0xFFFF
"""A port-ID register holding this value leaves the port off."""

_logger = logging.getLogger(__name__)


@dataclass
class Counters:
    """Event counts reported in ``sys.status``."""

    setpoints_accepted: int = 0
    setpoints_rejected: int = 0
    setpoints_ignored_unarmed: int = 0
    last_rejection: str = ""
    last_rejection_at: float = -math.inf
    restarts: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class ServoNode:
    """A servo controller node: construct, then ``await run()``; :meth:`close` (or cancelling) stops it.

    :param registry_file: register file; created if missing; None keeps registers in memory.
    :param environment: register overrides (``UAVCAN__*``, ``SERVO__*``, ``SIM__*``); default ``os.environ``.
    :param loop_clock: ``"real"`` runs the control loop against the monotonic clock in its own thread;
        ``"simulated"`` leaves the loop to be stepped by the caller (tests with deterministic timing).
    """

    def __init__(
        self,
        registry_file: str | Path | None,
        environment: Mapping[str, str] | None = None,
        loop_clock: str = "real",
    ) -> None:
        self.registry = ServoRegistry(registry_file, environment, on_refused=self._on_refused_write)
        self.counters = Counters()
        self.loop_clock = loop_clock
        self._node: pycyphal.application.Node | None = None
        self._loop: ControlLoop | None = None
        self._drive: Drive | None = None
        self._floors = Floors()
        self._fault = ""
        """Why the servo cannot actuate at all (configuration); empty when it can."""
        self._gate = ArmingGate(False, 0.5)
        self._restart = asyncio.Event()
        self._closed = False
        self._started_at = time.monotonic()
        self._last_sample: LoopSample | None = None
        self._setpoint: Setpoint | None = None
        self._error_code = 0
        self._pub: dict[str, pycyphal.presentation.Publisher[Any]] = {}
        self._feedback_due = asyncio.Event()
        self._pending_diagnostics: list[str] = []
        self.ready = asyncio.Event()
        """Set when a node is up and operational (and cleared while restarting)."""

    # ---------------------------------------------------------------- lifecycle

    @property
    def node(self) -> pycyphal.application.Node:
        """The current pycyphal node (changes on RESTART)."""
        assert self._node is not None, "not running"
        return self._node

    @property
    def loop(self) -> ControlLoop:
        """The current control loop (re-created on RESTART)."""
        assert self._loop is not None, "not running"
        return self._loop

    async def run(self) -> None:
        """Serve until :meth:`close`; an ExecuteCommand RESTART re-creates the node and the loop."""
        try:
            while not self._closed:
                self._restart.clear()
                await self._serve_once()
                if not self._closed:
                    self.counters.restarts += 1
                    _logger.info("Restarting the node")
        finally:
            self.close()
            self.registry.shutdown()

    def close(self) -> None:
        """Stop the drive safely and close the node; idempotent."""
        self._closed = True
        self._restart.set()

    async def _serve_once(self) -> None:
        await self._build()
        try:
            tasks = [
                asyncio.create_task(self._supervise(), name="supervise"),
                asyncio.create_task(self._publish_feedback(), name="feedback"),
            ]
            self.ready.set()
            await self._restart.wait()
            await asyncio.sleep(0.05)  # Let the response to a RESTART command leave before the node goes away.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self.ready.clear()
            self._teardown()

    async def _build(self) -> None:
        reg = self.registry
        reg.declare()
        self._node = node = pycyphal.application.make_node(
            pycyphal.application.NodeInfo(
                name=NODE_NAME,
                software_version=uavcan.node.Version_1_0(*map(int, version("cyphal-servo").split(".")[:2])),
            ),
            reg,
            transport=_make_transport(reg),
        )
        node.heartbeat_publisher.mode = Mode.INITIALIZATION
        for name, view in (("sys.status", self.status), ("sys.motion", self.motion), ("sys.counters", self.counts)):
            reg[name] = _json_register(view)
        reg["sys.last_rejection"] = lambda: register.Value(
            string=register.String(self.counters.last_rejection.encode()[:_REGISTER_STRING_MAX])
        )
        self._diag = node.make_publisher(uavcan.diagnostic.Record_1_1)

        setpoint_sub = self._subscriber(zubax.telega.ServoCommand_1_0, "setpoint_servo")
        readiness_sub = self._subscriber(zubax.service.Readiness_1_0, "readiness")
        for name, dtype in (
            ("feedback", zubax.service.actuator.Feedback_1_0),
            ("status", zubax.service.actuator.Status_1_0),
            ("dynamics", zubax.physics.dynamics.DoF3rdTs_1_0),
        ):
            pub = self._publisher(dtype, name)
            if pub is not None:
                self._pub[name] = pub
        self._gate = ArmingGate(readiness_sub is not None, reg.real("servo.deadman_timeout"))
        notes: list[str] = []
        try:
            config = loop_config(reg, notes)
            self._floors = setpoint_floors(config.envelope)
            self._fault = ""
        except ConfigurationError as ex:
            self._fault = str(ex)
            config = LoopConfig()
            self._error_code = int(ErrorCode.DRIVE_INCAPABLE)
            self._gate.on_error(self._fault)
            notes.append(f"servo disabled: {self._fault}")
        for note in notes:
            self._report(note)
        self._drive = drive_from_registers(reg, node)

        if setpoint_sub is not None:
            setpoint_sub.receive_in_background(self._on_setpoint)
        if readiness_sub is not None:
            readiness_sub.receive_in_background(self._on_readiness)
        srv = node.get_server(uavcan.node.ExecuteCommand_1)
        srv.serve_in_background(self._on_execute_command)

        node.start()
        await asyncio.sleep(0.01)  # Let the first (INITIALIZATION) heartbeat out before the kernels load.
        # Loading (or compiling) the numba kernels takes a while; off the event loop, heartbeats keep going.
        self._loop = await asyncio.get_running_loop().run_in_executor(None, self._start_loop, config, self._drive)
        self._drive.start()
        node.heartbeat_publisher.mode = Mode.OPERATIONAL
        self._flush_diagnostics()
        _logger.info("Node %s up: %s", node.id, node)

    def _start_loop(self, config: LoopConfig, drive: Drive) -> ControlLoop:
        loop = ControlLoop(config, drive, clock=self.loop_clock)
        loop.start()
        return loop

    def _teardown(self) -> None:
        if self._loop is not None:
            self._loop.close()
        if self._drive is not None:
            self._drive.close()
            self._drive = None
        if self._node is not None:
            self._node.close()  # Keeps the registry open (ServoRegistry.close is a no-op).
        self._pub.clear()
        self._node = None

    def _subscriber(self, dtype: Any, name: str) -> pycyphal.presentation.Subscriber[Any] | None:
        try:
            return self.node.make_subscriber(dtype, name)
        except pycyphal.application.PortNotConfiguredError:
            return None

    def _publisher(self, dtype: Any, name: str) -> pycyphal.presentation.Publisher[Any] | None:
        try:
            return self.node.make_publisher(dtype, name)
        except pycyphal.application.PortNotConfiguredError:
            return None

    # ---------------------------------------------------------------- inputs

    async def _on_setpoint(self, msg: zubax.telega.ServoCommand_1_0, meta: pycyphal.transport.TransferFrom) -> None:
        now = time.monotonic()
        if self._fault:
            self._reject(self._fault, now)
            return
        reg = self.registry
        v_lim = reg.reals("servo.profile.velocity")
        a_lim = reg.reals("servo.profile.acceleration")
        defaults = ProfileLimits(v_lim[0], v_lim[1], a_lim[0], a_lim[1], reg.real("servo.profile.jerk"))
        kin = msg.target.kinematics
        result = interpret(
            kin.position,
            kin.velocity,
            msg.target.force,
            msg.profile_velocity_reverse_forward,
            msg.profile_deceleration_acceleration,
            msg.profile_jerk,
            defaults,
            reg.real("servo.torque_limit"),
            self._floors,
        )
        if isinstance(result, Rejected):
            self._reject(result.reason, now)
            return
        was_engaged = self._gate.update(now) is ServoState.ENGAGED
        if self._loop is None or not self._gate.on_setpoint(now):
            self.counters.setpoints_ignored_unarmed += 1  # Not armed, or still initialising.
            return
        self.counters.setpoints_accepted += 1
        # The loop re-plans only a different setpoint; the same one keeps the command alive (deadman).
        if result != self._setpoint or not was_engaged or self._loop.sample().stopped:
            self._error_code = 0
        self._setpoint = result
        received = float(meta.timestamp.monotonic) if self._loop.clock == "real" else None
        self._loop.command(result, received)
        self._feedback_due.set()

    def _reject(self, reason: str, now: float) -> None:
        self.counters.setpoints_rejected += 1
        self.counters.last_rejection = reason
        self.counters.last_rejection_at = now
        self._report(f"setpoint rejected: {reason}")

    async def _on_readiness(self, msg: zubax.service.Readiness_1_0, _meta: pycyphal.transport.TransferFrom) -> None:
        self._gate.on_readiness(int(msg.value), time.monotonic())

    async def _on_execute_command(
        self, request: uavcan.node.ExecuteCommand_1.Request, _meta: pycyphal.presentation.ServiceRequestMetadata
    ) -> uavcan.node.ExecuteCommand_1.Response:
        cmd = request.command
        Req, Resp = uavcan.node.ExecuteCommand_1.Request, uavcan.node.ExecuteCommand_1.Response
        if cmd == Req.COMMAND_RESTART:
            self._restart.set()
        elif cmd == Req.COMMAND_FACTORY_RESET:
            self.registry.factory_reset()
            self._restart.set()
        elif cmd == Req.COMMAND_STORE_PERSISTENT_STATES:
            pass  # Every register write is committed to the register file at once.
        else:
            return Resp(status=Resp.STATUS_BAD_COMMAND)
        return Resp(status=Resp.STATUS_SUCCESS)

    # ---------------------------------------------------------------- supervision and outputs

    async def _supervise(self) -> None:
        """Advance the arming gate, turn loop faults into errors, publish status and dynamics on time."""
        # Wake at least as often as dynamics are due (up to 1 kHz), or the 10 ms period would cap them at 100 Hz.
        period = min(0.01, 1.0 / self.registry.real("servo.dynamics_rate"))
        next_at = time.monotonic()
        next_status = next_at
        dyn_period = 1.0 / self.registry.real("servo.dynamics_rate")
        next_dynamics = next_at
        prev_state = self._gate.update(next_at)
        while True:
            now = time.monotonic()
            sample = self._last_sample = self.loop.sample()
            if sample.error is not ErrorCode.NONE and self._gate.update(now) is not ServoState.ERROR:
                self._error_code = int(sample.error)
                self._gate.on_error(sample.error_text)
                self._report(f"servo error: {sample.error_text}")
                self.loop.stop()  # The loop already stops on its own faults; readiness-type errors stop here.
            state = self._gate.update(now)
            if state is not ServoState.ENGAGED and prev_state is ServoState.ENGAGED:
                self.loop.stop(immediate=self.registry.flag("servo.stop.disengage_immediately"))
            if state is not prev_state:
                self._feedback_due.set()
            prev_state = state
            self.node.heartbeat_publisher.health = self._health(now)
            if now >= next_status:
                next_status += 1.0
                await self._publish_status(sample)
            if now >= next_dynamics:
                next_dynamics = max(next_dynamics + dyn_period, now)
                await self._publish_dynamics(sample)
            self._flush_diagnostics()
            next_at += period
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def _publish_feedback(self) -> None:
        """Feedback right after each applied setpoint, and at least once per second."""
        while True:
            try:
                await asyncio.wait_for(self._feedback_due.wait(), timeout=1.0)
            except TimeoutError:
                pass
            self._feedback_due.clear()
            pub = self._pub.get("feedback")
            if pub is None:
                continue
            sample = self.loop.sample()
            health = self._health(time.monotonic())
            engaged = self._gate.update(time.monotonic()) is ServoState.ENGAGED
            msg = zubax.service.actuator.Feedback_1_0(
                heartbeat=zubax.service.Heartbeat_1_0(
                    readiness=zubax.service.Readiness_1_0(3 if engaged else 2),
                    health=zubax.service.Health_1_0(int(health)),
                ),
                demand_factor_pct=int(max(-128, min(127, round(sample.demand_factor * 100)))),
            )
            await pub.publish(msg)

    async def _publish_status(self, sample: LoopSample) -> None:
        pub = self._pub.get("status")
        if pub is None:
            return
        flags = zubax.service.actuator.FaultFlags_1_0(
            overload=sample.demand_factor >= 1.0,
            mechanical=sample.error in (ErrorCode.DRIVE_LOST, ErrorCode.FOLLOWING_ERROR, ErrorCode.STOP_TIMEOUT),
            configuration=self._error_code in (1, 2, int(ErrorCode.DRIVE_INCAPABLE)),
            other=self._gate.update(time.monotonic()) is ServoState.ERROR,
        )
        await pub.publish(
            zubax.service.actuator.Status_1_0(
                motor_temperature=float("nan"),
                controller_temperature=float("nan"),
                error_count=self.counters.setpoints_rejected + self.registry.refused_writes + sample.error_count,
                fault_flags=flags,
            )
        )

    async def _publish_dynamics(self, sample: LoopSample) -> None:
        pub = self._pub.get("dynamics")
        if pub is None:
            return
        kin = zubax.physics.kinematics.DoF3rd_1_0(
            base=zubax.physics.kinematics.DoF2nd_1_0(position=sample.position, velocity=sample.velocity),
            acceleration=sample.acceleration,
        )
        await pub.publish(
            zubax.physics.dynamics.DoF3rdTs_1_0(
                # The sample's own loop time on the system clock (the real loop clock is the monotonic one).
                timestamp=zubax.Timestamp_1_0(microsecond=int((time.time() - time.monotonic() + sample.time_s) * 1e6)
                                              if self.loop_clock == "real" else int(time.time() * 1e6)),
                value=zubax.physics.dynamics.DoF3rd_1_0(kinematics=kin, force=sample.force),
            )
        )

    def _health(self, now: float) -> Health:
        if self._gate.update(now) is ServoState.ERROR:
            return Health.WARNING
        if now - self.counters.last_rejection_at < 1.0:
            return Health.ADVISORY
        return Health.NOMINAL

    def status(self) -> dict[str, Any]:
        """``sys.status``: the servo's state, active target and limits, last error code and reason (≤ 256 bytes)."""
        now = time.monotonic()
        servo: dict[str, Any] = {"state": str(self._gate.update(now)), "error": self._error_code}
        if self._setpoint is not None:
            servo.update(self._setpoint.summary())
        if servo["state"] == ServoState.EXPIRED:
            servo["expired_after_s"] = round(self._gate.expired_after_s, 4)
        servo["reason"] = self._gate.reason
        return _fit({"servo": servo}, servo)

    def motion(self) -> dict[str, Any]:
        """``sys.motion``: reference and measured state, the plan, engagement; a drive on the bus adds ``link``:
        [age p50, age max, delay p50, delay max] in ms (measurement age at reception; command send → effect).
        Over 256 bytes the numbers lose digits (7 down to 3 significant), then ``t``, ``limited`` and ``stop`` go
        (in that order) rather than the JSON being cut."""
        if self._loop is None:
            return {"engaged": False}
        s = self._last_sample or self._loop.sample()
        # t0: the plan's start on the system clock (the clock of the dynamics timestamps) [second], µs resolution.
        t0 = time.time() - time.monotonic() + s.plan_start_s if self.loop_clock == "real" else math.nan
        link = self._loop.link_stats()
        doc: dict[str, Any] = {}
        for digits in (7, 6, 5, 4, 3):
            doc = {
                "ref": _g(s.ref_position, s.ref_velocity, s.ref_acceleration, digits=digits),
                "meas": _g(s.position, s.velocity, s.acceleration, s.force, digits=digits),
                "plan": {"status": s.plan_status, "repaired": s.repaired, "T": _g(s.plan_duration)[0],
                         "t0": round(t0, 6) if math.isfinite(t0) else str(t0)},
                "settled": _g(s.settled_after_s, digits=digits)[0],
                "track_max": _g(s.tracking_error_max, digits=min(digits, 4))[0],
                "over": _g(s.overshoot, digits=3)[0],
                "stop": _g(s.stop_planned_s, s.stop_took_s, s.stop_bound_s, digits=digits),
                "limited": s.limited,
                "engaged": s.engaged,
                "t": _g(s.time_s)[0],
            }
            if link is not None:
                ms = (link.age_p50, link.age_max, link.delay_p50, link.delay_max)
                doc["link"] = _g(*(1e3 * x for x in ms), digits=3)
            if _fits(doc):
                return doc
        return _fit_keys(doc, ("t", "limited", "stop", "over", "settled"))

    def counts(self) -> dict[str, Any]:
        """``sys.counters``: event counts since the process started."""
        c = self.counters
        return {
            "accepted": c.setpoints_accepted,
            "rejected": c.setpoints_rejected,
            "ignored_unarmed": c.setpoints_ignored_unarmed,
            "refused_writes": self.registry.refused_writes,
            "restarts": c.restarts,
            "loop_errors": (self._last_sample.error_count if self._last_sample else 0),
            "uptime_s": round(time.monotonic() - self._started_at, 1),
        }

    # ---------------------------------------------------------------- diagnostics

    def _on_refused_write(self, name: str, reason: str) -> None:
        self._report(f"register write refused: {name} {reason}")

    def _report(self, text: str) -> None:
        _logger.warning("%s", text)
        self._pending_diagnostics.append(text)
        self._flush_diagnostics()

    def _flush_diagnostics(self) -> None:
        if self._node is None or not self._pending_diagnostics:
            return
        for text in self._pending_diagnostics:
            rec = uavcan.diagnostic.Record_1_1(
                severity=uavcan.diagnostic.Severity_1_0(uavcan.diagnostic.Severity_1_0.WARNING),
                text=text.encode()[:255],
            )
            self._diag.publish_soon(rec)
        self._pending_diagnostics.clear()


def _make_transport(reg: register.Registry) -> pycyphal.transport.Transport:
    from cyphal_common.transport import make_transport

    transport = make_transport(reg)
    if transport is None:
        raise ValueError("no transport configured: set uavcan.udp.iface, uavcan.can.iface or uavcan.serial.iface")
    return transport


_REGISTER_STRING_MAX = 255
"""uavcan.register.Value strings hold at most 256 bytes; keep one spare."""


def _g(*x: float, digits: int = 7) -> list[float | str]:
    """Floats rounded to ``digits`` significant digits for compact JSON; non-finite as strings."""
    return [float(f"{v:.{digits}g}") if math.isfinite(v) else str(v) for v in x]


def _fits(doc: dict[str, Any]) -> bool:
    """True if the JSON of ``doc`` fits a register string."""
    return len(json.dumps(doc, separators=(",", ":")).encode()) <= _REGISTER_STRING_MAX


def _fit(doc: dict[str, Any], shrinkable: dict[str, Any]) -> dict[str, Any]:
    """Shorten the ``reason`` text until the JSON fits a register string."""
    while len(json.dumps(doc, separators=(",", ":")).encode()) > _REGISTER_STRING_MAX and shrinkable["reason"]:
        shrinkable["reason"] = shrinkable["reason"][:-8]
    return doc


def _fit_keys(doc: dict[str, Any], optional: tuple[str, ...]) -> dict[str, Any]:
    """Drop the ``optional`` keys, in order, until the JSON fits a register string."""
    for key in optional:
        if len(json.dumps(doc, separators=(",", ":")).encode()) <= _REGISTER_STRING_MAX:
            break
        doc.pop(key, None)
    return doc


def _json_register(view: Callable[[], dict[str, Any]]) -> Callable[[], register.Value]:
    def get() -> register.Value:
        text = json.dumps(view(), separators=(",", ":")).encode()[:_REGISTER_STRING_MAX]
        return register.Value(string=register.String(text))

    return get
