"""The arm's kinematics: forward kinematics and the paper's closed-form inverse kinematics (its eqs. 15–27).

Pure math on floats, no I/O. The arm (a base yaw joint, a planar shoulder–elbow–wrist chain, a gripper that hangs
from the wrist):

* φ1 (base) turns the arm about the vertical z axis; φ1 = 0 points along +x.
* φ2 (shoulder), φ3 (elbow), φ4 (wrist) turn in the vertical plane of the arm. Every angle is measured as in the
  paper: φ2 from the upward vertical, φ3 relative to the upper arm, φ4 relative to the forearm; a positive angle
  tilts the next link away from the base axis (toward +r, the horizontal distance from the base axis).
* The grip point lies :attr:`ArmGeometry.gripper` beyond the wrist axis along the gripper. The gripper's angle
  from the upward vertical is φ2 + φ3 + φ4; it hangs straight down when that is π, hence the paper's wrist rule
  φ4 = π − φ2 − φ3.

Forward kinematics (r: horizontal distance of the grip point from the base axis, z: its height over the table):

    r = L1·sin φ2 + L2·sin(φ2 + φ3) + L3·sin(φ2 + φ3 + φ4)
    z = h + L1·cos φ2 + L2·cos(φ2 + φ3) + L3·cos(φ2 + φ3 + φ4)
    x = r·cos φ1,  y = r·sin φ1

Inverse kinematics with the gripper vertical (the paper's steps): φ1 = atan2(y, x); the wrist axis sits L3 above
the grip point, at (r, z_w = z + L3); the law of cosines gives cos φ3 = (r² + (z_w − h)² − L1² − L2²)/(2·L1·L2),
and the elbow-up branch takes sin φ3 = +√(1 − cos²φ3) (φ3 ∈ (0, π): the elbow lies above the line from the
shoulder to the wrist); with k1 = L1 + L2·cos φ3 and k2 = L2·sin φ3 the 2×2 system

    [ r     ]   [  k1  k2 ] [ sin φ2 ]
    [ z_w−h ] = [ −k2  k1 ] [ cos φ2 ]

gives sin φ2 and cos φ2 (its determinant k1² + k2² = r² + (z_w − h)²), φ2 = atan2(sin φ2, cos φ2); finally
φ4 = π − φ2 − φ3. A point outside the annulus the two links reach (|cos φ3| > 1), on the base axis (φ1 undefined)
or needing a joint beyond its limits is refused with :class:`UnreachableError`, which says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

JOINTS = ("base", "shoulder", "elbow", "wrist")
"""The arm joints of a pose, in order (the gripper is a fifth, linear joint: its opening)."""


class UnreachableError(ValueError):
    """A grip-point position the arm cannot reach with the gripper vertical (the message says why)."""


@dataclass(frozen=True)
class ArmGeometry:
    """Dimensions [m] and joint limits [rad] of the arm.

    The defaults are this example's arm (``docs/hanoi.md`` draws it): the shoulder axis 0.30 m above the table,
    a 0.32 m upper arm, a 0.28 m forearm, 0.10 m from the wrist axis to the grip point (between the finger tips).
    """

    height: float = 0.30
    """h: height of the shoulder axis over the table (on the base axis)."""
    upper_arm: float = 0.32
    """L1: shoulder axis to elbow axis."""
    forearm: float = 0.28
    """L2: elbow axis to wrist axis."""
    gripper: float = 0.10
    """L3: wrist axis to the grip point."""
    limits: tuple[tuple[float, float], ...] = ((-2.0, 2.0), (-0.6, 1.8), (0.05, 2.9), (-0.6, 3.0))
    """(min, max) of φ1..φ4 [rad]; φ3 ≥ 0.05 keeps the arm off its stretched (singular) pose and on elbow-up."""

    def __post_init__(self) -> None:
        for name in ("height", "upper_arm", "forearm", "gripper"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if len(self.limits) != 4 or any(not lo < hi for lo, hi in self.limits):
            raise ValueError(f"limits must be four (min, max) pairs with min < max, got {self.limits!r}")


def forward(arm: ArmGeometry, q: tuple[float, float, float, float]) -> tuple[float, float, float]:
    """Grip point (x, y, z) [m] of the joint angles q = (φ1, φ2, φ3, φ4) [rad]."""
    f1, f2, f3, f4 = q
    s23 = f2 + f3
    s234 = s23 + f4
    r = arm.upper_arm * math.sin(f2) + arm.forearm * math.sin(s23) + arm.gripper * math.sin(s234)
    z = arm.height + arm.upper_arm * math.cos(f2) + arm.forearm * math.cos(s23) + arm.gripper * math.cos(s234)
    return r * math.cos(f1), r * math.sin(f1), z


def gripper_tilt(q: tuple[float, float, float, float]) -> float:
    """Angle of the gripper from straight down [rad] (0: vertical, as every IK pose holds it)."""
    return q[1] + q[2] + q[3] - math.pi


def inverse(arm: ArmGeometry, x: float, y: float, z: float) -> tuple[float, float, float, float]:
    """Joint angles (φ1, φ2, φ3, φ4) [rad] that put the grip point at (x, y, z) [m] with the gripper vertical.

    Elbow-up branch (sin φ3 > 0). :raises UnreachableError: outside the workspace, on the base axis, or beyond a
    joint limit (the message names the point and the reason).
    """
    where = f"({x:.4f}, {y:.4f}, {z:.4f}) m"
    for v in (x, y, z):
        if not math.isfinite(v):
            raise UnreachableError(f"{where}: not a finite point")
    r = math.hypot(x, y)
    if r < 1e-6:
        raise UnreachableError(f"{where}: on the base axis, where the base angle is undefined")
    phi1 = math.atan2(y, x)  # eq. 15
    dz = z + arm.gripper - arm.height  # The wrist axis, L3 above the grip point, relative to the shoulder.
    l1, l2 = arm.upper_arm, arm.forearm
    c3 = (r * r + dz * dz - l1 * l1 - l2 * l2) / (2.0 * l1 * l2)  # Law of cosines.
    if not -1.0 <= c3 <= 1.0:
        reach = math.hypot(r, dz)
        raise UnreachableError(f"{where}: the wrist axis would be {reach:.4f} m from the shoulder; the arm reaches "
                               f"{abs(l1 - l2):.4f}..{l1 + l2:.4f} m")
    s3 = math.sqrt(1.0 - c3 * c3)  # Elbow up: sin φ3 = +√(1 − cos²φ3).
    phi3 = math.atan2(s3, c3)
    k1, k2 = l1 + l2 * c3, l2 * s3
    det = k1 * k1 + k2 * k2  # = r² + dz²
    s2 = (k1 * r - k2 * dz) / det
    c2 = (k2 * r + k1 * dz) / det
    phi2 = math.atan2(s2, c2)
    phi4 = math.pi - phi2 - phi3  # The gripper points straight down.
    q = (phi1, phi2, phi3, phi4)
    for name, angle, (lo, hi) in zip(JOINTS, q, arm.limits, strict=True):
        if not lo <= angle <= hi:
            raise UnreachableError(f"{where}: the {name} would be at {angle:.4f} rad, outside its limits "
                                   f"[{lo:g}, {hi:g}] rad")
    return q
