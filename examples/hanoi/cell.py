"""The work cell and the motion plan: where the platforms and boxes are, and the joint targets of every segment.

Pure planning, no I/O: :func:`plan_task` turns the iterative solution into coordinated segments (approach above,
descend, grip, lift, travel, descend, release, retreat), each a target for all five joints computed by the
closed-form IK, and checks the whole plan before anything moves: every pose reachable within the joint limits,
every travel (a straight line in joint space, as ``servo_node.coord`` phase sync moves) clear of the tallest
stack, every vertical segment close to vertical.

Units: m and rad. The gripper joint is the finger opening [m]; "closed" on a box is the box's width (no contact
physics: the grip is a joint position, and the box is taken to move with the gripper while it is closed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .kinematics import ArmGeometry, UnreachableError, forward, inverse
from .tower import PLATFORMS, Stacks, iterative_moves

Pose = tuple[float, float, float, float, float]
"""Targets of the five joints: φ1..φ4 [rad] and the gripper opening [m]."""

PATH_SAMPLES = 64
"""Points per segment at which the joint-space line is checked against the stacks."""


@dataclass(frozen=True)
class Cell:
    """The example's work cell (``docs/hanoi.md`` has the numbers in a table)."""

    arm: ArmGeometry = field(default_factory=ArmGeometry)
    platforms: tuple[tuple[float, float], ...] = ((0.34, -0.95), (0.44, 0.0), (0.38, 0.95))
    """(distance from the base axis [m], bearing [rad]) of the centres of platforms A, B, C (their tops at z = 0)."""
    box_height: float = 0.03
    box_width: float = 0.03
    """Width of the smallest box; box k is ``box_width + k·box_width_step`` wide."""
    box_width_step: float = 0.008
    clearance: float = 0.04
    """Height of a carried box's bottom over the tallest possible stack while travelling."""
    finger_margin: float = 0.02
    """The open gripper is this much wider than the largest box."""
    vertical_tolerance: float = 0.005
    """Largest horizontal wander of the grip point allowed while descending or lifting."""

    def platform_xy(self, peg: int) -> tuple[float, float]:
        r, bearing = self.platforms[peg]
        return r * math.cos(bearing), r * math.sin(bearing)

    def width(self, box: int) -> float:
        return self.box_width + box * self.box_width_step

    def open_width(self, boxes: int) -> float:
        return self.width(boxes - 1) + self.finger_margin

    def grip_z(self, level: int) -> float:
        """Grip point height for a box at ``level`` (0: on the platform): the box's middle."""
        return (level + 0.5) * self.box_height

    def travel_z(self, boxes: int) -> float:
        """Grip point height while travelling: a carried box clears ``boxes`` stacked boxes by the clearance."""
        return boxes * self.box_height + 0.5 * self.box_height + self.clearance


@dataclass(frozen=True)
class Segment:
    """One coordinated motion: all five joint targets, and what it does."""

    kind: str
    """approach, descend, grip, lift, travel, place, release or retreat."""
    move: int
    """Index of the Hanoi move it belongs to."""
    target: Pose
    grip_point: tuple[float, float, float]
    """Where the grip point must be at the end [m] (FK of the arm targets)."""
    box: int
    """The box this move carries."""
    src: int
    dst: int
    level: int = -1
    """place: the level the box lands on (0: on the platform)."""

    def describe(self) -> str:
        return f"move {self.move + 1}: {self.kind} (box {self.box}, {PLATFORMS[self.src]} → {PLATFORMS[self.dst]})"


@dataclass(frozen=True)
class TaskPlan:
    """The checked plan: the start pose and the segments in order."""

    boxes: int
    home: Pose
    segments: tuple[Segment, ...]
    moves: tuple[tuple[int, int], ...]
    min_travel_clearance: float
    """Least height of a carried box's (or the open fingers') bottom over the tallest stack on any travel [m]."""
    max_vertical_wander: float
    """Largest horizontal wander of the grip point while descending or lifting, within a box height of its low
    end [m]."""


def _pose(cell: Cell, peg: int, z: float, opening: float) -> Pose:
    x, y = cell.platform_xy(peg)
    try:
        q = inverse(cell.arm, x, y, z)
    except UnreachableError as ex:
        raise UnreachableError(f"platform {PLATFORMS[peg]} at height {z:.3f} m: {ex}") from None
    return (*q, opening)


def plan_task(boxes: int, cell: Cell | None = None) -> TaskPlan:
    """Segments of the whole task, checked; :raises UnreachableError: before anything moves if a pose or path is
    impossible (the message names the platform, height and joint)."""
    cell = cell or Cell()
    stacks = Stacks(boxes)
    z_travel = cell.travel_z(boxes)
    opened = cell.open_width(boxes)
    above = [_pose(cell, p, z_travel, opened) for p in range(3)]  # First: the highest poses fail fastest.
    moves = iterative_moves(boxes)
    home = above[1]
    segments: list[Segment] = []
    wander = 0.0
    for k, (src, dst) in enumerate(moves):
        box = stacks.check(src, dst)
        src_level, dst_level = len(stacks.pegs[src]) - 1, len(stacks.pegs[dst])
        closed = cell.width(box)
        z_pick, z_place = cell.grip_z(src_level), cell.grip_z(dst_level)

        def seg(kind: str, pose: Pose, level: int = -1, k: int = k, box: int = box, src: int = src,
                dst: int = dst) -> Segment:
            return Segment(kind, k, pose, forward(cell.arm, pose[:4]), box, src, dst, level)

        def vertical(kind: str, peg: int, z_from: float, z_to: float, opening: float, last: str = "",
                     level: int = dst_level) -> None:
            nonlocal wander
            poses, w = _vertical(cell, peg, z_from, z_to, opening)
            wander = max(wander, w)
            for j, pose in enumerate(poses):
                final = j == len(poses) - 1
                segments.append(seg(last if final and last else kind, pose, level if final and last else -1))

        segments.append(seg("approach", above[src]))
        vertical("descend", src, z_travel, z_pick, opened)
        segments.append(seg("grip", (*segments[-1].target[:4], closed)))
        vertical("lift", src, z_pick, z_travel, closed)
        segments.append(seg("travel", (*above[dst][:4], closed)))
        vertical("descend", dst, z_travel, z_place, closed, last="place")
        segments.append(seg("release", (*segments[-1].target[:4], opened)))
        vertical("retreat", dst, z_place, z_travel, opened)
        stacks.move(src, dst)
    clearance = _check_travel(cell, boxes, home, segments)
    return TaskPlan(boxes, home, tuple(segments), tuple(moves), clearance, wander)


def joint_line(arm: ArmGeometry, a: Pose, b: Pose) -> list[tuple[float, float, float]]:
    """Grip point at :data:`PATH_SAMPLES` + 1 points of the straight joint-space line from ``a`` to ``b``."""
    out = []
    for j in range(PATH_SAMPLES + 1):
        s = j / PATH_SAMPLES
        f1, f2, f3, f4 = (qa + s * (qb - qa) for qa, qb in zip(a[:4], b[:4], strict=True))
        out.append(forward(arm, (f1, f2, f3, f4)))
    return out


def _vertical(cell: Cell, peg: int, z_from: float, z_to: float, opening: float) -> tuple[list[Pose], float]:
    """Poses of a vertical motion over ``peg`` (the start excluded) and its largest wander near the stack.

    Near the low end — while the fingers or a carried box are within a box height of where the box sits — the grip
    point must stay within :attr:`Cell.vertical_tolerance` of the vertical line. A straight joint-space line arcs
    more the longer it is, so a motion that would wander more is split at its middle height, recursively.
    """
    x0, y0 = cell.platform_xy(peg)
    z_low = min(z_from, z_to)

    def wander(za: float, zb: float) -> float:
        path = joint_line(cell.arm, _pose(cell, peg, za, opening), _pose(cell, peg, zb, opening))
        return max((math.hypot(x - x0, y - y0) for x, y, z in path if z - z_low < cell.box_height), default=0.0)

    pieces = [(z_from, z_to)]
    for _ in range(8):
        worst = [wander(za, zb) for za, zb in pieces]
        if max(worst) <= cell.vertical_tolerance:
            heights = [zb for _, zb in pieces]
            return [_pose(cell, peg, z, opening) for z in heights], max(worst)
        split: list[tuple[float, float]] = []
        for (za, zb), w in zip(pieces, worst, strict=True):
            split += [(za, 0.5 * (za + zb)), (0.5 * (za + zb), zb)] if w > cell.vertical_tolerance else [(za, zb)]
        pieces = split
    raise UnreachableError(f"platform {PLATFORMS[peg]}: no straight joint-space path from {z_from:.3f} m to "
                           f"{z_to:.3f} m stays within {cell.vertical_tolerance * 1e3:.1f} mm of the vertical")


def _check_travel(cell: Cell, boxes: int, home: Pose, segments: list[Segment]) -> float:
    """Least clearance over the tallest stack on the approaches and travels; raises if one would hit it."""
    tallest = boxes * cell.box_height
    clearance = math.inf
    prev = home
    for s in segments:
        if s.kind in ("approach", "travel"):
            # The bottom of a carried box (or of the open fingers, as long as a box) is half a box below the
            # grip point.
            low = min(z for _, _, z in joint_line(cell.arm, prev, s.target)) - 0.5 * cell.box_height - tallest
            clearance = min(clearance, low)
            if low < 0.0:
                raise UnreachableError(f"{s.describe()}: the joint-space path would come {-low * 1e3:.1f} mm "
                                       f"below the top of a full stack")
        prev = s.target
    return clearance
