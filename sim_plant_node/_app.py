"""The ``sim-plant`` node: its registers, the ports bridged to a :class:`~sim_plant_node._plant.Plant`, and run().

Imports generated DSDL types and ``pycyphal.application`` at the top: :func:`sim_plant_node.main` compiles the
DSDL before importing this module (see :mod:`cyphal_common.dsdl`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NamedTuple

import pycyphal
import pycyphal.application
import reg.udral.service.actuator.common as actuator
import reg.udral.service.common as common
import uavcan.node
import uavcan.si.unit.temperature as si_temp
import uavcan.time
from pycyphal.application import register
from pycyphal.application.heartbeat_publisher import Health, Mode

from cyphal_common.collector import collect_all, freeze_alive
from cyphal_common.joint_registers import JOINT_SPECS, joint_params
from cyphal_common.node_mode import go_operational
from cyphal_common.register_access import serve_register_access
from cyphal_common.registers import RegisterSpec, declare, real64, scalar
from cyphal_common.tasks import cancel_and_wait
from cyphal_common.transport import bounded_backlog, make_transport
from cyphal_common.udral import dynamics_ts_type, dynamics_type, make_dynamics_ts, read_dynamics
from sim_plant import Joint, JointParams

from ._plant import Command, JointDrive, Plant, Sample, SetpointRejectedError, demand_factor_pct, interpret
from ._plant import Mode as PlantMode
from ._startup import open_configured

NODE_NAME = "io.github.cyphal_servo.sim_plant"
"""Reverse-domain node name reported by uavcan.node.GetInfo."""

CONTROL_TIMEOUT_S = 1.0
"""Without a setpoint and a readiness message within this time the drive quick-stops the joint, then goes passive."""

STATUS_PERIOD_S = 1.0
"""Period of ``servo.status``."""

SUPERVISE_PERIOD_S = 0.02
"""How often the control timeout is checked."""

STALL_S = 0.25
"""A supervision round this late means the process itself did not run (a loaded host): the messages that arrived
meanwhile are still queued, so they are heard before the control timeout is judged again."""

_RATE = scalar(lambda x: x > 0.0, "> 0 [Hz]")

SPECS: Mapping[str, RegisterSpec] = {
    **JOINT_SPECS,
    "sim.step_rate": RegisterSpec(real64(1000.0), _RATE),
    "sim.publish_rate": RegisterSpec(real64(100.0), _RATE),
    "sim.quick_stop_deceleration": RegisterSpec(real64(50.0), scalar(lambda x: x > 0.0, "> 0 [unit/s²]")),
}
"""The node's registers: the joint's (:data:`cyphal_common.joint_registers.JOINT_SPECS`), the two rates, and the
deceleration of the quick stop on a control timeout (a drive setting, not a joint field: the servo node's
embedded joint has no controller to lose)."""

_logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A register holds an invalid value; the message names the register."""


class Config(NamedTuple):
    """What the ``sim.*`` registers configure."""

    params: JointParams
    step_rate: float
    publish_rate: float
    quick_stop_deceleration: float


def load_config(registry: register.Registry) -> Config:
    """Declare the ``sim.*`` registers (defaults, environment) and return what they configure.

    :raises ConfigError: a register holds an invalid value; the message names the register.
    """
    try:
        declare(registry, SPECS)
        params = joint_params(registry)
    except ValueError as ex:
        raise ConfigError(str(ex)) from ex
    return Config(
        params,
        float(registry["sim.step_rate"].floats[0]),
        float(registry["sim.publish_rate"].floats[0]),
        float(registry["sim.quick_stop_deceleration"].floats[0]),
    )


def _software_version() -> uavcan.node.Version_1_0:
    """Major.minor of the installed cyphal-servo distribution (0.0 if not installed)."""
    try:
        major, minor = (int(x) for x in version("cyphal-servo").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        major, minor = 0, 0
    return uavcan.node.Version_1_0(major=major, minor=minor)


class SimPlantNode:
    """The ports of the node bridged to a :class:`Plant` (or an arm joint): setpoints/readiness in,
    dynamics/feedback/status out. Ports are ``<service>.setpoint`` etc.; with ``own_health`` it sets the node's
    heartbeat health (a node serving several joints sets the worst of theirs itself)."""

    def __init__(
        self,
        node: pycyphal.application.Node,
        plant: JointDrive,
        publish_rate_hz: float,
        quick_stop_deceleration: float,
        service: str = "servo",
        own_health: bool = True,
    ) -> None:
        """Create the ports (unset ones stay None) and start in STANDBY with the joint passive."""
        self._node = node
        self._own_health = own_health
        self._plant = plant
        self._quick_stop_deceleration = quick_stop_deceleration
        self._rotational = plant.params.kind == "rotational"
        self._publish_period = 1.0 / publish_rate_hz
        setpoint_t = dynamics_type(self._rotational)
        dynamics_t = dynamics_ts_type(self._rotational)
        self._sub_setpoint = self._port(node.make_subscriber, setpoint_t, f"{service}.setpoint")
        self._sub_readiness = self._port(node.make_subscriber, common.Readiness_0_1, f"{service}.readiness")
        for sub in (self._sub_setpoint, self._sub_readiness):
            if sub is not None:
                bounded_backlog(sub)  # A busy host: the controller's recent commands, not an ever older backlog.
        self._pub_dynamics = self._port(node.make_publisher, dynamics_t, f"{service}.dynamics")
        self._pub_feedback = self._port(node.make_publisher, actuator.Feedback_0_1, f"{service}.feedback")
        self._pub_status = self._port(node.make_publisher, actuator.Status_0_1, f"{service}.status")
        never = -math.inf
        self._readiness = common.Readiness_0_1.STANDBY
        self._readiness_at = never
        self._setpoint_at = never
        self._rejected_at = never
        self._command: Command | None = None
        self._engaged = False
        self.error_count = 0
        """Rejected setpoints since the last transition to ENGAGED."""
        self.setpoints_received = 0

    @staticmethod
    def _port(factory: Any, dtype: Any, name: str) -> Any:
        """A publisher/subscriber, or None if its port-ID register is unset."""
        try:
            return factory(dtype, name)
        except pycyphal.application.PortNotConfiguredError:
            _logger.info("Port %s is not configured; off", name)
            return None

    @property
    def engaged(self) -> bool:
        """True while setpoints are applied."""
        return self._engaged

    def start(self) -> None:
        """Start receiving; the publishing and supervision tasks run in :meth:`run`."""
        if self._sub_setpoint is not None:
            self._sub_setpoint.receive_in_background(self._on_setpoint)
        if self._sub_readiness is not None:
            self._sub_readiness.receive_in_background(self._on_readiness)

    async def run(self) -> None:
        """Publish and supervise until cancelled; both loops have ended when this returns.

        Not ``gather`` of the two coroutines alone: cancelled, it completes as soon as one child ends cancelled, and a
        publishing child whose cancel pycyphal's UDP send swallowed (``cyphal_common.tasks``) ran on past it, into the
        closed transport (an EBADF traceback at shutdown of an installed sim-plant)."""
        tasks = [asyncio.create_task(self._publish_loop()), asyncio.create_task(self._supervise_loop())]
        try:
            await asyncio.gather(*tasks)
        finally:
            await cancel_and_wait(tasks)

    # ------------------------------------------------------------------ inputs

    async def _on_readiness(self, msg: common.Readiness_0_1, _meta: pycyphal.transport.TransferFrom) -> None:
        value = int(msg.value)
        self._readiness = common.Readiness_0_1.STANDBY if value == 1 else value  # 1 is invalid: STANDBY.
        self._readiness_at = time.monotonic()
        self._supervise(self._readiness_at, judge_silence=False)

    async def _on_setpoint(self, msg: Any, _meta: pycyphal.transport.TransferFrom) -> None:
        now = time.monotonic()
        p, v, _a, f = read_dynamics(msg)
        params = self._plant.params
        try:
            command = interpret(p, v, f, params.max_velocity, params.max_force)
        except SetpointRejectedError as ex:
            self.error_count += 1
            self._rejected_at = now
            _logger.debug("Setpoint rejected: %s", ex)
            return
        self._setpoint_at = now  # Only valid setpoints keep the drive engaged; garbage must not.
        self.setpoints_received += 1
        if command is not None:
            self._command = command
            if self._engaged:
                self._plant.apply(command)
        self._supervise(now, judge_silence=False)

    def _supervise(self, now: float, judge_silence: bool = True) -> None:
        """Engage or disengage from readiness and the control timeout; the timeout only where ``judge_silence``
        (the supervision loop, which hears what is queued first: a message handler after a stall of this process
        would take the other port's queued messages for silence)."""
        fresh = now - self._readiness_at <= CONTROL_TIMEOUT_S and now - self._setpoint_at <= CONTROL_TIMEOUT_S
        engaged = fresh and self._readiness == common.Readiness_0_1.ENGAGED
        if engaged and not self._engaged:
            self.error_count = 0
            if self._command is not None:
                self._plant.apply(self._command)
            _logger.info("ENGAGED")
        elif not engaged and self._engaged:
            if fresh or self._readiness != common.Readiness_0_1.ENGAGED:
                # The controller's last word was STANDBY/SLEEP (however long ago): its decision, motor off now.
                self._plant.passive()
                _logger.info("Disengaged (readiness)")
            elif not judge_silence:
                return
            else:  # The controller is gone: bring the joint to rest before letting go.
                bound = self._plant.quick_stop(self._quick_stop_deceleration)
                _logger.info("Control timeout: quick stop (at most %.3f s), then passive", bound)
        self._engaged = engaged

    async def _supervise_loop(self) -> None:
        last, deferred = time.monotonic(), False
        while True:
            now = time.monotonic()
            stalled, last = now - last > STALL_S, now
            if stalled and not deferred:  # Not the controller's silence but our own: hear what is queued first.
                deferred = True  # Once only: a host slow on every round must still stop a joint nobody commands.
                await asyncio.sleep(SUPERVISE_PERIOD_S)
                continue
            deferred = False
            self._supervise(now)
            if self._own_health:
                self._node.heartbeat_publisher.health = self.health(time.monotonic())
            await asyncio.sleep(SUPERVISE_PERIOD_S)

    # ------------------------------------------------------------------ outputs

    def readiness(self) -> int:
        """The effective readiness reported in the feedback."""
        if self._engaged:
            return int(common.Readiness_0_1.ENGAGED)
        if time.monotonic() - self._readiness_at <= CONTROL_TIMEOUT_S and self._readiness == common.Readiness_0_1.SLEEP:
            return int(common.Readiness_0_1.SLEEP)
        return int(common.Readiness_0_1.STANDBY)

    def health(self, now: float) -> Health:
        """WARNING if the physics thread died, CAUTION if it lags, ADVISORY during a quick stop or after a rejected
        setpoint, else NOMINAL."""
        if not self._plant.alive:
            return Health.WARNING
        sample = self._plant.sample()
        if now - sample.monotonic > 0.25:
            return Health.CAUTION
        if sample.mode is PlantMode.QUICK_STOP or now - self._rejected_at <= 1.0:
            return Health.ADVISORY
        return Health.NOMINAL

    async def _publish_loop(self) -> None:
        next_at = time.monotonic()
        next_status = next_at
        while True:
            now = time.monotonic()
            s = self._plant.sample()
            if self._pub_dynamics is not None:
                await self._pub_dynamics.publish(self._dynamics(s))
            if self._pub_feedback is not None:
                await self._pub_feedback.publish(self._feedback(s, now))
            if self._pub_status is not None and now >= next_status:
                next_status = now + STATUS_PERIOD_S
                await self._pub_status.publish(self._status())
            next_at += self._publish_period
            delay = next_at - time.monotonic()
            if delay < -10 * self._publish_period:
                next_at = time.monotonic()  # Far behind (a stall): restart the schedule rather than burst.
            await asyncio.sleep(max(0.0, delay))

    def _dynamics(self, s: Sample) -> Any:
        us = int(s.monotonic * 1e6)
        return make_dynamics_ts(self._rotational, us, s.position, s.velocity, s.acceleration, s.force)

    def _feedback(self, s: Sample, now: float) -> actuator.Feedback_0_1:
        return actuator.Feedback_0_1(
            heartbeat=common.Heartbeat_0_1(
                readiness=common.Readiness_0_1(self.readiness()),
                health=uavcan.node.Health_1_0(int(self.health(now))),
            ),
            demand_factor_pct=demand_factor_pct(s.force, s.available_force, s.velocity),
        )

    def _status(self) -> actuator.Status_0_1:
        nan = si_temp.Scalar_1_0(math.nan)
        return actuator.Status_0_1(
            motor_temperature=nan,
            controller_temperature=nan,
            error_count=min(self.error_count, 0xFFFF_FFFF),
            fault_flags=actuator.FaultFlags_0_1(),
        )


async def run(registry_file: str | None, fresh_registry: bool = False) -> int:
    """Run the node until SIGINT/SIGTERM; returns the exit status (2: invalid configuration or register file)."""
    opened = open_configured(registry_file, fresh_registry, SPECS, lambda r: (load_config(r), make_transport(r)))
    if opened is None:
        return 2
    registry, (config, transport) = opened
    node = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name=NODE_NAME, software_version=_software_version()),
        registry,
        transport=transport,
    )
    serve_register_access(node, registry)  # Writes to unknown or read-only registers are counted too.
    plant: Plant | None = None
    try:
        node.heartbeat_publisher.mode = Mode.INITIALIZATION
        node.start()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, Joint.warm_up, config.params)  # The heartbeat keeps going meanwhile.
        plant = Plant(config.params, config.step_rate)
        app = SimPlantNode(node, plant, config.publish_rate, config.quick_stop_deceleration)
        collect_all()  # Before the joint steps and publishes: a full collection would hold its feedback up.
        plant.start()
        app.start()
        freeze_alive()
        await go_operational(node)
        _logger.info("sim-plant up: node %s, %s joint %s", node.id, config.params.kind, config.params)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        task = asyncio.create_task(app.run())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        failure = task.exception() if task.done() and not task.cancelled() else None
        await cancel_and_wait([task, stopper])
        if failure is not None:
            raise failure
        return 0
    finally:
        if plant is not None:
            plant.close()
        node.close()  # Closes the registry too.
