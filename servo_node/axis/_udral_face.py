"""The UDRAL servo face of one axis (``reg.udral.service.actuator.servo``), beside the Telega one.

Ports, named as the OpenCyphal servo demo names them so UDRAL tools find them (each optional, prefixed per axis):

- ``servo.setpoint`` (sub): ``reg.udral.physics.dynamics.rotation.Planar.0.1``, or ``translation.Linear.0.1`` for a
  linear axis (``servo.drive.kind``). Read as the service text says: the first finite kinematic field is the
  commanded quantity (position: the OTG to that target; velocity: velocity tracking under the jerk-limited profile;
  an acceleration alone cannot be commanded here and is refused with that reason); the following non-negative
  finite kinematic fields limit the profile (symmetric), negative or non-finite ones are ignored; a non-negative
  finite torque/force limits the drive's force.
- ``servo.group_setpoint`` (sub): ``reg.udral.service.actuator.common.sp.Vector31.0.1`` (any smaller ``sp.*`` array
  arrives zero-extended): this axis's element (``servo.udral.group_index``) is its ``servo.udral.group_quantity``
  (``position`` or ``velocity``), the profile and force from the axis's registers — one message moves a group.
- ``servo.readiness`` (sub): ``reg.udral.service.common.Readiness.0.1``; the same arming gate as the Telega
  readiness (STANDBY and SLEEP: no force, ENGAGED: move; older than the deadman, at most the service's 1 s control
  timeout: STANDBY).
- ``servo.feedback``, ``servo.power``, ``servo.dynamics`` (pub): right after each applied setpoint (throttled to
  50 Hz) and at least once a second; ``servo.status`` (pub) once a second. Power is an estimate from the joint's
  torque × velocity over ``servo.udral.bus_voltage`` (no electrical measurement exists here).

Whatever face a setpoint comes through, the same intake, deadman, gate, limits and OTG apply (:mod:`.axis`), and
one interface at a time commands the axis (:mod:`._interfaces`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import pycyphal
import pycyphal.application
import reg.udral.physics.electricity as elec
import reg.udral.service.actuator.common as act
import reg.udral.service.actuator.common.sp as sp
import reg.udral.service.common as common
import uavcan.node
import uavcan.si.unit.electric_current as si_current
import uavcan.si.unit.temperature as si_temp
import uavcan.si.unit.voltage as si_voltage
import uavcan.time

from cyphal_common.udral import dynamics_ts_type, dynamics_type, make_dynamics_ts, read_dynamics

from ..registers import AxisNames
from ._interfaces import UDRAL, UDRAL_GROUP

MIN_PERIOD_S = 1.0 / 50.0
"""Feedback, power and dynamics after setpoints are throttled to 50 Hz, as the service allows."""
MAX_PERIOD_S = 1.0
"""The service's MAX_PUBLICATION_PERIOD: published at least this often without setpoints."""

Fields = tuple[float, float, float, tuple[float, float], tuple[float, float]]
"""(position, velocity, force limit, velocity limits, acceleration limits) in :func:`servo_node.setpoint.interpret`'s
terms: position ±inf is velocity mode; zero limits mean the axis's defaults."""


def fields_of(position: float, velocity: float, acceleration: float, force: float) -> Fields | str:
    """A UDRAL setpoint's (position, velocity, acceleration, force) as the service text reads them, or why not."""
    def limit(x: float) -> float:
        return x if math.isfinite(x) and x > 0.0 else 0.0

    f = limit(force)
    if math.isfinite(position):
        v, a = limit(velocity), limit(acceleration)
        return position, 0.0, f, (-v, v) if v else (0.0, 0.0), (-a, a) if a else (0.0, 0.0)
    if math.isfinite(velocity):
        a = limit(acceleration)
        return math.copysign(math.inf, velocity) if velocity else math.inf, velocity, f, (0.0, 0.0), \
            (-a, a) if a else (0.0, 0.0)
    if math.isfinite(acceleration):
        return "UDRAL setpoint: an acceleration alone is not a quantity this servo controls"
    return "UDRAL setpoint: no finite position or velocity"


class UdralFace:
    """Subscriptions and publications of the UDRAL servo service for one axis; inert when no port is configured."""

    def __init__(self, node: pycyphal.application.Node, names: AxisNames, rotational: bool,
                 group_index: int, group_quantity: str, bus_voltage: float) -> None:
        self._rotational = rotational
        self._group_index = group_index
        self._group_quantity = group_quantity
        self._bus_voltage = bus_voltage
        self.setpoint_sub = _sub(node, dynamics_type(rotational), names.port("servo.setpoint"))
        self.group_sub = _sub(node, sp.Vector31_0_1, names.port("servo.group_setpoint"))
        self.readiness_sub = _sub(node, common.Readiness_0_1, names.port("servo.readiness"))
        self._pubs = {n: p for n, t in (("feedback", act.Feedback_0_1), ("status", act.Status_0_1),
                                        ("power", elec.PowerTs_0_1), ("dynamics", dynamics_ts_type(rotational)))
                      if (p := _pub(node, t, names.port(f"servo.{n}"))) is not None}
        self._due = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def gates(self) -> bool:
        """A UDRAL readiness port is configured: setpoints need ENGAGED."""
        return self.readiness_sub is not None

    def start(self, on_fields: Callable[[Fields | str, Any, str], None], on_readiness: Callable[[int, Any], None],
              sample: Callable[[], Any], state: Callable[[], tuple[bool, int, int]]) -> None:
        """Receive setpoints (``on_fields(fields or why not, transfer, interface)``, the interface
        :data:`~._interfaces.UDRAL` or :data:`~._interfaces.UDRAL_GROUP`) and readiness; publish from ``sample()``
        (the loop's) and ``state()`` (engaged, health, error count)."""
        async def on_setpoint(msg: Any, meta: Any) -> None:
            on_fields(fields_of(*read_dynamics(msg)), meta, UDRAL)

        async def on_group(msg: Any, meta: Any) -> None:
            values = list(msg.value)
            x = float(values[self._group_index]) if self._group_index < len(values) else math.nan
            if self._group_quantity == "velocity":
                on_fields(fields_of(math.nan, x, math.nan, math.nan), meta, UDRAL_GROUP)
            else:
                on_fields(fields_of(x, math.nan, math.nan, math.nan), meta, UDRAL_GROUP)

        async def on_ready(msg: Any, meta: Any) -> None:
            on_readiness(int(msg.value), meta)

        if self.setpoint_sub is not None:
            self.setpoint_sub.receive_in_background(on_setpoint)
        if self.group_sub is not None:
            self.group_sub.receive_in_background(on_group)
        if self.readiness_sub is not None:
            self.readiness_sub.receive_in_background(on_ready)
        if self._pubs and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._publish(sample, state), name="udral-face")

    def applied(self) -> None:
        """A setpoint was applied: feedback, power and dynamics now (throttled to 50 Hz)."""
        self._due.set()

    async def close(self) -> None:
        """Cancel the publication task and close every port; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            from cyphal_common.tasks import cancel_and_wait

            await cancel_and_wait([task])
        for port in (self.setpoint_sub, self.group_sub, self.readiness_sub, *self._pubs.values()):
            if port is not None:
                port.close()
        self._pubs = {}

    async def _publish(self, sample: Callable[[], Any], state: Callable[[], tuple[bool, int, int]]) -> None:
        next_status = 0.0
        try:
            while True:
                try:
                    await asyncio.wait_for(self._due.wait(), timeout=MAX_PERIOD_S)
                except TimeoutError:
                    pass
                self._due.clear()
                engaged, health, errors = state()
                s = sample()
                for name, msg in self._messages(s, engaged, health).items():
                    if name in self._pubs and (s.measured or name == "feedback"):  # dynamics, power: measured only
                        await self._pubs[name].publish(msg)
                if time.monotonic() >= next_status and "status" in self._pubs:
                    next_status = time.monotonic() + MAX_PERIOD_S
                    await self._pubs["status"].publish(act.Status_0_1(
                        motor_temperature=si_temp.Scalar_1_0(math.nan),
                        controller_temperature=si_temp.Scalar_1_0(math.nan), error_count=min(errors, 2**32 - 1)))
                await asyncio.sleep(MIN_PERIOD_S)
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass

    def _messages(self, s: Any, engaged: bool, health: int) -> dict[str, Any]:
        now_us = round(time.time() * 1e6)
        readiness = common.Readiness_0_1.ENGAGED if engaged else common.Readiness_0_1.STANDBY
        mech_power = s.force * s.velocity if math.isfinite(s.force * s.velocity) else 0.0
        return {
            "feedback": act.Feedback_0_1(
                heartbeat=common.Heartbeat_0_1(readiness=common.Readiness_0_1(readiness),
                                               health=uavcan.node.Health_1_0(health)),
                demand_factor_pct=max(-128, min(127, round(s.demand_factor * 100.0)))),
            "power": elec.PowerTs_0_1(
                timestamp=uavcan.time.SynchronizedTimestamp_1_0(microsecond=now_us),
                value=elec.Power_0_1(current=si_current.Scalar_1_0(mech_power / self._bus_voltage),
                                     voltage=si_voltage.Scalar_1_0(self._bus_voltage))),
            "dynamics": make_dynamics_ts(self._rotational, now_us, s.position, s.velocity, s.acceleration, s.force),
        }


def _sub(node: pycyphal.application.Node, dtype: Any, name: str) -> Any:
    try:
        return node.make_subscriber(dtype, name)
    except pycyphal.application.PortNotConfiguredError:
        return None


def _pub(node: pycyphal.application.Node, dtype: Any, name: str) -> Any:
    try:
        return node.make_publisher(dtype, name)
    except pycyphal.application.PortNotConfiguredError:
        return None
