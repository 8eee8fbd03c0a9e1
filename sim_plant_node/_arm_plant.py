"""The coupled arm behind ``sim-plant --arm``: one :class:`~sim_plant.arm_motors.ArmPlant` stepped in real time by a
thread, and a per-joint view with the interface the UDRAL node drives (:class:`~sim_plant_node._plant.JointDrive`).

Kept free of pycyphal like :mod:`sim_plant_node._plant`, whose setpoint semantics it shares: position, velocity and
force control as Webots, passive = force control with zero torque (the arm then falls under gravity: no brake), the
quick stop a velocity ramp to rest at the joint's full torque. With ``brake`` a passive joint is held instead: a
holding brake (velocity control at 0 with the joint's full torque), as an arm's joints hold when their motors are off;
the arm then starts held at its start pose and stays where a stop left it. The quick stop's bound is
|v₀| / deceleration + :data:`~sim_plant_node._plant.QUICK_STOP_MARGIN_S`
(a coupled joint has no single inertia to bound it by).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from sim_plant import JointParams
from sim_plant.arm import ArmParams
from sim_plant.arm_motors import M_FORCE, M_MOTOR_FORCE, ArmMotor, ArmPlant

from ._plant import QUICK_STOP_MARGIN_S, REST_VELOCITY, Command, Mode, RealTimeStepper, Sample

_logger = logging.getLogger(__name__)

JOINTS = ("base", "shoulder", "elbow")
"""The arm's joints in order; also the prefixes of their UDRAL ports and registers."""


class ArmDrive(RealTimeStepper):
    """Three motor joints on one coupled arm, stepped by a daemon thread so that simulated time equals wall time."""

    def __init__(self, params: ArmParams, motors: Sequence[ArmMotor], position: Sequence[float],
                 step_rate_hz: float, brake: bool = False) -> None:
        """The arm at ``position``, every joint passive (held if ``brake``); :meth:`start` runs time."""
        super().__init__(step_rate_hz, "sim-plant-arm")
        self.plant = ArmPlant(params, motors, position)
        self._accel = [0.0, 0.0, 0.0]
        self.brake = brake
        self.joints = tuple(ArmJoint(self, i, m) for i, m in enumerate(motors))
        for j in self.joints:
            j._apply_passive()

    def _step(self, gap: float) -> None:
        if gap <= 0.0:
            return
        try:
            for j in self.joints:
                j._quick_stop_step(gap)
            v0 = self.plant.velocities
            self.plant.step(gap)
            self._accel = list((self.plant.velocities - v0) / gap)
        except Exception:  # Never let the physics thread die silently.
            _logger.exception("Arm step failed; every joint is made passive")
            for j in self.joints:
                j._apply_passive()


class ArmJoint:
    """Joint ``index`` of an :class:`ArmDrive`, as a :class:`~sim_plant_node._plant.JointDrive` (thread-safe)."""

    def __init__(self, drive: ArmDrive, index: int, motor: ArmMotor) -> None:
        self._drive = drive
        self._i = index
        self.params = JointParams(max_velocity=motor.max_velocity, max_force=motor.max_force)
        """Only ``kind``, ``max_velocity`` and ``max_force`` mean something here (the arm has its own masses)."""
        self._mode = Mode.PASSIVE
        self._stop = (0.0, 0.0, 0.0, 0.0)  # quick stop: start (sim time), v0, deceleration, bound

    @property
    def alive(self) -> bool:
        """True while the arm's stepping thread runs."""
        return self._drive.alive

    def apply(self, command: Command) -> None:
        """Put the joint's motor under the command (Webots semantics); ends a quick stop."""
        with self._drive._lock:
            if command.mode is Mode.PASSIVE:
                self._apply_passive()
                return
            if command.mode not in (Mode.POSITION, Mode.VELOCITY, Mode.FORCE):
                raise ValueError(f"{command.mode.value} is not a command of an arm joint")
            p, i = self._drive.plant, self._i
            p.set_motor_force(i, command.motor_force)
            if command.mode is Mode.FORCE:
                p.set_force(i, command.force)
            else:
                p.set_position(i, command.target_position)
                p.set_velocity(i, command.velocity)
            self._mode = command.mode

    def passive(self) -> None:
        """Motor off: the joint is free (gravity and the other joints move it)."""
        with self._drive._lock:
            self._apply_passive()

    def _apply_passive(self) -> None:
        p, i = self._drive.plant, self._i
        if self._drive.brake:  # The holding brake: velocity 0 with the joint's full torque.
            p.set_position(i, math.inf)
            p.set_velocity(i, 0.0)
            p.set_motor_force(i, self.params.max_force)
        else:
            p.set_force(i, 0.0)
            p.set_motor_force(i, 0.0)
        self._mode = Mode.PASSIVE

    def quick_stop(self, deceleration: float) -> float:
        """Ramp the joint's velocity to 0 at ``deceleration`` with its full torque, then passive; returns the bound
        [s] after which it goes passive anyway."""
        if not (math.isfinite(deceleration) and deceleration > 0.0):
            raise ValueError(f"quick-stop deceleration must be a finite positive number, got {deceleration!r}")
        with self._drive._lock:
            p, i = self._drive.plant, self._i
            if self.params.max_force <= 0.0:
                self._apply_passive()
                return 0.0
            v0 = float(p.state[3 + i])
            bound = abs(v0) / deceleration + QUICK_STOP_MARGIN_S
            self._stop = (p.time, v0, deceleration, bound)
            p.set_position(i, math.inf)
            p.set_velocity(i, v0)
            p.set_motor_force(i, self.params.max_force)
            self._mode = Mode.QUICK_STOP
            return bound

    def _quick_stop_step(self, dt: float) -> None:
        """With the lock held, before a step of dt: the ramp's next target, or passive once at rest/at the bound."""
        if self._mode is not Mode.QUICK_STOP:
            return
        p, i = self._drive.plant, self._i
        start, v0, dec, bound = self._stop
        elapsed = p.time - start
        v = float(p.state[3 + i])
        if (abs(v0) <= dec * elapsed and abs(v) <= REST_VELOCITY) or elapsed >= bound:
            self._apply_passive()
            return
        p.set_velocity(i, math.copysign(max(0.0, abs(v0) - dec * (elapsed + dt)), v0))

    def sample(self) -> Sample:
        """The joint's state after the latest step."""
        with self._drive._lock:
            p, i = self._drive.plant, self._i
            passive_or_force = self._mode is Mode.FORCE or (self._mode is Mode.PASSIVE and not self._drive.brake)
            force = float(p.motors[i, M_FORCE]) if passive_or_force else float(p.motor_force_feedbacks[i])
            return Sample(
                monotonic=self._drive._stamp,
                sim_time=p.time,
                position=float(p.state[i]),
                velocity=float(p.state[3 + i]),
                acceleration=float(self._drive._accel[i]),
                force=force,
                available_force=0.0 if self._mode is Mode.PASSIVE else float(p.motors[i, M_MOTOR_FORCE]),
                mode=self._mode,
            )
