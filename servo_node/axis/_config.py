"""The control loop's configuration and its drive, read from the registers: gains, envelope, stop, deadman.

The one place where register values become a :class:`~servo_node.control.LoopConfig` and a
:class:`~servo_node.drive.Drive`; the loop itself knows nothing of registers.

What depends on the drive comes from its backend's class hooks (:class:`~servo_node.drive.Drive`): the envelope
where ``servo.envelope.*`` hold 0 (embedded joint: from the ``sim.*`` joint; a drive on a bus: the default
profile ``servo.profile.*`` and ``servo.torque_limit``), the default inertia and velocity gain, the drive's
command rate, whether the loop's clock may be stepped. Jerk (every backend): acceleration × loop rate / 20, so
that the acceleration takes at least 20 control periods to build up.
"""

from __future__ import annotations

import math

import pycyphal.application

from cyphal_common.errors import ConfigurationError
from cyphal_common.registers import RegisterReader

from ..control import Envelope, LoopConfig
from ..drive import Drive, backend
from ..setpoint import Floors

STOP_FLOOR_FRACTION = 0.05
"""A stop decelerates at least this fraction of the envelope's acceleration and jerk, whatever the registers
say, so that every stop from inside the envelope ends within a bound that is small compared to the motion."""


MAX_GAIN_PERIODS = 0.5
"""The velocity gain k is capped at this / period (k·T ≤ 0.5): the sampled loop then converges without
overshoot; at k·T = 2 it would oscillate (a 10 Hz loop with k = 20)."""


def backend_of(reg: RegisterReader) -> type[Drive]:
    """The :class:`~servo_node.drive.Drive` class of ``servo.drive.backend``.

    :raises ConfigurationError: the backend is unavailable (its optional dependency is missing).
    """
    return backend(reg.text("servo.drive.backend"))


def envelope_from_registers(reg: RegisterReader) -> Envelope:
    """The envelope: ``servo.envelope.*`` where set, else derived by the backend (see the module docstring).

    :raises ConfigurationError: the drive cannot move the joint (no force beyond friction, or a zero limit), or
        the backend is unavailable.
    """
    derived = backend_of(reg).derived_envelope(reg)
    v = reg.real("servo.envelope.velocity") or derived[0]
    a = reg.real("servo.envelope.acceleration") or derived[1]
    f = reg.real("servo.envelope.force") or derived[2]
    j = reg.real("servo.envelope.jerk") or a * reg.real("servo.loop_rate") / 20.0
    return Envelope(velocity=v, acceleration=a, jerk=j, force=f)


def setpoint_floors(env: Envelope) -> Floors:
    """The smallest limits a setpoint may ask for (see :data:`~servo_node.setpoint.FLOOR_FRACTION`)."""
    return Floors.of_envelope(env.velocity, env.acceleration, env.jerk, env.force)


def loop_config(reg: RegisterReader, notes: list[str] | None = None) -> LoopConfig:
    """The control loop's configuration from the registers; adjustments made for safety go into ``notes``.

    :raises ConfigurationError: see :func:`envelope_from_registers`.
    """
    notes = notes if notes is not None else []
    drive = backend_of(reg)
    mode = reg.text("servo.drive.mode")
    if mode not in drive.modes:
        raise ConfigurationError(
            f"servo.drive.mode {mode!r} is not available with servo.drive.backend "
            f"{reg.text('servo.drive.backend')!r} (it does {', '.join(drive.modes)})"
        )
    env = envelope_from_registers(reg)
    rate = reg.real("servo.loop_rate")
    inertia = reg.real("servo.control.inertia") or drive.default_inertia(reg)
    kp, kd = reg.reals("servo.control.torque_gains")
    compensation = reg.text("servo.drive.compensation") == "predict"
    k = reg.real("servo.control.velocity_gain") or drive.default_velocity_gain(reg, compensation)
    if k > MAX_GAIN_PERIODS * rate:
        notes.append(f"velocity gain {k:g} capped at {MAX_GAIN_PERIODS * rate:g} 1/s for the {rate:g} Hz loop")
        k = MAX_GAIN_PERIODS * rate
    drive_rate = reg.real("servo.drive.rate")
    command_rate = drive.command_rate(reg)
    if compensation and command_rate > 0.0 and k > MAX_GAIN_PERIODS * command_rate:
        # Each command is held for a drive period: the same bound as for the loop period.
        k = MAX_GAIN_PERIODS * command_rate
        notes.append(f"velocity gain capped at {k:g} 1/s for the {command_rate:g} Hz drive")
    if kd > inertia * rate:
        notes.append(f"torque gain K_d {kd:g} capped at J·rate = {inertia * rate:g} for the {rate:g} Hz loop")
        kd = inertia * rate
    profile_a = -reg.reals("servo.profile.acceleration")[0]
    stop_a = _stop_limit(reg.real("servo.stop.acceleration") or profile_a, env.acceleration, "acceleration", notes)
    stop_j = _stop_limit(reg.real("servo.stop.jerk") or reg.real("servo.profile.jerk"), env.jerk, "jerk", notes)
    tolerance = reg.real("servo.arrival_tolerance")
    return LoopConfig(
        rate_hz=rate,
        law=reg.text("servo.drive.mode"),
        velocity_gain=k,
        torque_gains=(kp, kd),
        inertia=inertia,
        feedback_timeout_s=reg.real("servo.drive.feedback_timeout"),
        envelope=env,
        stop_acceleration=stop_a,
        stop_jerk=stop_j,
        stepped_clock=reg.text("servo.loop_clock") == "stepped" and drive.stepped_clock,
        arrival_tolerance=tolerance,
        rest_velocity=reg.real("servo.stop.rest_velocity") or min(1e-3, tolerance / 1.0),
        stop_hold_max_s=reg.real("servo.stop.hold_max"),
        following_error_window=reg.real("servo.following_error.window"),
        following_error_time_s=reg.real("servo.following_error.time"),
        deadman_timeout_s=reg.real("servo.deadman_timeout"),
        realtime_priority=int(reg.real("servo.loop_priority")),
        compensation=compensation,
        drive_period_s=1.0 / drive_rate,
        trace_rate_hz=reg.real("servo.dynamics_rate"),
    )


def _stop_limit(value: float, envelope: float, what: str, notes: list[str]) -> float:
    """A stop's least deceleration or jerk, kept within [STOP_FLOOR_FRACTION, 1] of the envelope."""
    lo = STOP_FLOOR_FRACTION * envelope
    if value < lo:
        notes.append(f"stop {what} {value:g} raised to {lo:g} ({STOP_FLOOR_FRACTION:g} of the envelope)")
    return min(max(value, lo), envelope) if math.isfinite(value) else envelope


def drive_from_registers(reg: RegisterReader, node: pycyphal.application.Node, port_prefix: str = "") -> Drive:
    """The drive selected by ``servo.drive.backend`` (its ports prefixed by ``port_prefix`` in a multi-axis node).

    :raises ConfigurationError: the backend cannot be built from these registers.
    """
    return backend_of(reg).create(reg, node, port_prefix)
