"""Setpoint intake of one axis: a received ``zubax.telega.ServoCommand`` and its reception time become a
:class:`Received` setpoint, or a counted and reported rejection.

Kept apart from the axis so that other ways in (a raw payload on the setpoint subject, a second command type)
join here, and so that the reception timestamp travels with the setpoint to where the loop is commanded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pycyphal
import pycyphal.application
import pycyphal.dsdl
import zubax.telega
from pycyphal.transport.can import CANTransport

from ..diagnostics import Diagnostics
from ..registers import AxisRegisters
from ..setpoint import (
    Floors,
    ProfileLimits,
    Rejected,
    ServoCommandFields,
    Setpoint,
    interpret,
    payload_rejection,
    servo_command_fields,
)
from ._counters import AxisCounters


@dataclass(frozen=True)
class Received:
    """A valid setpoint, when it arrived [second, on the axis's clock] and from which node."""

    setpoint: Setpoint
    received_at_s: float
    source: int | None = None
    """The publisher's node-ID (None: anonymous, or not from the bus)."""


def reception_time_s(meta: pycyphal.transport.TransferFrom) -> float:
    """The transport's reception timestamp [second, ``time.monotonic``] of a transfer."""
    return float(meta.timestamp.monotonic)


class SetpointIntake:
    """Validates setpoints against the axis's register defaults; counts and reports rejections."""

    def __init__(self, registers: AxisRegisters, counters: AxisCounters, diagnostics: Diagnostics) -> None:
        self._reg = registers
        self._counters = counters
        self._diag = diagnostics
        self._reported_rejection = ""
        self.floors = Floors()
        """The smallest limits a setpoint may ask for (set from the envelope once the axis is configured)."""
        self.fault = ""
        """Non-empty: the axis cannot actuate (its configuration); every setpoint is refused with this reason."""

    def accept(self, fields: ServoCommandFields, received_at_s: float, source: int | None = None) -> Received | None:
        """The setpoint in a ServoCommand's ``fields``, or None if it is rejected (counted; reported when the reason
        changes)."""
        position, velocity, force, velocity_pair, acceleration_pair, jerk = fields
        return self.accept_fields(position, velocity, force, velocity_pair, acceleration_pair, jerk, received_at_s,
                                  source)

    def accept_fields(
        self, position: float, velocity: float, force: float, velocity_reverse_forward: Sequence[float],
        deceleration_acceleration: Sequence[float], jerk: float, received_at_s: float, source: int | None = None,
        zero_velocity_holds: bool = False,
    ) -> Received | None:
        """A setpoint from its fields (any face: Telega, UDRAL), validated against the axis's defaults and floors."""
        reg = self._reg
        v_lim = reg.reals("servo.profile.velocity")
        a_lim = reg.reals("servo.profile.acceleration")
        defaults = ProfileLimits(v_lim[0], v_lim[1], a_lim[0], a_lim[1], reg.real("servo.profile.jerk"))
        result = interpret(position, velocity, force, velocity_reverse_forward, deceleration_acceleration, jerk,
                           defaults, reg.real("servo.torque_limit"), self.floors, zero_velocity_holds)
        if isinstance(result, Rejected):
            self.reject(result.reason)
            return None
        if self.fault:
            self.reject(self.fault)
            return None
        self._reported_rejection = ""
        return Received(result, received_at_s, source)

    def reject(self, reason: str) -> None:
        """Count a rejected setpoint; report it when the reason changes (one report per kind of bad input)."""
        c = self._counters
        c.setpoints_rejected += 1
        c.last_rejection = reason
        c.last_rejection_at = time.monotonic()
        if reason != self._reported_rejection:
            self._reported_rejection = reason
            self._diag.report(f"{self._reg.names.label}setpoint rejected: {reason}")


BACKLOG_FRAMES = 16
"""Queued setpoint frames kept when the node falls behind; older ones are dropped unseen (coalescing)."""

PUBLISHER_WINDOW_S = 1.0
"""Publishers on the setpoint subject are counted over this window; more than one is a warning."""


class SetpointPort:
    """The setpoint subject below pycyphal's typed subscriber: raw transfers, so the payload size can be judged.

    Only ServoCommand's structural supertypes are setpoints (:func:`~servo_node.setpoint.payload_rejection`);
    what is queued is coalesced (only the newest valid setpoint is applied, so a flood costs no memory and never
    delays the deadman, which counts from the reception timestamp); publishers are counted per source node-ID.
    """

    def __init__(self, node: pycyphal.application.Node, port_name: str) -> None:
        """:raises pycyphal.application.PortNotConfiguredError: the subject is not configured (port off)."""
        # pycyphal's own resolution (registers uavcan.sub.<name>.id/.type), as make_subscriber does (pinned 1.27).
        subject_id = node._resolve_port(zubax.telega.ServoCommand_1_0, "sub", port_name)
        extent = pycyphal.dsdl.get_extent_bytes(zubax.telega.ServoCommand_1_0)
        transport = node.presentation.transport
        self._session = transport.get_input_session(
            pycyphal.transport.InputSessionSpecifier(pycyphal.transport.MessageDataSpecifier(subject_id), None),
            pycyphal.transport.PayloadMetadata(extent),
        )
        self.zero_padded = _pads_with_zeros(transport)
        self._last_seen: dict[int, float] = {}
        self.coalesced = 0
        """Queued setpoints not applied because newer ones were behind them: dropped unseen (a flood), or valid
        and superseded within one batch (the axis counts these)."""

    async def receive(self, timeout_s: float) -> list[pycyphal.transport.TransferFrom]:
        """Every transfer queued now, oldest first (waits up to ``timeout_s`` for the first)."""
        loop = asyncio.get_running_loop()
        first = await self._session.receive(loop.time() + timeout_s)
        if first is None:
            return []
        self.coalesced += self._trim_backlog()
        batch = [first]
        while (t := await self._session.receive(0.0)) is not None:
            batch.append(t)
        for t in batch:
            if t.source_node_id is not None:
                self._last_seen[t.source_node_id] = float(t.timestamp.monotonic)
        return batch

    def _trim_backlog(self) -> int:
        """Drop all but the newest :data:`BACKLOG_FRAMES` queued frames; returns how many were dropped.

        A flood faster than the node decodes must neither grow memory nor delay the newest setpoint behind stale
        ones (which the deadman would refuse anyway). pycyphal 1.27's UDP input session queues raw frames in
        ``_frame_queue`` (the version is pinned for the reassembly guard); other transports are drained as they are.
        """
        queue = getattr(self._session, "_frame_queue", None)
        if not isinstance(queue, asyncio.Queue):
            return 0
        dropped = 0
        while queue.qsize() > BACKLOG_FRAMES:
            queue.get_nowait()
            dropped += 1
        return dropped

    def publishers(self, now_s: float) -> int:
        """Distinct source node-IDs seen on the subject within :data:`PUBLISHER_WINDOW_S` of ``now_s``."""
        return sum(1 for t in self._last_seen.values() if now_s - t <= PUBLISHER_WINDOW_S)

    def close(self) -> None:
        """Close the input session; idempotent."""
        self._session.close()


def decode_setpoint(transfer: pycyphal.transport.TransferFrom, zero_padded: bool) -> ServoCommandFields | str:
    """The ServoCommand's fields in a raw transfer, or why it has none (a size no ServoCommand prefix has)."""
    payload = b"".join(transfer.fragmented_payload)
    reason = payload_rejection(payload, zero_padded)
    return reason if reason is not None else servo_command_fields(payload)


def _pads_with_zeros(transport: pycyphal.transport.Transport) -> bool:
    """CAN FD pads a frame to the next DLC size with zeros (a redundant transport: any CAN FD inferior)."""
    inferiors = getattr(transport, "inferiors", None) or [transport]
    return any(isinstance(t, CANTransport) and t.protocol_parameters.mtu > 8 for t in inferiors)
