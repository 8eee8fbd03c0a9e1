"""Setpoint intake of one axis: a received ``zubax.telega.ServoCommand`` and its reception time become a
:class:`Received` setpoint, or a counted and reported rejection.

Kept apart from the axis so that other ways in (a raw payload on the setpoint subject, a second command type)
join here, and so that the reception timestamp travels with the setpoint to where the loop is commanded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pycyphal
import zubax.telega

from .axis_registers import AxisRegisters
from .diagnostics import Diagnostics
from .reports import AxisCounters
from .setpoint import Floors, ProfileLimits, Rejected, Setpoint, interpret


@dataclass(frozen=True)
class Received:
    """A valid setpoint and when it arrived [second, on the axis's clock]."""

    setpoint: Setpoint
    received_at_s: float


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

    def accept(self, msg: zubax.telega.ServoCommand_1_0, received_at_s: float) -> Received | None:
        """The setpoint in ``msg``, or None if it is rejected (counted; reported when the reason changes)."""
        reg = self._reg
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
            self.floors,
        )
        if isinstance(result, Rejected):
            self.reject(result.reason)
            return None
        if self.fault:
            self.reject(self.fault)
            return None
        self._reported_rejection = ""
        return Received(result, received_at_s)

    def reject(self, reason: str) -> None:
        """Count a rejected setpoint; report it when the reason changes (one report per kind of bad input)."""
        c = self._counters
        c.setpoints_rejected += 1
        c.last_rejection = reason
        c.last_rejection_at = time.monotonic()
        if reason != self._reported_rejection:
            self._reported_rejection = reason
            self._diag.report(f"{self._reg.names.label}setpoint rejected: {reason}")
