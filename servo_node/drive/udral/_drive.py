"""A drive on the Cyphal bus that speaks the UDRAL servo interface, bridged to the control loop's link arrays.

Out: ``drive_setpoint`` (``reg.udral.physics.dynamics.rotation.Planar.0.1`` or ``translation.Linear.0.1``) at
``servo.drive.rate``: in velocity mode the velocity is commanded, the torque/force field carries the limit, the
other kinematic fields are NaN; in torque mode only the torque/force is set. ``drive_readiness``
(``reg.udral.service.common.Readiness.0.1``): ENGAGED while the loop commands the drive, else STANDBY.
In: ``drive_dynamics`` (``…PlanarTs.0.1``/``…LinearTs.0.1``), the measured state; ``drive_feedback``
(``reg.udral.service.actuator.common.Feedback.0.1``), the drive's own readiness and health.
A silence of ``drive_dynamics`` longer than ``servo.drive.feedback_timeout`` is an error the loop acts on.

The generated UDRAL types are imported when a drive is built (:meth:`UdralDrive.create`), not with this module.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pycyphal

from cyphal_common.tasks import cancel_and_wait

from ..._seqlock import read_seqlocked
from .. import _remote_link as link
from .._bus import BusDrive

if TYPE_CHECKING:
    import pycyphal.application

    from ...registers import RegisterReader

STALE_WINDOW_S = 10.0
"""A measurement stamped up to this much older than the newest one taken is a stale duplicate [second]."""


class UdralDrive(BusDrive):
    """Publishes the loop's drive command and feeds the drive's measured state back into the loop.

    The network side is the only writer of ``rx`` (measurements); the loop the only writer of ``tx`` (commands).
    """

    def __init__(
        self, node: pycyphal.application.Node, kind: str, rate_hz: float, port_prefix: str = ""
    ) -> None:
        """``port_prefix`` (``"left."``) names the ports of one axis of a multi-axis node."""
        import reg.udral.service.actuator.common as actuator
        import reg.udral.service.common as common

        from cyphal_common import udral

        super().__init__()
        self._udral = udral
        self._readiness = common.Readiness_0_1
        self._rotational = kind == "rotational"
        self._period_s = 1.0 / rate_hz
        self._task: asyncio.Task[None] | None = None
        rot = self._rotational
        self._pub_setpoint = node.make_publisher(udral.dynamics_type(rot), port_prefix + "drive_setpoint")
        self._pub_readiness = node.make_publisher(common.Readiness_0_1, port_prefix + "drive_readiness")
        self._sub_dynamics = node.make_subscriber(udral.dynamics_ts_type(rot), port_prefix + "drive_dynamics")
        self._sub_feedback = node.make_subscriber(actuator.Feedback_0_1, port_prefix + "drive_feedback")
        self.stale_measurements = 0
        """Measurements dropped because their timestamp was not newer than the latest one taken."""
        self.drive_readiness = -1
        """Readiness the drive last reported (−1: none yet)."""
        self.drive_health = -1

    @classmethod
    def ports(cls) -> Mapping[str, str]:
        """``drive_setpoint``/``drive_readiness`` out, ``drive_dynamics``/``drive_feedback`` in."""
        return {
            "uavcan.pub.drive_setpoint": "udral backend: reg.udral.physics.dynamics.rotation.Planar / "
            "translation.Linear",
            "uavcan.pub.drive_readiness": "udral backend: reg.udral.service.common.Readiness",
            "uavcan.sub.drive_dynamics": "udral backend: …PlanarTs / …LinearTs",
            "uavcan.sub.drive_feedback": "udral backend: reg.udral.service.actuator.common.Feedback",
        }

    @classmethod
    def create(cls, reg: RegisterReader, node: Any, port_prefix: str = "") -> UdralDrive:
        """The UDRAL drive of one axis, its ports resolved from the registers."""
        return cls(node, reg.text("servo.drive.kind"), reg.real("servo.drive.rate"), port_prefix)

    def start(self) -> None:
        """Start bridging; idempotent."""
        if self._task is None:
            self._sub_dynamics.receive_in_background(self._on_dynamics)
            self._sub_feedback.receive_in_background(self._on_feedback)
            self._task = asyncio.get_running_loop().create_task(self._publish())

    def close(self) -> None:
        """Stop publishing (the drive's own control timeout then puts it into a safe state); idempotent."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def stop(self) -> None:
        """Stop publishing (cancel and await the task), then tell the drive STANDBY once; idempotent.

        Call it after the loop has disengaged, so the drive is at rest when it is told to stand by.
        """
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])
            try:
                await self._pub_readiness.publish(self._readiness(self._readiness.STANDBY))
            except pycyphal.transport.ResourceClosedError:
                pass

    async def _on_dynamics(self, msg: Any, meta: pycyphal.transport.TransferFrom) -> None:
        stamp = int(msg.timestamp.microsecond) * 1e-6  # The drive's clock (0: unknown).
        if stamp > 0.0 and 0.0 <= self.arrays.rx[link.RX_STAMP] - stamp <= STALE_WINDOW_S:
            # Not newer than what we have: a late duplicate (a redundant interface, or one accepted again after
            # the transfer-ID timeout) must never make a silent drive look alive. A stamp much older than the
            # newest is a drive that restarted with its clock: taken.
            self.stale_measurements += 1
            return
        p, v, a, f = self._udral.read_dynamics(msg.value)
        a = a if math.isfinite(a) else 0.0
        f = f if math.isfinite(f) else 0.0
        self.record_measurement(p, v, a, f, float(meta.timestamp.monotonic), stamp)

    async def _on_feedback(self, msg: Any, _meta: pycyphal.transport.TransferFrom) -> None:
        self.drive_readiness = int(msg.heartbeat.readiness.value)
        self.drive_health = int(msg.heartbeat.health.value)

    async def _publish(self) -> None:
        snapshot = np.empty(link.N_TX)
        next_at = time.monotonic()
        ready_t = self._readiness
        try:
            while True:
                read_seqlocked(self.arrays.tx, snapshot)
                enabled = snapshot[link.TX_ENABLE] != 0.0
                await self._pub_readiness.publish(ready_t(ready_t.ENGAGED if enabled else ready_t.STANDBY))
                next_at += self._period_s
                if enabled:
                    v, f = snapshot[link.TX_V], snapshot[link.TX_F]
                    setpoint = self._udral.make_dynamics(self._rotational, velocity=v, force=f)
                    sent_at = time.monotonic()
                    await self._pub_setpoint.publish(setpoint)
                    self.record_send(sent_at, v, f, next_at)
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        except (asyncio.CancelledError, pycyphal.presentation.PortClosedError):
            pass
