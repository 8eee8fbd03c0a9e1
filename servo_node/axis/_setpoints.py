"""An axis's setpoint path: every way a command reaches its loop, through one gate.

The raw setpoint subject (its task), the UDRAL setpoints, readiness, coordinated starts and a mimic leader's
samples all end in :meth:`SetpointPath.apply` or the follower's engagement; what may command the loop is judged
here (a follower, not running, a persisting error, a node-ID collision), the arming gate arms, and the loop gets
the command. Decoding and validation are :mod:`._intake`'s, staging :mod:`servo_node.staging`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pycyphal
import uavcan.time
import zubax.service

from cyphal_common.clocks import system_minus_monotonic_s

from ..arming import ServoState
from ..control import _layout as L
from ..diagnostics import Severity
from ..errors import ErrorCode
from ..setpoint import Setpoint
from ..staging import Start
from ._intake import Received, SetpointPort, decode_setpoint, reception_time_s
from ._interfaces import TELEGA, InterfaceArbiter
from ._state import AxisState
from ._udral_face import Fields

FAILS_AGAIN = frozenset({ErrorCode.INFEASIBLE, ErrorCode.NUMERICAL_FAILURE, ErrorCode.FOLLOWING_ERROR})
"""Errors the very setpoint that raised them cannot end: the loop would plan it the same way again (infeasible,
numerical), or refuses it (a motion the joint could not follow is tried again only with a different setpoint)."""

_logger = logging.getLogger(__name__)


class SetpointPath:
    """Setpoints, readiness, starts and leader samples in; the gate and the loop commanded.

    :param port: the raw setpoint subject (None: not configured).
    """

    def __init__(self, state: AxisState, port: SetpointPort | None) -> None:
        self._s = state
        self.port = port
        self._reported_start_refusal = ""
        self.interfaces = InterfaceArbiter(state.gate.deadman_timeout_s)
        """Which setpoint interface commands the axis (one at a time, :mod:`._interfaces`)."""
        self._reported_conflict = ""

    async def run(self) -> None:
        """Setpoints from the raw subject: what queued up is judged in order, only the newest valid one applied."""
        s = self._s
        port = self.port
        assert port is not None
        try:
            while not s.closed:
                try:
                    newest: Received | None = None
                    valid = 0
                    for transfer in await port.receive(1.0):
                        decoded = decode_setpoint(transfer, port.zero_padded)
                        if isinstance(decoded, str):
                            s.counters.setpoints_bad_payload += 1
                            s.intake.reject(decoded)
                            continue
                        at_s = s.now() if s.loop_clock == "simulated" else reception_time_s(transfer)
                        received = s.intake.accept(decoded, at_s, transfer.source_node_id)
                        if received is not None:
                            newest, valid = received, valid + 1
                    if newest is not None:
                        port.coalesced += valid - 1  # Valid, but a newer one was queued behind: not applied.
                        self.apply(newest)
                    self._watch_publishers(port.publishers(time.monotonic()))
                    s.counters.setpoints_coalesced = port.coalesced
                except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
                    raise
                except Exception:  # A bug here must not end the intake: log it and keep going.
                    _logger.exception("%sSetpoint intake failed", s.names.label)
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass

    def _watch_publishers(self, count: int) -> None:
        """Publishers seen on the setpoint subject in the last second; more than one is a warning (on change)."""
        s = self._s
        before, s.counters.setpoint_publishers = s.counters.setpoint_publishers, count
        if count > 1 and before <= 1:
            s.diag.report(f"{s.names.label}{count} publishers on the setpoint subject: they fight each other")
        elif count <= 1 < before:
            s.diag.report(f"{s.names.label}one publisher on the setpoint subject again", Severity.INFO)

    def set_collision(self, collided: bool) -> None:
        """Another node uses our node-ID: stop and refuse setpoints until that is over (or the node restarts)."""
        s = self._s
        s.collided = collided
        if collided:
            s.gate.on_error("node-ID collision: another node uses this node-ID", ErrorCode.NODE_ID_COLLISION)
            if s.loop is not None:
                s.loop.stop()
        elif s.gate.error_code is ErrorCode.NODE_ID_COLLISION:
            s.gate.on_recovered("the node-ID collision is over; waiting for a setpoint")

    def on_udral_setpoint(self, fields: Fields | str, meta: pycyphal.transport.TransferFrom, interface: str) -> None:
        """A UDRAL setpoint (``interface``: single or group): the same intake, gate and loop as the Telega one."""
        s = self._s
        if isinstance(fields, str):
            s.intake.reject(fields)
            return
        at_s = s.now() if s.loop_clock == "simulated" else reception_time_s(meta)
        position, velocity, force, v_lim, a_lim = fields
        received = s.intake.accept_fields(position, velocity, force, v_lim, a_lim, 0.0, at_s,
                                          meta.source_node_id, zero_velocity_holds=True)
        if received is not None:
            self.apply(received, interface)
            s.udral.applied()  # Published after every setpoint, even in STANDBY (the service's rule).

    def on_udral_readiness(self, value: int, meta: pycyphal.transport.TransferFrom) -> None:
        """UDRAL readiness: the same gate as the Zubax one."""
        s = self._s
        s.gate.on_readiness(value, s.now() if s.loop_clock == "simulated" else reception_time_s(meta))
        s.udral.applied()

    async def on_readiness(self, msg: zubax.service.Readiness_1_0, meta: pycyphal.transport.TransferFrom) -> None:
        """Readiness (the ``readiness`` subject) into the arming gate."""
        s = self._s
        received_at_s = s.now() if s.loop_clock == "simulated" else reception_time_s(meta)
        s.gate.on_readiness(int(msg.value), received_at_s)

    async def on_start(
        self, msg: uavcan.time.SynchronizedTimestamp_1_0, meta: pycyphal.transport.TransferFrom
    ) -> None:
        """A coordinated start: its synchronized time mapped onto the loop's clock (both read now)."""
        s = self._s
        received_at_s = s.now() if s.loop_clock == "simulated" else reception_time_s(meta)
        at_sync_s = int(msg.microsecond) * 1e-6 - s.timesync.offset_s  # On this node's system clock.
        if s.loop_clock == "simulated":
            at_s = s.now() + (at_sync_s - time.time())
        else:
            at_s = at_sync_s - system_minus_monotonic_s()
        self.start_staged(at_s, received_at_s, meta.source_node_id)

    def apply(self, received: Received, interface: str = TELEGA) -> bool:
        """The one place where a setpoint commands the loop; returns True if it was applied (counted either way).

        ``interface``: the port it came through; one interface at a time commands the axis (:mod:`._interfaces`).
        With a start subject (:mod:`servo_node.staging`) a setpoint other than the active one waits for its start."""
        s = self._s
        sp, rx = received.setpoint, received.received_at_s
        # The interface in force holds the axis while it publishes, even setpoints an error refuses: its failed
        # setpoint repeated must not let another interface's setpoint take the axis after the deadman timeout.
        if not self._may_take() or not self._admitted(interface, rx) or self._refused_for_error(sp):
            return False
        if s.staging is None:
            return self._command(sp, rx, rx)
        # Only a command in force is active: after an expiry or a stop even the same setpoint waits for a start.
        active = s.setpoint if s.gate.update(s.now()) is ServoState.ENGAGED else None
        got = s.staging.offer(sp, rx, active, received.source)
        if got is None:
            s.counters.setpoints_staged += 1
            return False
        if isinstance(got, Start):  # Its start came first.
            s.counters.setpoints_staged += 1
            return self._command_start(got)
        return self._command(sp, rx, got)

    def _admitted(self, interface: str, received_at_s: float) -> bool:
        """False (counted as rejected, with the reason; reported once per conflict) if another setpoint interface
        commands the axis."""
        s = self._s
        holder = self.interfaces.holder
        why = self.interfaces.admit(interface, received_at_s)
        if why is None:
            if self._reported_conflict and holder != interface:
                s.diag.report(f"{s.names.label}{interface} commands this axis now ({holder} fell silent)",
                              Severity.INFO)
                self._reported_conflict = ""
            return True
        c = s.counters
        c.setpoints_rejected += 1
        c.last_rejection, c.last_rejection_at = why, time.monotonic()
        if self._reported_conflict != interface:
            self._reported_conflict = interface
            s.diag.report(f"{s.names.label}{why}")
        return False

    def start_staged(self, at_s: float, received_at_s: float, source: int | None) -> bool:
        """A start message from node ``source`` for ``at_s`` (loop clock), received at ``received_at_s``: apply the
        staged setpoint with its plan starting at ``at_s``; returns True if it was applied. A refusal is counted and
        reported once per reason (``sys.status`` ``refused`` shows the latest)."""
        if self._s.staging is None:
            return False
        started = self._s.staging.start(at_s, received_at_s, source)
        if started is None:
            return False  # It waits for its setpoint (which left before it, on another subject).
        if isinstance(started, str):
            self.refuse_start(started)
            return False
        self._reported_start_refusal = ""
        return (self._may_take() and not self._refused_for_error(started.setpoint)
                and self._command_start(started))

    def _command_start(self, start: Start) -> bool:
        """A staged setpoint released by its start; counted in ``starts`` if the gate let it through."""
        applied = self._command(start.setpoint, start.received_at_s, start.at_s)
        if applied:
            self._s.counters.starts += 1
        return applied

    def refuse_start(self, reason: str) -> None:
        """Count a start that applied nothing; report it once per reason."""
        s = self._s
        s.counters.starts_refused += 1
        s.counters.last_refusal = f"start: {reason}"
        if reason != self._reported_start_refusal:
            self._reported_start_refusal = reason
            s.diag.report(f"{s.names.label}start refused: {reason}")

    def _may_take(self) -> bool:
        """False (counted) if no setpoint may command the loop now, whatever its interface: a follower, not running,
        another node with our node-ID."""
        s = self._s
        c = s.counters
        if s.follower is not None:
            s.follower.ignore_setpoint(c)  # It moves with its leader only: a stray publisher can't fight it.
            return False
        if s.loop is None or s.halting:
            c.setpoints_ignored_unarmed += 1  # Still initialising, or stopping for good.
            return False
        if s.collided:
            c.setpoints_ignored_error += 1
            return False
        return True

    def _refused_for_error(self, sp: Setpoint) -> bool:
        """True (counted) if the axis's error persists whatever this setpoint (:meth:`_error_persists`)."""
        s = self._s
        if s.gate.update(s.now()) is ServoState.ERROR and self._error_persists(sp):
            s.counters.setpoints_ignored_error += 1
            return True
        return False

    def _command(self, sp: Setpoint, received_at_s: float, at_s: float) -> bool:
        """Through the arming gate (deadman from ``received_at_s``) to the loop, to take effect at ``at_s``."""
        s = self._s
        c = s.counters
        if not s.gate.on_setpoint(received_at_s):
            c.setpoints_ignored_unarmed += 1
            return False
        c.setpoints_accepted += 1
        # Every valid setpoint goes to the loop with its reception time (the loop's deadman counts from it); the
        # loop re-plans only a different one (or after expiry, standby or an error).
        if sp != s.setpoint:
            s.failed_setpoint = None
        s.setpoint = sp
        assert s.loop is not None
        s.loop.command(sp, at_s, received_at_s)
        s.feedback_due.set()
        return True

    def on_leader_sample(self, received_at_s: float) -> None:
        """Mimic: a leader sample (engaged, healthy leader) arms the gate as a setpoint does, and engages the loop
        in mimic mode if it does not follow already (it gears in from where the joint is, without a step)."""
        s = self._s
        f, loop = s.follower, s.loop
        if f is None or loop is None or s.halting or s.collided or not f.leader_ok:
            return
        if s.gate.update(s.now()) is ServoState.ERROR and self._loop_refuses_motion():
            return
        if not s.gate.on_setpoint(received_at_s):
            return
        sample = loop.sample()
        if not (sample.engaged and sample.mode == L.MODE_MIMIC):
            s.counters.setpoints_accepted += 1
            loop.follow(f.limits(), received_at_s)
            s.feedback_due.set()

    def _loop_refuses_motion(self) -> bool:
        """The drive is silent or its feedback distrusted, or a stop is still braking past its bound: the loop
        refuses motion until that clears (so the gate must not report ENGAGED for a setpoint the loop drops)."""
        sample = self._s.started_loop().sample()
        return sample.error in (ErrorCode.DRIVE_LOST, ErrorCode.STOP_TIMEOUT) or sample.feedback_distrusted != 0

    def _error_persists(self, sp: Setpoint) -> bool:
        """True if this setpoint cannot end the error: the loop would refuse it, or it is the one that failed."""
        s = self._s
        if self._loop_refuses_motion() or (s.drive is not None and s.drive.fault() is not None):
            return True  # A drive fault holds until a re-arm.
        if s.gate.error_code in FAILS_AGAIN:
            return sp == s.failed_setpoint  # The very setpoint that failed: the loop refuses it again.
        return False
