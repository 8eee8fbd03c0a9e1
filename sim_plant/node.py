"""``sim-plant``: one simulated joint as its own Cyphal node, a drive speaking the UDRAL servo interface.

Lets the servo node (or yakut) drive a Webots-semantics joint over a real bus instead of hardware. Node name
``io.github.cyphal_servo.sim_plant``; heartbeat, GetInfo and the register services as pycyphal provides; the
heartbeat mode is INITIALIZATION while the numba kernels compile/load, then OPERATIONAL.

Ports (UDRAL service ``servo``; each is configured by its ``uavcan.{pub,sub}.<name>.id`` register, e.g. env
``UAVCAN__SUB__SERVO__SETPOINT__ID=1200``; an unset port, ID 65535, is simply off):

=====================  ====  ===================================================================================
``servo.setpoint``     sub   ``reg.udral.physics.dynamics.rotation.Planar.0.1`` (``sim.kind`` rotational) or
                             ``…translation.Linear.0.1`` (linear); interpreted as below.
``servo.readiness``    sub   ``reg.udral.service.common.Readiness.0.1``; only ENGAGED applies setpoints.
``servo.dynamics``     pub   ``…rotation.PlanarTs.0.1`` / ``…translation.LinearTs.0.1`` at ``sim.publish_rate``:
                             position, velocity, acceleration and the motor's torque/force; the timestamp is the
                             host's monotonic clock in µs (shared by every process on the host).
``servo.feedback``     pub   ``reg.udral.service.actuator.common.Feedback.0.1`` at ``sim.publish_rate``: effective
                             readiness and health; demand_factor_pct = |motor force| / available motor force in
                             percent, negative while the force opposes the motion.
``servo.status``       pub   ``reg.udral.service.actuator.common.Status.0.1`` at 1 Hz: temperatures NaN (not
                             simulated), error_count = rejected setpoints since the last transition to ENGAGED.
=====================  ====  ===================================================================================

Semantics. The joint is *engaged* while the latest readiness is ENGAGED and both a readiness message and a
setpoint arrived within ``CONTROL_TIMEOUT_S`` (1 s); otherwise it is passive: the motor is off (Webots
``set_force(0)``), the joint coasts under spring, damper and static friction. Without a readiness port the
joint is never engaged. Setpoint fields set to NaN are unset:

* position finite → position control ``set_position(p)``, ``set_velocity(|v|)`` (NaN: ``max_velocity``);
* position NaN, velocity finite → velocity control ``set_position(+inf)``, ``set_velocity(v)`` (signed);
* in both, a finite torque/force is the motor force limit ``set_motor_force(min(|f|, max_force))`` (NaN: max_force);
* only torque/force finite → force control ``set_force(f)`` (clipped to ±``max_force``);
* everything NaN → no change (but it counts as a setpoint for the control timeout);
* any infinite field → the setpoint is rejected: counted, health ADVISORY for 1 s, and it does not count for the
  control timeout (a controller sending only garbage is a silent one).

The acceleration field is ignored (the joint's acceleration limit is the ``sim.acceleration`` register). On
engaging, the latest valid setpoint is applied; if there was none the joint stays passive until one arrives.

Registers (all persisted in the register file; environment form ``SIM__MAX_FORCE=20`` etc., read at startup):

========================  =========  =============================================================================
``sim.kind``              string     ``rotational`` (rad, N·m, kg·m²) or ``linear`` (m, N, kg); selects the types.
``sim.inertia``           real64     Moment of inertia or mass of the moved body, > 0. Default 1.
``sim.max_velocity``      real64     Velocity limit (Webots maxVelocity), ≥ 0. Default 100.
``sim.max_force``         real64     Largest motor torque/force (Webots maxForce), ≥ 0. Default 100.
``sim.control_p``         real64     P gain of the position controller [1/s], ≥ 0. Default 10.
``sim.acceleration``      real64     Acceleration limit of the controller, ≥ 0, or −1 = unlimited. Default −1.
``sim.position``          real64     Initial position. Default 0.
``sim.min_position``      real64     Soft limits clipping the target position; both 0 = off. Default 0.
``sim.max_position``      real64     Default 0.
``sim.min_stop``          real64     Hard stops (≤ 0 and ≥ 0) the joint cannot pass; both 0 = off. Default 0.
``sim.max_stop``          real64     Default 0.
``sim.spring_constant``   real64     Spring toward position 0, ≥ 0. Default 0.
``sim.damping_constant``  real64     Viscous damping, ≥ 0. Default 0.
``sim.static_friction``   real64     Static/Coulomb friction, ≥ 0. Default 0.
``sim.step_rate``         real64     Physics stepping rate [Hz], > 0. Default 1000.
``sim.publish_rate``      real64     Rate of ``servo.dynamics`` and ``servo.feedback`` [Hz], > 0. Default 100.
========================  =========  =============================================================================

Invalid values stop the node at startup with an error naming the register (exit status 2).

Stepping: a dedicated thread (:class:`sim_plant._node_plant.Plant`) wakes at absolute deadlines of
``sim.step_rate`` and steps the joint by the *measured* monotonic time since its previous step, so simulated time
equals wall time however late the wake-up (the kernel sub-steps internally and releases the GIL); a lock guards
the joint. The asyncio side only issues commands and samples.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from servo_node import _dsdl

_dsdl.ensure_compiled()

import pycyphal  # noqa: E402
import pycyphal.application  # noqa: E402
import reg.udral.service.actuator.common as actuator  # noqa: E402
import reg.udral.service.common as common  # noqa: E402
import uavcan.node  # noqa: E402
import uavcan.si.unit.temperature as si_temp  # noqa: E402
import uavcan.time  # noqa: E402
from pycyphal.application import register  # noqa: E402
from pycyphal.application.heartbeat_publisher import Health, Mode  # noqa: E402

from servo_node.drive.udral_messages import (  # noqa: E402
    dynamics_ts_type,
    dynamics_type,
    make_dynamics_ts,
    read_dynamics,
)
from sim_plant._joint import JointParams  # noqa: E402
from sim_plant._node_plant import (  # noqa: E402
    Command,
    Plant,
    Sample,
    SetpointRejectedError,
    demand_factor_pct,
    interpret,
)

NODE_NAME = "io.github.cyphal_servo.sim_plant"
"""Reverse-domain node name reported by uavcan.node.GetInfo."""

CONTROL_TIMEOUT_S = 1.0
"""Without a setpoint and a readiness message within this time the joint falls back to STANDBY (passive)."""

STATUS_PERIOD_S = 1.0
"""Period of ``servo.status``."""

SUPERVISE_PERIOD_S = 0.02
"""How often the control timeout is checked."""

DEFAULT_REGISTRY = "sim_plant.db"

_JOINT_REGISTERS: dict[str, float | str] = {
    "kind": "rotational",
    "inertia": 1.0,
    "max_velocity": 100.0,
    "max_force": 100.0,
    "control_p": JointParams.control_p,
    "acceleration": JointParams.acceleration,
    "position": JointParams.position,
    "min_position": JointParams.min_position,
    "max_position": JointParams.max_position,
    "min_stop": JointParams.min_stop,
    "max_stop": JointParams.max_stop,
    "spring_constant": JointParams.spring_constant,
    "damping_constant": JointParams.damping_constant,
    "static_friction": JointParams.static_friction,
}
"""``sim.<field>`` registers of the joint and their defaults (JointParams' except the limits)."""

_RATE_REGISTERS: dict[str, float] = {"step_rate": 1000.0, "publish_rate": 100.0}

_logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A register holds an invalid value; the message names the register."""


def load_config(registry: Any) -> tuple[JointParams, float, float]:
    """Declare the ``sim.*`` registers (defaults, environment) and return (joint params, step rate, publish rate)."""
    values: dict[str, Any] = {}
    for name, default in {**_JOINT_REGISTERS, **_RATE_REGISTERS}.items():
        proxy = registry.setdefault(f"sim.{name}", register.ValueProxy(default))
        try:
            values[name] = str(proxy) if isinstance(default, str) else float(proxy)
        except (TypeError, ValueError) as ex:
            raise ConfigError(f"register sim.{name}: {ex}") from ex
    try:
        params = JointParams(**{k: values[k] for k in _JOINT_REGISTERS})
    except ValueError as ex:
        raise ConfigError(f"register sim.{ex}") from ex  # JointParams names the field first.
    rates = []
    for name in _RATE_REGISTERS:
        x = values[name]
        if not (math.isfinite(x) and x > 0.0):
            raise ConfigError(f"register sim.{name} must be a finite positive rate [Hz], got {x!r}")
        rates.append(x)
    return params, rates[0], rates[1]


def _software_version() -> uavcan.node.Version_1_0:
    """Major.minor of the installed cyphal-servo distribution (0.0 if not installed)."""
    try:
        major, minor = (int(x) for x in version("cyphal-servo").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        major, minor = 0, 0
    return uavcan.node.Version_1_0(major=major, minor=minor)


class SimPlantNode:
    """The ports of the node bridged to a :class:`Plant`: setpoints/readiness in, dynamics/feedback/status out."""

    def __init__(self, node: pycyphal.application.Node, plant: Plant, publish_rate_hz: float) -> None:
        """Create the ports (unset ones stay None) and start in STANDBY with the joint passive."""
        self._node = node
        self._plant = plant
        self._rotational = plant.params.kind == "rotational"
        self._publish_period = 1.0 / publish_rate_hz
        setpoint_t = dynamics_type(self._rotational)
        dynamics_t = dynamics_ts_type(self._rotational)
        self._sub_setpoint = self._port(node.make_subscriber, setpoint_t, "servo.setpoint")
        self._sub_readiness = self._port(node.make_subscriber, common.Readiness_0_1, "servo.readiness")
        self._pub_dynamics = self._port(node.make_publisher, dynamics_t, "servo.dynamics")
        self._pub_feedback = self._port(node.make_publisher, actuator.Feedback_0_1, "servo.feedback")
        self._pub_status = self._port(node.make_publisher, actuator.Status_0_1, "servo.status")
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
        """Publish and supervise until cancelled."""
        await asyncio.gather(self._publish_loop(), self._supervise_loop())

    # ------------------------------------------------------------------ inputs

    async def _on_readiness(self, msg: common.Readiness_0_1, _meta: pycyphal.transport.TransferFrom) -> None:
        value = int(msg.value)
        self._readiness = common.Readiness_0_1.STANDBY if value == 1 else value  # 1 is invalid: STANDBY.
        self._readiness_at = time.monotonic()
        self._supervise(self._readiness_at)

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
        self._supervise(now)

    def _supervise(self, now: float) -> None:
        """Engage or disengage from readiness and the control timeout."""
        fresh = now - self._readiness_at <= CONTROL_TIMEOUT_S and now - self._setpoint_at <= CONTROL_TIMEOUT_S
        engaged = fresh and self._readiness == common.Readiness_0_1.ENGAGED
        if engaged and not self._engaged:
            self.error_count = 0
            if self._command is not None:
                self._plant.apply(self._command)
            _logger.info("ENGAGED")
        elif not engaged and self._engaged:
            self._plant.passive()
            _logger.info("Disengaged (%s)", "readiness" if fresh else "control timeout")
        self._engaged = engaged

    async def _supervise_loop(self) -> None:
        while True:
            self._supervise(time.monotonic())
            health = self.health(time.monotonic())
            self._node.heartbeat_publisher.health = health
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
        """WARNING if the physics thread died, CAUTION if it lags, ADVISORY after a rejected setpoint, else NOMINAL."""
        if not self._plant.alive:
            return Health.WARNING
        if now - self._plant.sample().monotonic > 0.25:
            return Health.CAUTION
        if now - self._rejected_at <= 1.0:
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
    from servo_node import registry_file as register_file_check  # Shared with servo-node: same rules, same words.

    try:
        register_file_check.prepare(registry_file, fresh=fresh_registry, program="sim-plant")
    except ValueError as ex:  # ConfigurationError
        print(f"sim-plant: {ex}", file=sys.stderr)
        return 2
    make_transport: Any
    try:
        from servo_node.transport import make_transport
    except ImportError:  # The project's transport factory is optional; pycyphal's covers the standard ifaces.
        make_transport = pycyphal.application.make_transport

    registry = pycyphal.application.make_registry(registry_file, environment_variables=dict(os.environ))
    try:
        params, step_rate, publish_rate = load_config(registry)
        transport = make_transport(registry)
    except ValueError as ex:
        registry.close()
        print(f"sim-plant: {ex}", file=sys.stderr)
        return 2
    except BaseException:
        registry.close()
        raise
    node = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name=NODE_NAME, software_version=_software_version()),
        registry,
        transport=transport,
    )
    plant: Plant | None = None
    try:
        node.heartbeat_publisher.mode = Mode.INITIALIZATION
        node.start()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, Plant.warm_up, params)  # The heartbeat keeps going meanwhile.
        plant = Plant(params, step_rate)
        app = SimPlantNode(node, plant, publish_rate)
        plant.start()
        app.start()
        node.heartbeat_publisher.mode = Mode.OPERATIONAL
        _logger.info("sim-plant up: node %s, %s joint %s", node.id, params.kind, params)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        task = asyncio.create_task(app.run())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for t in (task, stopper):
            t.cancel()
        results = await asyncio.gather(task, stopper, return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):
                raise r
        return 0
    finally:
        if plant is not None:
            plant.close()
        node.close()  # Closes the registry too.


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``sim-plant``."""
    ap = argparse.ArgumentParser(prog="sim-plant", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "--registry",
        default=DEFAULT_REGISTRY,
        help=f"register file (default: {DEFAULT_REGISTRY} in the current directory; ':memory:' or '' for none)",
    )
    ap.add_argument(
        "--fresh-registry",
        action="store_true",
        help="move an existing register file aside (FILE.bad-<time> / FILE.old-<time>) and start with defaults",
    )
    ap.add_argument("--verbose", "-v", action="store_true", help="log at DEBUG level")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("pycyphal").setLevel(logging.WARNING)  # Its DEBUG/INFO is per-frame noise.
    if args.verbose:
        logging.getLogger("sim_plant").setLevel(logging.DEBUG)
    registry_file = None if args.registry in ("", ":memory:") else args.registry
    try:
        return asyncio.run(run(registry_file, args.fresh_registry))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
