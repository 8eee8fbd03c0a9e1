"""The arm's closed-form IK against its FK: round trips to 1e-9 m, the elbow-up branch, refusals outside the
workspace; and the iterative Tower of Hanoi rule (2^N − 1 legal moves ending on C)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples.hanoi.cell import Cell, joint_line, plan_task
from examples.hanoi.kinematics import ArmGeometry, UnreachableError, forward, gripper_tilt, inverse
from examples.hanoi.tower import IllegalMoveError, Stacks, iterative_moves

ARM = ArmGeometry()


def _elbow(arm: ArmGeometry, q: tuple[float, float, float, float]) -> tuple[float, float]:
    """(r, z) of the elbow axis in the arm's plane."""
    return arm.upper_arm * math.sin(q[1]), arm.height + arm.upper_arm * math.cos(q[1])


def _check_round_trip(x: float, y: float, z: float) -> tuple[float, float, float, float]:
    q = inverse(ARM, x, y, z)
    px, py, pz = forward(ARM, q)
    assert max(abs(px - x), abs(py - y), abs(pz - z)) < 1e-9, (x, y, z, q)
    assert abs(gripper_tilt(q)) < 1e-12  # The wrist rule keeps the gripper vertical.
    return q


def test_round_trip_over_a_grid_of_the_workspace() -> None:
    """Every point of a grid over the reachable region (bearing, radius, height) comes back to 1e-9 m."""
    reached = 0
    for bearing in (-1.9, -1.0, -0.3, 0.0, 0.7, 1.9):
        for r in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6):
            for z in (-0.05, 0.0, 0.1, 0.2, 0.3, 0.45):
                x, y = r * math.cos(bearing), r * math.sin(bearing)
                try:
                    _check_round_trip(x, y, z)
                    reached += 1
                except UnreachableError:
                    pass
    assert reached > 120  # Most of the grid is inside; the refusals are the rim and the joint limits.


@settings(max_examples=400, deadline=None)
@given(st.floats(-2.0, 2.0), st.floats(0.3, 1.7), st.floats(0.1, 2.8))
def test_fk_of_any_elbow_up_pose_is_inverted(phi1: float, phi2: float, phi3: float) -> None:
    """Any elbow-up pose within the limits, gripper vertical: IK of its FK gives the pose back, and FK(IK(x)) = x."""
    q = (phi1, phi2, phi3, math.pi - phi2 - phi3)
    lo4, hi4 = ARM.limits[3]
    if not lo4 <= q[3] <= hi4:
        return
    x, y, z = forward(ARM, q)
    if math.hypot(x, y) < 1e-3:
        return
    back = _check_round_trip(x, y, z)
    assert max(abs(a - b) for a, b in zip(back, q, strict=True)) < 1e-7


def test_elbow_up_branch() -> None:
    """sin φ3 > 0, and the elbow lies above the straight line from the shoulder to the wrist (the paper's choice);
    the other branch (−φ3) reaches the same wrist point with the elbow below."""
    for x, z in ((0.4, 0.0), (0.3, 0.2), (0.5, -0.05), (0.15, 0.1)):
        q = inverse(ARM, x, 0.0, z)
        assert math.sin(q[2]) > 0.0
        r_e, z_e = _elbow(ARM, q)
        r_w, z_w = x, z + ARM.gripper
        # Height of the shoulder→wrist line at the elbow's r; the elbow is above it.
        z_line = ARM.height + (z_w - ARM.height) * r_e / r_w
        assert z_e > z_line
        # The mirrored solution exists and is lower.
        c3 = math.cos(q[2])
        k1, k2 = ARM.upper_arm + ARM.forearm * c3, -ARM.forearm * math.sin(q[2])
        dz = z_w - ARM.height
        phi2_down = math.atan2(k1 * r_w - k2 * dz, k2 * r_w + k1 * dz)
        assert ARM.height + ARM.upper_arm * math.cos(phi2_down) < z_e


@pytest.mark.parametrize(
    ("point", "why"),
    [
        ((0.9, 0.0, 0.1), "reaches"),
        ((0.05, 0.0, -0.4), "reaches"),
        ((0.0, 0.0, 0.2), "base axis"),
        ((-0.4, -0.01, 0.1), "base"),  # Bearing ≈ −π: beyond the base's ±2 rad.
        ((0.05, 0.0, 0.45), "shoulder would be at .* outside its limits"),
        ((math.nan, 0.0, 0.0), "finite"),
    ],
)
def test_points_outside_the_workspace_are_refused(point: tuple[float, float, float], why: str) -> None:
    with pytest.raises(UnreachableError, match=why):
        inverse(ARM, *point)


@settings(max_examples=300, deadline=None)
@given(st.floats(-1.0, 1.0), st.floats(-1.0, 1.0), st.floats(-0.6, 1.0))
def test_ik_either_round_trips_or_refuses(x: float, y: float, z: float) -> None:
    """Anywhere in a box around the arm: a solution is exact (1e-9 m) and within every joint limit, or refused."""
    try:
        q = _check_round_trip(x, y, z)
    except UnreachableError:
        return
    assert all(lo <= a <= hi for a, (lo, hi) in zip(q, ARM.limits, strict=True))


@pytest.mark.parametrize("boxes", [1, 2, 3, 4, 5, 6])
def test_iterative_rule_solves_the_tower(boxes: int) -> None:
    moves = iterative_moves(boxes)
    assert len(moves) == 2**boxes - 1
    stacks = Stacks(boxes)
    for src, dst in moves:
        stacks.move(src, dst)  # Raises on an illegal move.
        assert stacks.legal()
    assert stacks.solved()


def test_stacks_refuse_illegal_moves() -> None:
    stacks = Stacks(3)
    stacks.move(0, 2)
    with pytest.raises(IllegalMoveError, match="smaller"):
        stacks.move(0, 2)
    with pytest.raises(IllegalMoveError, match="empty"):
        stacks.move(1, 0)


@pytest.mark.parametrize("boxes", [3, 4])
def test_plan_poses_and_paths(boxes: int) -> None:
    """Every pose of the plan is FK-exact; vertical motions stay over their spot near the stack; travels clear it."""
    cell = Cell()
    plan = plan_task(boxes, cell)
    assert len(plan.moves) == 2**boxes - 1
    assert plan.min_travel_clearance > 0.0 and plan.max_vertical_wander <= cell.vertical_tolerance
    places = [s for s in plan.segments if s.kind == "place"]
    assert len(places) == len(plan.moves)
    for s in places:
        x, y = cell.platform_xy(s.dst)
        assert max(abs(a - b) for a, b in zip(forward(cell.arm, s.target[:4]), (x, y, cell.grip_z(s.level)),
                                               strict=True)) < 1e-9
    prev = plan.home
    for s in plan.segments:
        if s.kind in ("travel", "approach"):
            assert min(z for *_, z in joint_line(cell.arm, prev, s.target)) > boxes * cell.box_height
        prev = s.target


def test_too_many_boxes_is_refused_before_planning_the_moves() -> None:
    """The travel height grows with the stack: out of reach it is a clear error (and fast: no moves generated)."""
    with pytest.raises(UnreachableError, match="platform A at height"):
        plan_task(40)
    with pytest.raises(UnreachableError, match="reaches"):
        plan_task(3, Cell(arm=ArmGeometry(upper_arm=0.15, forearm=0.1)))


@settings(max_examples=50, deadline=None)
@given(st.floats(-2.0, 2.0), st.floats(-0.6, 1.8), st.floats(0.05, 2.9))
def test_the_arm_plant_sees_the_hanoi_angles(phi1: float, phi2: float, phi3: float) -> None:
    """The joint mapping (``examples/hanoi/arm_plant.py``): the plant's gravity torques at ``to_plant(φ)`` are
    ∂Π/∂φ of the potential built from the heights the *Hanoi* FK gives each mass (upper arm, forearm, hand)."""
    from examples.hanoi.arm_plant import check_geometry, to_plant
    from sim_plant.arm import ArmParams, gravity

    p = ArmParams()
    check_geometry(ARM, p)
    eps = 1e-12

    def height(upper: float, fore: float, q: tuple[float, float, float, float]) -> float:
        geo = ArmGeometry(height=ARM.height, upper_arm=upper, forearm=max(fore, eps), gripper=eps)
        return forward(geo, q)[2] - ARM.height

    def potential(q: tuple[float, float, float, float]) -> float:
        return p.g * (p.upper_mass * height(p.upper_com, 0.0, q) + p.fore_mass * height(ARM.upper_arm, p.fore_com, q)
                      + p.hand_mass * height(ARM.upper_arm, p.hand_distance, q))

    q = (phi1, phi2, phi3, 0.0)
    h = 1e-6
    numeric = [(potential(tuple(x + h * (i == k) for i, x in enumerate(q)))  # type: ignore[arg-type]
                - potential(tuple(x - h * (i == k) for i, x in enumerate(q)))) / (2 * h)  # type: ignore[arg-type]
               for k in range(3)]
    plant = gravity(p, to_plant(q))
    assert max(abs(a - b) for a, b in zip(numeric, plant, strict=True)) < 1e-6
