"""The control loop's configuration, read from the registers: gains, the drive, the envelope and the stop.

The one place where register values become a :class:`~servo_node.control.LoopConfig`; the loop itself knows
nothing of registers.
"""

from __future__ import annotations

from .control import LoopConfig
from .drive import sim_joint_from_registers
from .registers import RegisterReader

DEFAULT_VELOCITY_GAIN = {"sim": 20.0, "udral": 5.0}
"""Position gain of the velocity law [1/s] when the register holds 0. Over a bus the loop closes through the
round trip (setpoint out, dynamics back); a pure delay τ in this loop rings once k·τ nears π/2, so a drive on
the bus gets a gain that tolerates about 0.2 s (scheduling stalls of a loaded host included)."""


def loop_config(reg: RegisterReader) -> LoopConfig:
    """The control loop's configuration from the registers."""
    sim = sim_joint_from_registers(reg)
    backend = reg.text("servo.drive.backend")
    inertia = reg.real("servo.control.inertia") or (sim.inertia if backend == "sim" else 1.0)
    kp, kd = reg.reals("servo.control.torque_gains")
    return LoopConfig(
        rate_hz=reg.real("servo.loop_rate"),
        law=reg.text("servo.drive.mode"),
        velocity_gain=reg.real("servo.control.velocity_gain") or DEFAULT_VELOCITY_GAIN[backend],
        torque_gains=(kp, kd),
        inertia=inertia,
        drive=backend,
        feedback_timeout_s=reg.real("servo.drive.feedback_timeout"),
        stop_acceleration=reg.real("servo.stop.acceleration"),
        stop_jerk=reg.real("servo.stop.jerk"),
        sim_joint=sim if backend == "sim" else None,
        stepped_clock=reg.text("servo.loop_clock") == "stepped",
        arrival_tolerance=reg.real("servo.arrival_tolerance"),
        realtime_priority=int(reg.real("servo.loop_priority")),
    )
