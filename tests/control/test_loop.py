"""The control loop on a simulated clock: motion, control laws, stops, re-engagement, drive loss.

Deterministic: the loop is advanced tick by tick in loop time; nothing here depends on the wall clock.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from servo_node.control import ControlLoop, LoopConfig
from servo_node.control._kernel import tick
from servo_node.drive import SimDrive
from servo_node.drive._bus import BusDrive
from servo_node.drive._remote_link import RX_COUNT, RX_T, TX_ENABLE
from servo_node.drive.sim._kernels import watchdog_s
from servo_node.errors import ErrorCode
from servo_node.setpoint import ProfileLimits, Setpoint
from sim_plant import JointParams
from sim_plant._kernels import S_POSITION, S_VELOCITY

LIMITS = ProfileLimits(-10.0, 10.0, -50.0, 50.0, 500.0)
PERIOD = 1e-3


def make_loop(law: str = "velocity", fe_window: float = 0.5, **joint: float) -> ControlLoop:
    """A loop on the simulated clock with the embedded joint; the deadman is off (tests command once)."""
    params = {"max_force": 1000.0, "max_velocity": 100.0, **joint}
    cfg = LoopConfig(law=law, deadman_timeout_s=1e9, following_error_window=fe_window)
    loop = ControlLoop(cfg, SimDrive(JointParams(**params)), clock="simulated")  # type: ignore[arg-type]
    loop.start()
    return loop


def run_until(loop: ControlLoop, seconds: float) -> list[tuple[float, float, float, float, float]]:
    """Advance tick by tick, returning (t, p_ref, v_ref, a_ref, p) per tick."""
    rows = []
    for _ in range(round(seconds / PERIOD)):
        loop.advance(PERIOD)
        s = loop.sample()
        rows.append((s.time_s, s.ref_position, s.ref_velocity, s.ref_acceleration, s.position))
    return rows


@pytest.mark.parametrize("law", ["velocity", "torque"])
def test_move_arrives_within_two_periods_of_the_plan(law: str) -> None:
    loop = make_loop(law)
    loop.command(Setpoint(100.0, 0.0, LIMITS, 1000.0))
    loop.advance(PERIOD)
    duration = loop.sample().plan_duration
    assert duration > 0
    run_until(loop, duration + 0.05)
    s = loop.sample()
    print(f"{law}: planned {duration:.4f} s, settled after {s.settled_after_s:.4f} s, "
          f"max tracking error {s.tracking_error_max:.3e}, final error {abs(s.position - 100):.2e}")  # fmt: skip
    assert abs(s.position - 100.0) <= 1e-3
    assert duration <= s.settled_after_s <= duration + 2 * PERIOD
    assert s.tracking_error_max < 0.05


def test_torque_step_response_matches_the_closed_form() -> None:
    """The seed paper's PD experiment: J = 1, K_p = 36, K_d = 12 gives 1 − (1 + 6t)·e^(−6t) for a unit step.

    The servo holds position 1 (a stationary reference), the joint is put at 0 and released: the error
    dynamics are exactly the closed loop's step response, sampled and held at 1 kHz.
    """
    loop = make_loop("torque", fe_window=10.0, position=1.0)  # The step is a deliberate 1-unit following error.
    loop.command(Setpoint(1.0, 0.0, LIMITS, 1000.0))
    loop.advance(0.01)
    assert loop.sample().engaged
    loop.drive.arrays.state[0, S_POSITION] = 0.0
    loop.drive.arrays.state[0, S_VELOCITY] = 0.0
    t0 = loop.sample().time_s
    worst = 0.0
    for _ in range(2000):
        loop.advance(PERIOD)
        s = loop.sample()
        t = s.time_s - t0
        worst = max(worst, abs(s.position - (1 - (1 + 6 * t) * math.exp(-6 * t))))
    print(f"step response max deviation {worst:.2e}")
    assert worst < 2e-3
    assert worst > 0  # The plant is really simulated, not the formula replayed.


def test_velocity_mode_reaches_and_holds_the_velocity() -> None:
    loop = make_loop()
    loop.command(Setpoint(math.inf, 4.0, LIMITS, 1000.0, velocity_mode=True))
    run_until(loop, 1.0)
    s = loop.sample()
    assert s.ref_velocity == pytest.approx(4.0)
    assert s.velocity == pytest.approx(4.0, abs=1e-3)
    p1 = s.position
    run_until(loop, 0.5)
    assert loop.sample().position == pytest.approx(p1 + 2.0, abs=1e-2)


def test_stop_is_jerk_limited_then_disengages() -> None:
    loop = make_loop()
    loop.command(Setpoint(math.inf, 8.0, LIMITS, 1000.0, velocity_mode=True))
    run_until(loop, 1.0)
    loop.stop()
    rows = np.array(run_until(loop, 1.0))
    acc = rows[:, 3]
    jerk = np.diff(acc) / PERIOD
    assert np.all(np.abs(acc) <= 50.0 + 1e-9)
    assert np.all(np.abs(jerk) <= 500.0 * (1 + 1e-6))
    assert not loop.sample().engaged
    assert abs(loop.sample().velocity) < 0.05
    # Stop time is the jerk-limited profile's: 8 rad/s at 50 rad/s² and 500 rad/s³ takes 0.26 s.
    stopped_at = rows[np.argmax(np.abs(rows[:, 2]) < 1e-12), 0] - rows[0, 0] + PERIOD
    assert stopped_at == pytest.approx(8 / 50 + 50 / 500, abs=2 * PERIOD)
    s = loop.sample()
    assert s.stop_planned_s == pytest.approx(8 / 50 + 50 / 500, abs=1e-9)
    # The embedded joint keeps up: at rest right after the plan, then held for the rest time before release.
    rest = loop.config.rest_time_s
    assert s.stop_planned_s + rest <= s.stop_took_s <= s.stop_planned_s + rest + 3 * PERIOD


def test_reengaging_starts_from_the_actual_state() -> None:
    loop = make_loop()
    loop.command(Setpoint(5.0, 0.0, LIMITS, 1000.0))
    run_until(loop, 0.2)
    loop.stop(immediate=True)
    loop.advance(0.01)
    loop.drive.arrays.state[0, S_POSITION] = 3.0  # The joint was pushed while disengaged.
    loop.drive.arrays.state[0, S_VELOCITY] = 0.0
    loop.command(Setpoint(5.0, 0.0, LIMITS, 1000.0))
    loop.advance(PERIOD)
    s = loop.sample()
    assert s.engaged
    assert s.ref_position == pytest.approx(3.0, abs=1e-3)
    assert s.ref_velocity == pytest.approx(0.0, abs=1e-2)


def test_new_target_mid_motion_keeps_the_reference_continuous() -> None:
    loop = make_loop()
    loop.command(Setpoint(10.0, 0.0, LIMITS, 1000.0))
    before = run_until(loop, 0.3)
    loop.command(Setpoint(-2.0, 0.0, LIMITS, 1000.0))
    after = run_until(loop, 0.01)
    (_, p0, v0, a0, _), (_, p1, v1, a1, _) = before[-1], after[0]
    assert abs(p1 - p0) <= 10.0 * PERIOD + 1e-9
    assert abs(v1 - v0) <= 50.0 * PERIOD + 1e-9
    assert abs(a1 - a0) <= 500.0 * PERIOD + 1e-9
    run_until(loop, 5.0)
    assert loop.sample().position == pytest.approx(-2.0, abs=1e-3)


class SilentDrive(BusDrive):
    """A drive on the bus whose network side never writes: only the loop's seqlocked arrays."""

    @classmethod
    def create(cls, reg: object, node: object, port_prefix: str = "") -> SilentDrive:
        return cls()


def test_remote_drive_silence_is_an_error() -> None:
    """A drive on the bus never heard from: nothing is commanded, and after the feedback timeout it is an error."""
    loop = ControlLoop(LoopConfig(deadman_timeout_s=1e9), SilentDrive(), clock="simulated")
    loop.start()
    loop.command(Setpoint(1.0, 0.0, LIMITS, 10.0))
    loop.advance(0.1)
    assert loop.sample().error is ErrorCode.NONE and not loop.sample().engaged
    loop.advance(0.5)
    s = loop.sample()
    assert s.error is ErrorCode.DRIVE_LOST and not s.engaged
    assert loop.drive.arrays.tx[TX_ENABLE] == 0.0


@pytest.mark.parametrize("law", ["velocity", "torque"])
def test_a_stalled_loop_finds_its_embedded_joint_braked_by_the_watchdog(law: str) -> None:
    """One tick 0.6 s after the previous one (the thread stalled mid-move on the monotonic clock): the embedded drive
    held the last command for its watchdog time only, then braked; the loop goes on to the target."""
    loop = make_loop(law, max_force=10.0)
    loop.command(Setpoint(0.5, 0.0, ProfileLimits(-2.0, 2.0, -5.0, 5.0, 50.0), 10.0))
    loop.advance(0.35)
    before = loop.sample()
    assert before.velocity > 0.8, before
    stalled_until = loop.now() + 0.6
    tick(stalled_until, loop.arrays)
    loop._sim_now = stalled_until  # The loop's simulated clock resumes after the stall.
    after = loop.sample()
    hold = watchdog_s(PERIOD)
    # Held for `hold` (the command may accelerate it at up to 10 N·m on 1 kg·m²), then braked at the same force.
    a, v_held = 10.0, before.velocity + 10.0 * hold
    bound = before.velocity * hold + a * hold**2 / 2 + v_held**2 / (2 * a)
    print(f"{law}: {before.velocity:.3f} rad/s at {before.position:.4f}; after a 0.6 s stall at {after.position:.4f} "
          f"(bound {before.position + bound:.4f}; running on, ~{before.position + 0.6 * before.velocity:.3f})")
    assert after.position - before.position <= bound
    assert after.position - before.position < 0.6 * before.velocity / 2  # Not run on: half of that at most.
    assert abs(after.velocity) < 1e-6  # At rest: braked within the stall.
    loop.advance(3.0)
    end = loop.sample()
    assert abs(end.position - 0.5) <= 1e-3 and end.error is ErrorCode.NONE, end


def test_a_writer_stuck_mid_update_is_not_waited_for() -> None:
    """A command left mid-update (odd sequence number: its writer preempted while the loop, perhaps at real-time
    priority above it, ticks): the loop neither waits for it nor takes a torn one; it ticks on with the command it
    had and takes the new one at the first tick after the writer finishes. The same for a bus drive's feedback:
    the last whole sample stays the measurement, and its age keeps growing, so silence is still seen."""
    loop = make_loop()
    loop.command(Setpoint(1.0, 0.0, LIMITS, 1000.0))
    run_until(loop, 0.05)
    cmd = loop.cmd
    cmd[0] += 1.0  # begin_write of the node's next command: it never finishes while the loop ticks.
    cmd[1:] = np.nan  # What a torn copy would hold.
    before = loop.sample()
    run_until(loop, 0.5)
    s = loop.sample()
    assert s.time_s == pytest.approx(before.time_s + 0.5)  # It ticked on, not waiting.
    assert s.engaged and abs(s.position - 1.0) < 1e-3 and s.error is ErrorCode.NONE
    cmd[0] -= 1.0  # The writer gives up its update (the sequence as before): nothing new to take.
    loop.command(Setpoint(2.0, 0.0, LIMITS, 1000.0))
    run_until(loop, 0.6)
    assert abs(loop.sample().position - 2.0) < 1e-3

    bus = ControlLoop(LoopConfig(deadman_timeout_s=1e9), SilentDrive(), clock="simulated")
    bus.start()
    rx = bus.drive.arrays.rx
    rx[0] += 1.0  # A feedback sample mid-write from the first tick on, its count and time torn.
    rx[RX_COUNT], rx[RX_T] = 1e9, 1e9
    bus.command(Setpoint(1.0, 0.0, LIMITS, 10.0))
    bus.advance(0.6)
    s = bus.sample()
    assert s.error is ErrorCode.DRIVE_LOST and not s.engaged  # Never a whole sample: lost after the timeout.
