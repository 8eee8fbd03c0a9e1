"""A drive behind a bus with known delays, on the simulated clock: the link model measures them and the law hides them.

The loop is the real one, configured from the registers as the node does; the bus and the drive are
:mod:`tests.control.bus_model` (sim-plant's joint and setpoint interpretation, delays chosen by the test). Tracking
is judged by the ground truth: the reference and the joint's position at the same instant, every tick.
"""

from __future__ import annotations

import math

import pytest

from servo_node.axis._config import loop_config
from servo_node.control import _layout as L
from servo_node.drive import _remote_link as link
from servo_node.errors import ErrorCode
from servo_node.registers import ServoRegistry
from servo_node.setpoint import ProfileLimits, Setpoint
from sim_plant import JointParams
from tests.control.bus_model import STEP, Bus, make_bus

LIMITS = ProfileLimits(-10.0, 10.0, -50.0, 50.0, 500.0)
"""The default profile: a 0 → 3 move plans 0.600 s."""
STROKE = 3.0


def bus(compensation: str = "predict", law: str = "velocity", joint: JointParams | None = None, **delays: float) -> Bus:
    reg = ServoRegistry(
        None,
        {
            "SERVO__DRIVE__BACKEND": "udral",
            "SERVO__DRIVE__COMPENSATION": compensation,
            "SERVO__DRIVE__MODE": law,
            "SERVO__DEADMAN_TIMEOUT": "10",  # One setpoint per test; the deadman has tests of its own.
            **({"SERVO__CONTROL__TORQUE_GAINS": "400 40"} if law == "torque" else {}),
        },
    )
    b = make_bus(loop_config(reg), joint, **delays)
    b.run(0.3)  # The drive is heard from; nothing moves.
    return b


def move(b: Bus, seconds: float = 1.2) -> tuple[float, float, float, float]:
    """The 0 → 3 move: (planned T, settled after, largest true tracking error, overshoot)."""
    b.loop.command(Setpoint(STROKE, 0.0, LIMITS, 100.0), b.loop.now())
    b.run(seconds)
    s = b.loop.sample()
    overshoot = max(b.positions) - STROKE
    print(
        f"T {s.plan_duration:.3f} s, settled {s.settled_after_s:.3f} s, true error {max(b.true_errors):.2e} "
        f"(loop's own {s.tracking_error_max:.2e}), overshoot {overshoot:.1e}, link {b.loop.link_stats()}"
    )
    return s.plan_duration, s.settled_after_s, max(b.true_errors), overshoot


@pytest.mark.parametrize("one_way", [0.0005, 0.003, 0.010])
def test_link_delays_are_measured(one_way: float) -> None:
    b = bus(command_delay=one_way, measure_delay=one_way)
    move(b)
    link = b.loop.link_stats()
    assert link is not None and link.local_clock
    assert link.age_p50 == pytest.approx(one_way, abs=1e-4)
    # Send → effect seen in the dynamics: the transit plus the drive reaching the new velocity (≤ 2.5 ms here).
    assert one_way <= link.delay_p50 <= one_way + 0.0025
    assert link.delay_max <= one_way + 0.003


@pytest.mark.parametrize(
    ("one_way", "jitter"), [(0.0005, 0.0), (0.005, 0.0), (0.010, 0.0), (0.020, 0.0), (0.010, 0.004)]
)
def test_predictor_tracks_through_the_delay(one_way: float, jitter: float) -> None:
    b = bus(command_delay=one_way, measure_delay=one_way, jitter=jitter)
    duration, settled, error, overshoot = move(b)
    assert error <= 0.005
    assert duration <= settled <= duration + 0.1
    assert overshoot <= 1e-3 * STROKE
    assert b.loop.sample().tracking_error_max == pytest.approx(error, rel=0.3)  # The loop sees what happens.


def test_the_law_without_the_link_model_is_what_it_was() -> None:
    """``servo.drive.compensation = off``: the slow loop through the round trip that issue 16 started from."""
    b = bus("off", command_delay=0.003, measure_delay=0.003)
    duration, settled, error, _ = move(b, 1.5)
    assert error > 0.05 and settled > duration + 0.5


def test_a_foreign_clock_is_detected_and_the_round_trip_split() -> None:
    """The drive stamps with another host's clock: the offset is estimated, the motion still tracks."""
    b = bus(command_delay=0.003, measure_delay=0.003, clock_offset=4321.5)
    duration, settled, error, _ = move(b)
    link = b.loop.link_stats()
    assert link is not None and not link.local_clock
    assert link.clock_offset == pytest.approx(4321.5, abs=0.002)
    assert link.age_p50 + link.delay_p50 == pytest.approx(0.006, abs=0.003)  # The round trip is exact.
    assert error <= 0.01
    assert settled <= duration + 0.1


@pytest.mark.parametrize("one_way", [0.003, 0.020])
def test_torque_over_the_bus(one_way: float) -> None:
    b = bus(law="torque", command_delay=one_way, measure_delay=one_way, jitter=0.002)
    duration, settled, error, overshoot = move(b)
    assert error <= 0.006
    assert duration <= settled <= duration + 0.1
    assert overshoot <= 1e-3 * STROKE


def test_a_drive_that_cannot_follow_is_still_a_following_error() -> None:
    """Judging measurements at their own time must not hide a real following error (the drive caps at 2/s)."""
    b = bus(joint=JointParams(max_velocity=2.0, max_force=100.0), command_delay=0.01, measure_delay=0.01)
    move(b, 1.5)
    s = b.loop.sample()
    assert s.error is ErrorCode.FOLLOWING_ERROR
    assert not s.engaged and abs(b.joint.velocity) <= 1e-3  # Stopped to rest over the bus, then released.


def test_the_stop_after_expiry_brakes_to_rest_over_the_bus() -> None:
    reg = ServoRegistry(None, {"SERVO__DRIVE__BACKEND": "udral"})
    b = make_bus(loop_config(reg), command_delay=0.01, measure_delay=0.01)
    b.run(0.3)
    b.loop.command(Setpoint(100.0, 0.0, LIMITS, 100.0), b.loop.now())  # Never repeated: expires after 0.5 s.
    b.run(2.5)
    s = b.loop.sample()
    assert s.expired and not s.engaged
    assert s.stop_planned_s <= s.stop_took_s <= s.stop_bound_s
    assert abs(b.joint.velocity) <= 1e-3


@pytest.mark.parametrize("scale", [0.9, 1.1])
def test_every_stop_releases_a_joint_measured_at_rest_after_the_brake(scale: float) -> None:
    """A drive that runs 10 % off the velocity it is told, at 50 Hz: the joint is off the stop's reference at its
    end, so the last commands before the brake are feedback corrections. A sample showing rest can then be one taken
    while a correction crossed zero, with the next correction still in force at the drive: released on it, the
    joint would coast on at that velocity. The rest counts only in samples taken after the zero command took effect.
    Thirty stops at different points of the drive's send and publication periods."""
    for i in range(30):
        reg = ServoRegistry(None, {"SERVO__DRIVE__BACKEND": "udral", "SERVO__DRIVE__RATE": "50"})
        b = make_bus(loop_config(reg), command_delay=0.002, measure_delay=0.002 + 0.0003 * (i % 7),
                     drive_period=0.02, publish_period=0.02, velocity_scale=scale, seed=i)
        b.run(0.3 + 0.001 * i)
        b.loop.command(Setpoint(-(6.0 + 0.1 * i), 0.0, LIMITS, 100.0), b.loop.now())  # Expires after 0.5 s.
        b.run(1.5)
        s = b.loop.sample()
        assert s.expired and not s.engaged and s.error is ErrorCode.NONE, (i, s)
        assert abs(b.joint.velocity) <= 1e-3, (i, b.joint.velocity)
        assert s.stop_planned_s <= s.stop_took_s <= s.stop_bound_s


def test_a_drive_silent_mid_move_stays_drive_lost_past_the_stop_bound() -> None:
    """A dead drive's stop can never be seen to end: the error stays DRIVE_LOST (counted once, not traded for a stop
    timeout the gate would let a setpoint clear), the loop keeps commanding zero velocity, and refuses new motion."""
    b = bus(command_delay=0.002, measure_delay=0.002)
    b.loop.command(Setpoint(STROKE, 0.0, LIMITS, 100.0), b.loop.now())
    b.run(0.2)  # Moving fast.
    before = b.loop.sample()
    assert before.engaged and before.error is ErrorCode.NONE
    tx = b.loop.drive.arrays.tx
    errors = set()
    for _ in range(3000):  # Three seconds of silence: far past the feedback timeout and the stop's bound.
        b.loop.advance(STEP)
        s = b.loop.sample()
        if s.error is not ErrorCode.NONE:
            errors.add(s.error)
    assert errors == {ErrorCode.DRIVE_LOST}
    assert s.error_count == before.error_count + 1
    assert s.engaged and tx[link.TX_ENABLE] == 1.0 and tx[link.TX_V] == 0.0
    b.loop.command(Setpoint(-STROKE, 0.0, LIMITS, 100.0), b.loop.now())
    b.loop.advance(STEP)
    s = b.loop.sample()
    assert s.error is ErrorCode.DRIVE_LOST and s.mode == L.MODE_STOP and tx[link.TX_V] == 0.0


def test_a_drive_slow_to_enable_is_waited_for_and_the_move_follows_the_joint() -> None:
    """A drive that takes commands 0.5 s after it was asked to enable (odrive-can's mock): the plan waits for it
    (no following error), then moves from where the joint is; the move arrives on its own duration and the wait is
    reported."""
    b = bus(enable_delay=0.5)
    planned, settled, true_error, overshoot = move(b, 2.0)
    s = b.loop.sample()
    assert s.error is ErrorCode.NONE and s.engaged
    assert 0.5 <= s.drive_waited_s <= 0.5 + 0.02  # The enable, plus the delays of the command and of its report.
    assert settled == pytest.approx(planned, abs=0.05) and abs(b.joint.position - STROKE) < 1e-3
    assert true_error < 5e-3 and overshoot < 1e-2  # As tracked without the wait (6e-4): the plan ran with the joint.


def test_a_drive_that_never_enables_moves_nothing_and_its_stop_still_releases() -> None:
    """A drive that never takes commands: nothing moves and no following error is made up while the plan waits (the
    backend's own enable timeout is its drive fault); a stop (the deadman's) still runs and releases the drive."""
    b = bus(enable_delay=math.inf)
    b.loop.command(Setpoint(STROKE, 0.0, LIMITS, 100.0), b.loop.now())
    b.run(3.0)
    s = b.loop.sample()
    assert s.error is ErrorCode.NONE and s.engaged and s.drive_waited_s > 2.9
    assert max(abs(p) for p in b.positions) < 1e-9 and s.ref_position == pytest.approx(0.0, abs=1e-3)
    b.loop.stop()
    b.run(1.0)
    assert not b.loop.sample().engaged
