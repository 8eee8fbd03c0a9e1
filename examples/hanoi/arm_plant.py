"""``--plant arm``: the three arm joints (base, shoulder, elbow) on the coupled arm plant (``sim-plant --arm``).

One ``sim-plant --arm`` process steps the paper's coupled arm (:mod:`sim_plant.arm`: inertia matrix, Coriolis and
gravity terms) and serves its three joints as three UDRAL drives; each of the three joints is still its own
``servo-node`` process, now with ``servo.drive.backend = udral`` commanding its drive over the bus. Wrist and
gripper stay embedded joints.

**The joint mapping, in this one place** (:func:`to_plant`): the Hanoi arm's angles (:mod:`.kinematics`) and the
arm plant's are the same convention: φ1 / q1 about the vertical axis (0 along +x), φ2 / q2 the shoulder angle from
the upward vertical, φ3 / q3 the elbow angle relative to the upper arm, a positive φ2 or φ3 tilting the next link
away from the base axis, so q = (φ1, φ2, φ3) with no offset or sign change. The plant's link lengths must be the
cell's (:func:`check_geometry`), and its hand mass sits on the wrist axis; ``tests/hanoi/test_kinematics.py``
checks the mapping against the plant's own gravity torques (its potential energy from the heights FK gives).

**The servo's law on the coupled plant.** The arm joints run ``servo.drive.mode = velocity``: the node commands
v_ref + k·e and the drive's motor (a Webots motor in velocity control, up to its torque limit) supplies whatever
torque the coupled arm needs, gravity included, so nothing is left to the per-joint law at rest. The torque mode
of the independent joints (τ = J·a_ref + K_P·e + K_D·ė, J = 1) would see gravity as an unmodelled load and stop
short by g(q)/K_P (:func:`torque_mode_droop`, reported in ``docs/hanoi.md``). A passive drive holds with its
brake (``arm.brake = 1``): the arm waits at its start pose until its servos engage and stays where a stop left it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim_plant.arm import ArmParams, gravity

from .joints import TORQUE_GAINS, Bus, Joint
from .kinematics import ArmGeometry

ARM_JOINTS = ("base", "shoulder", "elbow")
"""The joints on the coupled plant: joints 0, 1, 2 of a pose."""
FEEDBACK_TIMEOUT_S = 2.0
"""The arm servos' drive silence that is an error [second]: the default 0.5 s trips while seven processes start
(and compile) on a shared two-core host; a real drive would keep the default."""
LINK_RATE_HZ = 50.0
"""Drive setpoints (each servo) and drive dynamics (the plant, per joint) [Hz]: one plant process receives and
sends for three joints: 1200 messages a second at the default 200 Hz, more than its bus loop handled on a busy
host."""
STEP_RATE_HZ = 250.0
"""The plant's real-time steps [Hz] (each integrates in substeps of at most 1 ms): fewer wake-ups of its stepping
thread leave its bus loop the time to receive three joints' setpoints on a busy host."""
PORTS = ("setpoint", "readiness", "dynamics", "feedback")
"""A drive's UDRAL ports, in the order of their subject offsets."""


def to_plant(pose: Sequence[float]) -> tuple[float, float, float]:
    """The arm plant's (q1, q2, q3) of a Hanoi pose (φ1..φ5): the same angles (the module docstring says why)."""
    return float(pose[0]), float(pose[1]), float(pose[2])


def check_geometry(arm: ArmGeometry, params: ArmParams) -> None:
    """:raises ValueError: if the plant's links are not the cell's arm (upper arm, forearm, hand on the wrist axis)."""
    pairs = (("upper_length", params.upper_length, arm.upper_arm), ("fore_length", params.fore_length, arm.forearm),
             ("hand_distance", params.hand_distance, arm.forearm))
    for name, got, want in pairs:
        if not math.isclose(got, want, abs_tol=1e-12):
            raise ValueError(f"the arm plant's {name} is {got} m, the Hanoi arm's is {want} m")


def plant_node_id(bus: Bus) -> int:
    """Node-ID of the arm plant (after the program's own helper nodes)."""
    return bus.node_id + 8


def drive_subject(bus: Bus, j: int, port: str) -> int:
    """Subject of arm joint ``j``'s drive ``port`` (20 above the base's setpoint subject, four per joint)."""
    return bus.subject + 20 + 4 * j + PORTS.index(port)


def plant_environment(bus: Bus, start: Sequence[float], joints: Sequence[Joint]) -> dict[str, str]:
    """The registers of ``sim-plant --arm`` at the ``start`` pose, as environment variables."""
    env = bus.environment(plant_node_id(bus))
    env.update(ARM__BRAKE="1", SIM__PUBLISH_RATE=f"{LINK_RATE_HZ:g}", SIM__STEP_RATE=f"{STEP_RATE_HZ:g}")
    for j, (name, q) in enumerate(zip(ARM_JOINTS, to_plant(start), strict=True)):
        for port in PORTS:
            kind = "SUB" if port in ("setpoint", "readiness") else "PUB"
            env[f"UAVCAN__{kind}__{name.upper()}__{port.upper()}__ID"] = str(drive_subject(bus, j, port))
        env[f"ARM__{name.upper()}__POSITION"] = f"{q!r}"
        env[f"ARM__{name.upper()}__MAX_VELOCITY"] = f"{joints[j].max_velocity!r}"
        env[f"ARM__{name.upper()}__MAX_FORCE"] = f"{joints[j].max_force!r}"
    return env


def servo_overrides(bus: Bus, j: int) -> dict[str, str]:
    """What changes in arm joint ``j``'s servo-node: its drive is the plant's joint on the bus, velocity mode."""
    return {
        "SERVO__DRIVE__BACKEND": "udral",
        "SERVO__DRIVE__MODE": "velocity",
        "SERVO__DRIVE__NODE_ID": str(plant_node_id(bus)),
        "SERVO__DRIVE__FEEDBACK_TIMEOUT": f"{FEEDBACK_TIMEOUT_S:g}",
        "SERVO__DRIVE__RATE": f"{LINK_RATE_HZ:g}",
        "UAVCAN__PUB__DRIVE_SETPOINT__ID": str(drive_subject(bus, j, "setpoint")),
        "UAVCAN__PUB__DRIVE_READINESS__ID": str(drive_subject(bus, j, "readiness")),
        "UAVCAN__SUB__DRIVE_DYNAMICS__ID": str(drive_subject(bus, j, "dynamics")),
        "UAVCAN__SUB__DRIVE_FEEDBACK__ID": str(drive_subject(bus, j, "feedback")),
    }


def torque_mode_droop(pose: Sequence[float], params: ArmParams | None = None) -> tuple[float, float, float]:
    """Static error [rad] of the independent joints' torque law on the coupled plant at ``pose``: the PD law
    holds the gravity torque only with e = g(q)/K_P (the law has no integral action and no gravity model)."""
    g = gravity(params or ArmParams(), to_plant(pose))
    return float(g[0]) / TORQUE_GAINS[0], float(g[1]) / TORQUE_GAINS[0], float(g[2]) / TORQUE_GAINS[0]
