"""A drive on the Cyphal bus that speaks the UDRAL servo interface, bridged to the control loop's link arrays.

Out: ``drive_setpoint`` (``reg.udral.physics.dynamics.rotation.Planar.0.1`` or ``translation.Linear.0.1``) at
``servo.drive.rate``: in velocity mode the velocity is commanded, the torque/force field carries the limit, the
other kinematic fields are NaN; in torque mode only the torque/force is set. ``drive_readiness``
(``reg.udral.service.common.Readiness.0.1``): ENGAGED while the loop commands the drive, else STANDBY; sent when it
changes (before that period's setpoint) and otherwise every :data:`READINESS_PERIOD_S`.
In: ``drive_dynamics`` (``…PlanarTs.0.1``/``…LinearTs.0.1``), the measured state; ``drive_feedback``
(``reg.udral.service.actuator.common.Feedback.0.1``), the drive's own readiness and health.
A silence of ``drive_dynamics`` longer than ``servo.drive.feedback_timeout`` is an error the loop acts on.

The drive is pinned: ``servo.drive.node_id``, or (65535) the first node whose dynamics arrive, for the life of the
node (a RESTART chooses again). Dynamics and feedback from any other node are dropped, counted and reported once
per source: a second publisher on the drive's subjects can neither move the loop nor change its readiness.

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
from cyphal_common.transport import bounded_backlog

from ..._seqlock import read_seqlocked
from .. import _remote_link as link
from .._bus import BusDrive

if TYPE_CHECKING:
    import pycyphal.application

    from cyphal_common.registers import RegisterReader

DRIVE_ANY = 0xFFFF
READINESS_PERIOD_S = 0.1
"""An unchanged readiness is sent again after this long: a tenth of UDRAL's ``CONTROL_TIMEOUT`` (1 s, after which a
drive goes to STANDBY on its own), so nine lost in a row are harmless. Sent every drive period (up to 1 kHz), it
doubled the messages on the bus, and the CPU both ends spend on them, for nothing."""
"""``servo.drive.node_id`` that pins no node in advance: the first drive that answers is pinned."""

SOURCES_MAX = 64
"""Foreign sources remembered (and reported once each); spoofed node-IDs cannot grow memory beyond this."""

STALE_WINDOW_S = 10.0
"""A measurement stamped up to this much older than the newest one taken is a stale duplicate [second]."""


class UdralDrive(BusDrive):
    """Publishes the loop's drive command and feeds the drive's measured state back into the loop.

    The network side is the only writer of ``rx`` (measurements); the loop the only writer of ``tx`` (commands).
    """

    def __init__(
        self,
        node: pycyphal.application.Node,
        kind: str,
        rate_hz: float,
        port_prefix: str = "",
        drive_node_id: int = DRIVE_ANY,
    ) -> None:
        """``port_prefix`` (``"left."``) names the ports of one axis of a multi-axis node; ``drive_node_id`` pins
        the drive (:data:`DRIVE_ANY`: the first that answers)."""
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
        for sub in (self._sub_dynamics, self._sub_feedback):
            bounded_backlog(sub)  # A busy host: the drive's recent samples, not an ever older backlog.
        self.stale_measurements = 0
        """Measurements dropped because their timestamp was not newer than the latest one taken."""
        self.drive_readiness = -1
        """Readiness the drive last reported (−1: none yet)."""
        self.drive_health = -1
        self.drive_node_id: int | None = None if drive_node_id == DRIVE_ANY else drive_node_id
        """The drive listened to: the register's, or the first sender of dynamics; None until then."""
        self.pinned_by_register = self.drive_node_id is not None
        self.foreign_samples = 0
        """Dynamics and feedback messages from other nodes than the drive (dropped)."""
        self._foreign: dict[int, int] = {}  # source node-ID -> its messages dropped
        self._notes: list[str] = []

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
        return cls(node, reg.text("servo.drive.kind"), reg.real("servo.drive.rate"), port_prefix,
                   int(reg.real("servo.drive.node_id")))

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

    def _from_drive(self, src: int | None) -> bool:
        """True if ``src`` is the pinned drive (pinning the first sender); else counted, reported once per source."""
        if src is not None and self.drive_node_id is None:
            self.drive_node_id = src
            self._notes.append(f"drive pinned: node {src} (the first that answered)")
        if src is not None and src == self.drive_node_id:
            return True
        self.foreign_samples += 1
        key = -1 if src is None else src
        if key not in self._foreign and len(self._foreign) < SOURCES_MAX:
            self._foreign[key] = 0
            who = "an anonymous node" if src is None else f"node {src}"
            self._notes.append(f"drive: messages from {who} dropped (the drive is node {self.drive_node_id})")
        if key in self._foreign:
            self._foreign[key] += 1
        return False

    def take_notes(self) -> list[str]:
        """What to report since the last call (the pinned drive, each new foreign source)."""
        notes, self._notes = self._notes, []
        return notes

    def peers(self) -> dict[str, Any]:
        """For ``sys.status``: the drive's node-ID (None until one answered) and the foreign messages dropped."""
        return {"drive": self.drive_node_id, "foreign": self.foreign_samples}

    async def _on_dynamics(self, msg: Any, meta: pycyphal.transport.TransferFrom) -> None:
        if not self._from_drive(meta.source_node_id):
            return
        stamp = int(msg.timestamp.microsecond) * 1e-6  # The drive's clock (0: unknown).
        if stamp > 0.0 and 0.0 <= self.arrays.rx[link.RX_STAMP] - stamp <= STALE_WINDOW_S:
            # Not newer than what we have: a late duplicate (a redundant interface, or one accepted again after
            # the transfer-ID timeout) must never make a silent drive look alive. A stamp much older than the
            # newest is a drive that restarted with its clock: taken.
            self.stale_measurements += 1
            return
        p, v, a, f = self._udral.read_dynamics(msg.value)
        a = a if not math.isnan(a) else 0.0  # NaN: not given. Infinity: the loop's to judge (a drive fault).
        f = f if not math.isnan(f) else 0.0
        self.record_measurement(p, v, a, f, float(meta.timestamp.monotonic), stamp)

    async def _on_feedback(self, msg: Any, meta: pycyphal.transport.TransferFrom) -> None:
        if not self._from_drive(meta.source_node_id):
            return
        self.drive_readiness = int(msg.heartbeat.readiness.value)
        self.drive_health = int(msg.heartbeat.health.value)

    async def _publish(self) -> None:
        """The loop's command and readiness every drive period until closed: ends on cancellation or, should that be
        lost (Python 3.11's ``asyncio.wait_for`` inside a send can swallow one), once it is no longer the drive's
        task."""
        snapshot = np.empty(link.N_TX)
        next_at = time.monotonic()
        ready_t = self._readiness
        sent_enabled: bool | None = None
        readiness_due = next_at
        try:
            while self._task is asyncio.current_task():
                read_seqlocked(self.arrays.tx, snapshot)
                enabled = bool(snapshot[link.TX_ENABLE] != 0.0)
                if enabled != sent_enabled or time.monotonic() >= readiness_due:
                    await self._pub_readiness.publish(ready_t(ready_t.ENGAGED if enabled else ready_t.STANDBY))
                    sent_enabled, readiness_due = enabled, time.monotonic() + READINESS_PERIOD_S
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
