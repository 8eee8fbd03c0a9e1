"""The control loop's configuration and its drive, read from the registers: gains, envelope, stop, deadman.

The one place where register values become a :class:`~servo_node.control.LoopConfig` and a
:class:`~servo_node.drive.Drive`; the loop itself knows nothing of registers.

The envelope (hard limits no setpoint can exceed): ``servo.envelope.*``, or where a register holds 0, derived
from what the drive can do. Embedded joint: velocity 0.95·``sim.max_velocity``, acceleration
0.8·(``sim.max_force`` − ``sim.static_friction``)/``sim.inertia`` (springs and loads are not included: set the
register if they matter), force ``sim.max_force``. A drive on the bus: the default profile
(``servo.profile.*``) and ``servo.torque_limit``. Jerk (both): acceleration × loop rate / 20, so that the
acceleration takes at least 20 control periods to build up.
"""

from __future__ import annotations

import math

import pycyphal.application

from cyphal_common.joint_registers import joint_params
from sim_plant import JointParams

from .control import Envelope, LoopConfig
from .drive import Drive, SimDrive
from .errors import ConfigurationError
from .registers import RegisterReader
from .setpoint import Floors

DEFAULT_VELOCITY_GAIN = {"sim": 20.0, "udral": 40.0, "udral-off": 5.0}
"""Position gain of the velocity law [1/s] when the register holds 0. A drive on the bus with the link model
(``servo.drive.compensation`` = predict): the feedback acts on the position predicted over the measured delay, so
the delay is outside the loop and the gain is bounded by the drive period T_d instead (k·T_d = 0.2 at 200 Hz; a
delay misjudged by δ leaves k·δ of phase, 0.4 rad for δ = 10 ms). Without it (``off``) the loop closes through the
round trip; a pure delay τ in this loop rings once k·τ nears π/2, so it gets a gain that tolerates about 0.2 s
(scheduling stalls of a loaded host included)."""

STOP_FLOOR_FRACTION = 0.05
"""A stop decelerates at least this fraction of the envelope's acceleration and jerk, whatever the registers
say, so that every stop from inside the envelope ends within a bound that is small compared to the motion."""

SETPOINT_FLOOR_FRACTION = 1e-4
"""A setpoint's acceleration, jerk and force limits must be at least this fraction of the envelope's: below it a
motion would take practically forever (a jerk of 1e-45 plans a stop of 1e46 s) — such setpoints are refused."""

MAX_GAIN_PERIODS = 0.5
"""The velocity gain k is capped at this / period (k·T ≤ 0.5): the sampled loop then converges without
overshoot; at k·T = 2 it would oscillate (a 10 Hz loop with k = 20)."""


def sim_joint_from_registers(reg: RegisterReader) -> JointParams:
    """The joint the sim backend steps inside the control loop (the ``sim.*`` registers, shared with sim-plant)."""
    return joint_params(reg)


def envelope_from_registers(reg: RegisterReader) -> Envelope:
    """The envelope: ``servo.envelope.*`` where set, else derived (see the module docstring).

    :raises ConfigurationError: the drive cannot move the joint (no force beyond friction, or a zero limit).
    """
    backend = reg.text("servo.drive.backend")
    if backend == "sim":
        sim = sim_joint_from_registers(reg)
        usable = sim.max_force - sim.static_friction
        derived = (0.95 * sim.max_velocity, 0.8 * usable / sim.inertia, sim.max_force)
        if usable <= 0.0:
            raise ConfigurationError(
                f"the embedded joint cannot move: sim.max_force {sim.max_force:g} does not exceed "
                f"sim.static_friction {sim.static_friction:g}"
            )
    else:
        v_lim, a_lim = reg.reals("servo.profile.velocity"), reg.reals("servo.profile.acceleration")
        derived = (max(map(abs, v_lim)), max(map(abs, a_lim)), reg.real("servo.torque_limit"))
    v = reg.real("servo.envelope.velocity") or derived[0]
    a = reg.real("servo.envelope.acceleration") or derived[1]
    f = reg.real("servo.envelope.force") or derived[2]
    j = reg.real("servo.envelope.jerk") or a * reg.real("servo.loop_rate") / 20.0
    return Envelope(velocity=v, acceleration=a, jerk=j, force=f)


def setpoint_floors(env: Envelope) -> Floors:
    """The smallest limits a setpoint may ask for (see :data:`SETPOINT_FLOOR_FRACTION`)."""
    k = SETPOINT_FLOOR_FRACTION
    return Floors(acceleration=k * env.acceleration, jerk=k * env.jerk, force=k * env.force)


def loop_config(reg: RegisterReader, notes: list[str] | None = None) -> LoopConfig:
    """The control loop's configuration from the registers; adjustments made for safety go into ``notes``.

    :raises ConfigurationError: see :func:`envelope_from_registers`.
    """
    notes = notes if notes is not None else []
    backend = reg.text("servo.drive.backend")
    env = envelope_from_registers(reg)
    rate = reg.real("servo.loop_rate")
    sim = sim_joint_from_registers(reg)
    inertia = reg.real("servo.control.inertia") or (sim.inertia if backend == "sim" else 1.0)
    kp, kd = reg.reals("servo.control.torque_gains")
    compensation = reg.text("servo.drive.compensation") == "predict"
    gain_key = backend if backend == "sim" or compensation else "udral-off"
    k = reg.real("servo.control.velocity_gain") or DEFAULT_VELOCITY_GAIN[gain_key]
    if k > MAX_GAIN_PERIODS * rate:
        notes.append(f"velocity gain {k:g} capped at {MAX_GAIN_PERIODS * rate:g} 1/s for the {rate:g} Hz loop")
        k = MAX_GAIN_PERIODS * rate
    drive_rate = reg.real("servo.drive.rate")
    if backend == "udral" and compensation and k > MAX_GAIN_PERIODS * drive_rate:
        # Each command is held for a drive period: the same bound as for the loop period.
        k = MAX_GAIN_PERIODS * drive_rate
        notes.append(f"velocity gain capped at {k:g} 1/s for the {drive_rate:g} Hz drive")
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
        stepped_clock=reg.text("servo.loop_clock") == "stepped" and backend == "sim",
        arrival_tolerance=tolerance,
        rest_velocity=reg.real("servo.stop.rest_velocity") or min(1e-3, tolerance / 1.0),
        stop_hold_max_s=reg.real("servo.stop.hold_max"),
        following_error_window=reg.real("servo.following_error.window"),
        following_error_time_s=reg.real("servo.following_error.time"),
        deadman_timeout_s=reg.real("servo.deadman_timeout"),
        realtime_priority=int(reg.real("servo.loop_priority")),
        compensation=compensation,
        drive_period_s=1.0 / drive_rate,
    )


def _stop_limit(value: float, envelope: float, what: str, notes: list[str]) -> float:
    """A stop's least deceleration or jerk, kept within [STOP_FLOOR_FRACTION, 1] of the envelope."""
    lo = STOP_FLOOR_FRACTION * envelope
    if value < lo:
        notes.append(f"stop {what} {value:g} raised to {lo:g} ({STOP_FLOOR_FRACTION:g} of the envelope)")
    return min(max(value, lo), envelope) if math.isfinite(value) else envelope


def drive_from_registers(reg: RegisterReader, node: pycyphal.application.Node, port_prefix: str = "") -> Drive:
    """The drive selected by ``servo.drive.backend``: the embedded joint, or a UDRAL drive on the bus (its ports
    prefixed by ``port_prefix`` in a multi-axis node)."""
    if reg.text("servo.drive.backend") == "sim":
        return SimDrive(sim_joint_from_registers(reg))
    from .drive.cyphal import make_drive  # Imports the generated UDRAL types: only when this backend is used.

    return make_drive(reg, node, port_prefix)
