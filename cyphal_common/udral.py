"""Build and read the UDRAL servo link's dynamics messages, rotational or linear, in one place.

``reg.udral.physics.dynamics.rotation.Planar.0.1`` / ``translation.Linear.0.1`` carry (position, velocity,
acceleration, torque/force) in ``uavcan.si.unit`` wrappers; the ``…Ts`` variants add a timestamp. Used by the
servo node's remote drive, by ``sim-plant`` and by tests, so that both ends of the link agree by construction.
Imports generated types: compile the DSDL first (:func:`cyphal_common.dsdl.ensure_compiled`).
"""

from __future__ import annotations

from typing import Any

import reg.udral.physics.dynamics.rotation as rot
import reg.udral.physics.dynamics.translation as lin
import reg.udral.physics.kinematics.rotation as rot_kin
import reg.udral.physics.kinematics.translation as lin_kin
import uavcan.si.unit.acceleration as si_acc
import uavcan.si.unit.angle as si_angle
import uavcan.si.unit.angular_acceleration as si_ang_acc
import uavcan.si.unit.angular_velocity as si_ang_vel
import uavcan.si.unit.force as si_force
import uavcan.si.unit.length as si_length
import uavcan.si.unit.torque as si_torque
import uavcan.si.unit.velocity as si_vel
import uavcan.time

_NAN = float("nan")


def dynamics_type(rotational: bool) -> Any:
    """Planar (rotational) or Linear."""
    return rot.Planar_0_1 if rotational else lin.Linear_0_1


def dynamics_ts_type(rotational: bool) -> Any:
    """PlanarTs (rotational) or LinearTs."""
    return rot.PlanarTs_0_1 if rotational else lin.LinearTs_0_1


def make_dynamics(
    rotational: bool, position: float = _NAN, velocity: float = _NAN, acceleration: float = _NAN, force: float = _NAN
) -> Any:
    """A Planar/Linear message; NaN marks a field as not given (not commanded, or unknown)."""
    if rotational:
        return rot.Planar_0_1(
            kinematics=rot_kin.Planar_0_1(
                angular_position=si_angle.Scalar_1_0(position),
                angular_velocity=si_ang_vel.Scalar_1_0(velocity),
                angular_acceleration=si_ang_acc.Scalar_1_0(acceleration),
            ),
            torque=si_torque.Scalar_1_0(force),
        )
    return lin.Linear_0_1(
        kinematics=lin_kin.Linear_0_1(
            position=si_length.Scalar_1_0(position),
            velocity=si_vel.Scalar_1_0(velocity),
            acceleration=si_acc.Scalar_1_0(acceleration),
        ),
        force=si_force.Scalar_1_0(force),
    )


def make_dynamics_ts(
    rotational: bool, microsecond: int, position: float, velocity: float, acceleration: float, force: float
) -> Any:
    """A PlanarTs/LinearTs message with a timestamp [µs]."""
    value = make_dynamics(rotational, position, velocity, acceleration, force)
    ts = uavcan.time.SynchronizedTimestamp_1_0(microsecond=max(0, int(microsecond)))
    return (rot.PlanarTs_0_1 if rotational else lin.LinearTs_0_1)(timestamp=ts, value=value)


def read_dynamics(msg: Any) -> tuple[float, float, float, float]:
    """(position, velocity, acceleration, torque/force) of a Planar/Linear message (NaN where not given)."""
    k = msg.kinematics
    if isinstance(msg, rot.Planar_0_1):
        return (
            float(k.angular_position.radian),
            float(k.angular_velocity.radian_per_second),
            float(k.angular_acceleration.radian_per_second_per_second),
            float(msg.torque.newton_meter),
        )
    return (
        float(k.position.meter),
        float(k.velocity.meter_per_second),
        float(k.acceleration.meter_per_second_per_second),
        float(msg.force.newton),
    )
