"""``sim-plant --arm``: one node serving the coupled arm's three joints (base, shoulder, elbow) as three UDRAL drives.

Each joint is the single-joint drive of :mod:`sim_plant_node` (same setpoint semantics, readiness gating, control
timeout and quick stop, same messages) on its own ports ``<joint>.setpoint``, ``<joint>.readiness`` (sub) and
``<joint>.dynamics``, ``<joint>.feedback``, ``<joint>.status`` (pub), e.g. env ``UAVCAN__SUB__SHOULDER__SETPOINT__ID``;
all three step one coupled plant (:mod:`sim_plant.arm_motors`), so gravity and coupling act on every joint. The
heartbeat health is the worst of the three.

Registers (env form ``ARM__SHOULDER__MAX_FORCE=30``): per joint ``arm.<joint>.max_velocity`` [rad/s] (default 3),
``arm.<joint>.max_force`` [N·m] (20), ``arm.<joint>.control_p`` [1/s] (10), ``arm.<joint>.position`` [rad] (the
start pose, 0: straight up); ``arm.brake`` (0: a passive joint is free and falls under gravity; 1: a passive joint
is held by a holding brake, so the arm waits at its start pose and stays where a stop left it);
and as the single joint ``sim.step_rate``, ``sim.publish_rate``,
``sim.quick_stop_deceleration``. The masses and lengths are :class:`sim_plant.arm.ArmParams`' defaults (the Hanoi
cell's arm, ``docs/arm.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Mapping
from typing import Any

import pycyphal.application
from pycyphal.application import register
from pycyphal.application.heartbeat_publisher import Mode

from cyphal_common.collector import collect_all, freeze_alive
from cyphal_common.node_mode import go_operational
from cyphal_common.register_access import serve_register_access
from cyphal_common.registers import RegisterSpec, ValidatingRegistry, declare, real64, scalar
from cyphal_common.tasks import cancel_and_wait
from cyphal_common.transport import make_transport
from sim_plant.arm import ArmParams
from sim_plant.arm_motors import ArmMotor, ArmPlant

from ._app import NODE_NAME, SPECS, SUPERVISE_PERIOD_S, SimPlantNode, _software_version
from ._arm_plant import JOINTS, ArmDrive
from ._startup import open_configured

_NONNEG = scalar(lambda x: x >= 0.0, ">= 0")
_ANY = scalar(lambda x: True, "(finite)")

ARM_SPECS: Mapping[str, RegisterSpec] = {
    **{k: v for k, v in SPECS.items() if k in ("sim.step_rate", "sim.publish_rate", "sim.quick_stop_deceleration")},
    **{f"arm.{j}.{name}": RegisterSpec(real64(default), check)
       for j in JOINTS
       for name, default, check in (("max_velocity", 3.0, _NONNEG), ("max_force", 20.0, _NONNEG),
                                    ("control_p", 10.0, _NONNEG), ("position", 0.0, _ANY))},
    "arm.brake": RegisterSpec(real64(0.0), scalar(lambda x: x in (0.0, 1.0), "0 or 1")),
}
"""The registers of ``sim-plant --arm`` (the module docstring lists them)."""

_logger = logging.getLogger(__name__)


def _read(registry: register.Registry, name: str) -> float:
    return float(registry[name].floats[0])


async def run_arm(registry_file: str | None, fresh_registry: bool = False) -> int:
    """Run the arm node until SIGINT/SIGTERM; returns the exit status (2: invalid configuration or register file)."""
    def configure(registry: ValidatingRegistry) -> tuple[list[ArmMotor], list[float], list[float], Any]:
        declare(registry, ARM_SPECS)
        motors = [ArmMotor(_read(registry, f"arm.{j}.max_velocity"), _read(registry, f"arm.{j}.max_force"),
                           _read(registry, f"arm.{j}.control_p")) for j in JOINTS]
        position = [_read(registry, f"arm.{j}.position") for j in JOINTS]
        rates = [_read(registry, n) for n in ("sim.step_rate", "sim.publish_rate", "sim.quick_stop_deceleration")]
        return motors, position, rates, make_transport(registry)

    opened = open_configured(registry_file, fresh_registry, ARM_SPECS, configure)
    if opened is None:
        return 2
    registry, (motors, position, rates, transport) = opened
    node = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name=NODE_NAME + ".arm", software_version=_software_version()),
        registry,
        transport=transport,
    )
    serve_register_access(node, registry)
    drive: ArmDrive | None = None
    try:
        node.heartbeat_publisher.mode = Mode.INITIALIZATION
        node.start()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, ArmPlant.warm_up)
        drive = ArmDrive(ArmParams(), motors, position, rates[0], brake=_read(registry, "arm.brake") == 1.0)
        apps = [SimPlantNode(node, joint, rates[1], rates[2], service=name, own_health=False)
                for name, joint in zip(JOINTS, drive.joints, strict=True)]
        collect_all()  # Before the joints step and publish: a full collection would hold their feedback up.
        drive.start()
        for app in apps:
            app.start()
        freeze_alive()
        await go_operational(node)
        _logger.info("sim-plant --arm up: node %s, joints %s at %s rad, motors %s", node.id, JOINTS, position, motors)

        async def health() -> None:
            while True:
                now = time.monotonic()
                node.heartbeat_publisher.health = max(app.health(now) for app in apps)
                await asyncio.sleep(SUPERVISE_PERIOD_S)

        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        tasks = [asyncio.create_task(app.run()) for app in apps] + [asyncio.create_task(health())]
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({*tasks, stopper}, return_when=asyncio.FIRST_COMPLETED)
        failures = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
        await cancel_and_wait([*tasks, stopper])
        if failures:
            raise failures[0]  # type: ignore[misc]
        return 0
    finally:
        if drive is not None:
            drive.close()
        node.close()
