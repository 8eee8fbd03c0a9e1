"""The arm's holding brake (``arm.brake``): a passive joint is held against gravity instead of falling."""

from __future__ import annotations

import math

from sim_plant.arm import ArmParams
from sim_plant.arm_motors import ArmMotor
from sim_plant_node._arm_plant import ArmDrive
from sim_plant_node._plant import Mode

POSE = (0.3, 1.2, 1.0)  # shoulder and elbow well off the vertical: gravity pulls both


def _run(brake: bool, seconds: float = 0.5, dt: float = 1e-3) -> ArmDrive:
    drive = ArmDrive(ArmParams(), [ArmMotor()] * 3, POSE, 1000.0, brake=brake)
    for _ in range(round(seconds / dt)):
        drive.plant.step(dt)
    return drive


def test_braked_passive_arm_holds_its_pose_with_the_gravity_torque() -> None:
    drive = _run(brake=True)
    assert all(j.sample().mode is Mode.PASSIVE for j in drive.joints)
    for q, q0 in zip(drive.plant.positions, POSE, strict=True):
        assert abs(q - q0) < 1e-9
    # The brake's torque is the gravity torque of the pose (it holds the arm still).
    from sim_plant import arm

    g = arm.gravity(ArmParams(), POSE)
    for j, gi in zip(drive.joints, g, strict=True):
        assert math.isclose(j.sample().force, gi, abs_tol=1e-6)


def test_unbraked_passive_arm_falls() -> None:
    drive = _run(brake=False)
    assert abs(drive.plant.positions[1] - POSE[1]) > 0.05
