"""The first promise, on the simulated loop clock: the joint never leaves its envelope and every stop ends at rest.

Each test is one numbered item of the motion-safety issue, run in-process against the embedded joint with the
configuration the node would build from its registers (:func:`servo_node.axis._config.loop_config`), setpoints
interpreted exactly as the node does (:func:`servo_node.setpoint.interpret`). Deterministic: loop time only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cyphal_common.errors import ConfigurationError
from servo_node.axis._config import loop_config, setpoint_floors
from servo_node.control import ControlLoop
from servo_node.drive import SimDrive
from servo_node.drive.sim import joint_from_registers
from servo_node.errors import ErrorCode
from servo_node.registers import RefusedWriteError, ServoRegistry
from servo_node.setpoint import FLOOR_FRACTION, ProfileLimits, Rejected, Rejection, Setpoint, interpret

PUBLISH_PERIOD = 0.02
"""A publisher repeating its setpoint at 50 Hz."""

VELOCITY_MARGIN = 0.05
"""Measured |v| may exceed a velocity limit by this fraction (plus 0.01) while the law corrects a tracking error."""


@dataclass
class Bench:
    """One servo on the simulated clock: registers → config → loop with the embedded joint."""

    reg: ServoRegistry
    loop: ControlLoop
    notes: list[str] = field(default_factory=list)
    peak_velocity: float = 0.0

    @classmethod
    def make(cls, **registers: str) -> Bench:
        reg = ServoRegistry(None, {k.upper().replace(".", "__"): v for k, v in registers.items()})
        notes: list[str] = []
        cfg = loop_config(reg, notes)
        loop = ControlLoop(cfg, SimDrive(joint_from_registers(reg)), clock="simulated")
        loop.start()
        return cls(reg, loop, notes)

    @property
    def period(self) -> float:
        return 1.0 / self.loop.config.rate_hz

    def setpoint(
        self,
        position: float,
        velocity: float = 0.0,
        force: float = 0.0,
        v_lim: tuple[float, float] = (0.0, 0.0),
        a_lim: tuple[float, float] = (0.0, 0.0),
        jerk: float = 0.0,
    ) -> Setpoint | Rejected:
        """Interpret a ServoCommand's fields as the node does."""
        r = self.reg
        v, a = r.reals("servo.profile.velocity"), r.reals("servo.profile.acceleration")
        defaults = ProfileLimits(v[0], v[1], a[0], a[1], r.real("servo.profile.jerk"))
        floors = setpoint_floors(self.loop.config.envelope)
        return interpret(position, velocity, force, v_lim, a_lim, jerk, defaults, r.real("servo.torque_limit"), floors)

    def run(self, seconds: float, sp: Setpoint | None = None) -> None:
        """Advance ``seconds``; with ``sp``, a publisher repeats it every PUBLISH_PERIOD (reception = loop time)."""
        end = self.loop.now() + seconds
        while self.loop.now() < end - 1e-12:
            if sp is not None:
                self.loop.command(sp, self.loop.now())
            step = min(PUBLISH_PERIOD if sp is not None else 0.01, end - self.loop.now())
            for _ in range(max(1, round(step / self.period))):
                self.loop.advance(self.period)
                self.peak_velocity = max(self.peak_velocity, abs(self.loop.sample().velocity))

    def rest_bound(self) -> float:
        """Deadman + the computed stop bound: when the joint must be at rest after the last setpoint."""
        return self.loop.config.deadman_timeout_s + self.loop.config.stop_bound_s()

    def assert_ends_at_rest(self) -> None:
        """After the publisher died: released within the bound, at rest, and it stays where it stopped."""
        self.run(self.rest_bound())
        s = self.loop.sample()
        assert not s.engaged, s
        assert abs(s.velocity) <= self.loop.config.rest_velocity, s
        if not math.isnan(s.stop_bound_s):  # NaN: it never moved (every setpoint refused).
            assert s.stop_took_s <= s.stop_bound_s, s
        p = s.position
        self.run(2.0)
        assert abs(self.loop.sample().position - p) <= 1e-6, "the joint creeps after the stop"


def accepted(x: Setpoint | Rejected) -> Setpoint:
    assert isinstance(x, Setpoint), x
    return x


def test_item1_profile_beyond_the_drive_is_clipped_into_the_envelope() -> None:
    """v ±50, a ±200, j 2000 against a joint that can do 100 units/s²: the reference stays in the envelope."""
    b = Bench.make(**{"sim.position": "100"})
    env = b.loop.config.envelope
    assert env.acceleration == pytest.approx(80.0)  # 0.8 · max_force / inertia
    sp = accepted(b.setpoint(-100.0, v_lim=(-50.0, 50.0), a_lim=(-200.0, 200.0), jerk=2000.0))
    b.run(6.0, sp)
    s = b.loop.sample()
    assert s.limited
    assert b.peak_velocity <= 50.0 * (1 + VELOCITY_MARGIN) + 0.01
    assert abs(s.position + 100.0) <= 1e-3
    assert s.tracking_error_max < 0.05


def test_item1_publisher_dies_mid_move_and_the_stop_ends_at_rest() -> None:
    b = Bench.make(**{"sim.position": "100"})
    sp = accepted(b.setpoint(-100.0, v_lim=(-50.0, 50.0), a_lim=(-200.0, 200.0), jerk=2000.0))
    b.run(1.5, sp)
    assert abs(b.loop.sample().velocity) > 40.0  # Mid-move, near full speed.
    b.assert_ends_at_rest()
    assert b.loop.sample().expired


def test_item2_feasible_stop_does_not_creep() -> None:
    b = Bench.make()
    sp = accepted(b.setpoint(1000.0, a_lim=(-80.0, 80.0)))
    b.run(1.0, sp)
    b.assert_ends_at_rest()


def test_item3_tiny_positive_jerk_is_refused() -> None:
    b = Bench.make()
    for jerk in (1.4e-45, 1e-3):
        r = b.setpoint(0.0, jerk=jerk)
        assert isinstance(r, Rejected) and r.code is Rejection.BELOW_MINIMUM, r


def test_tiny_velocity_limit_is_refused_like_the_other_limits() -> None:
    """Issue 49: a velocity limit of 1e-30 was accepted (nothing ever arrives), though a, j and force had floors.
    Refused as theirs are, in a setpoint or as the register default it falls back to; a reverse limit of exactly 0
    (no motion backwards) stays allowed, and the floor itself is accepted."""
    b = Bench.make()
    floor = FLOOR_FRACTION * b.loop.config.envelope.velocity
    assert floor > 0.0
    for v_lim in ((-1.0, 1e-30), (-1e-30, 1.0), (-1e-30, 1e-30), (0.0, 0.5 * floor)):
        r = b.setpoint(1.0, v_lim=v_lim)
        assert isinstance(r, Rejected) and r.code is Rejection.BELOW_MINIMUM and "profile velocity" in r.reason, r
    accepted(b.setpoint(1.0, v_lim=(0.0, floor)))
    accepted(b.setpoint(1.0, v_lim=(-floor, 1.0)))
    b.reg["servo.profile.velocity"] = [-1e-30, 1e-30]  # The register takes it ({<= 0, > 0}); a setpoint using it not.
    r = b.setpoint(1.0)
    assert isinstance(r, Rejected) and r.code is Rejection.BELOW_MINIMUM, r


@pytest.mark.parametrize("jerk", [10.0, 100.0])
def test_item3_smaller_jerk_while_accelerating_brakes_within_the_envelope_first(jerk: float) -> None:
    """Target = current position with a small jerk while accelerating: never beyond the velocity limit (10)."""
    b = Bench.make()
    b.run(0.08, accepted(b.setpoint(1000.0)))
    assert b.loop.sample().ref_acceleration > 10.0  # Accelerating hard.
    sp = accepted(b.setpoint(b.loop.sample().position, jerk=jerk))
    b.run(3.0, sp)
    assert b.peak_velocity <= 10.0 * (1 + VELOCITY_MARGIN) + 0.01
    b.assert_ends_at_rest()


@pytest.mark.parametrize(
    "fields",
    [
        {"a_lim": (-0.01, 50.0)},  # tiny deceleration (above the setpoint floor)
        {"a_lim": (-50.0, 0.01)},  # tiny acceleration
        {"force": 0.02},  # tiny force: the joint cannot follow (following error), the stop uses the envelope force
    ],
)
def test_item4_tiny_limits_in_the_last_setpoint_do_not_prevent_the_stop(fields: Mapping[str, object]) -> None:
    b = Bench.make()
    b.run(0.3, accepted(b.setpoint(5.0)))
    b.run(0.3, accepted(b.setpoint(-5.0, **fields)))  # type: ignore[arg-type]
    b.assert_ends_at_rest()


def test_item4_stop_registers_and_deadman_have_sane_bounds() -> None:
    b = Bench.make()
    for name, value in (("servo.stop.jerk", 1e-45), ("servo.stop.acceleration", 1e-45), ("servo.deadman_timeout", 1e9)):
        with pytest.raises(RefusedWriteError):
            b.reg[name] = value
        assert b.reg.refused_writes > 0
    slow = Bench.make(**{"servo.stop.acceleration": "0.001", "servo.stop.jerk": "0.001"})
    assert any("raised" in n for n in slow.notes)  # Kept within 5 % of the envelope, and said so.
    slow.run(1.0, accepted(slow.setpoint(1000.0)))
    slow.assert_ends_at_rest()


def test_item5_stale_setpoints_never_extend_the_deadman() -> None:
    """Setpoints handled late (a flood) carry their reception time: the stop starts deadman + 1 tick after the
    last *received* one, and setpoints older than the deadman when taken are never applied."""
    b = Bench.make()
    sp = accepted(b.setpoint(1000.0))
    b.run(0.5, sp)
    last_rx = b.loop.now()
    b.loop.command(sp, last_rx)
    deadman = b.loop.config.deadman_timeout_s
    while b.loop.now() < last_rx + deadman + 0.3:
        b.loop.command(sp, last_rx)  # The same, long-received setpoint, handled again and again.
        b.loop.advance(b.period)
        s = b.loop.sample()
        if s.expired:
            break
    assert s.expired
    assert last_rx + deadman <= s.time_s <= last_rx + deadman + b.period + 1e-9
    fresh_sp = accepted(b.setpoint(-1000.0))
    b.loop.command(fresh_sp, b.loop.now() - deadman - b.period)  # Older than the deadman when taken.
    b.loop.advance(b.period)
    assert b.loop.sample().mode != 1.0 and b.loop.sample().ref_velocity >= 0.0  # Not applied: still stopping.
    b.assert_ends_at_rest()


def test_item8_force_limit_below_the_floor_is_refused_and_a_drive_without_force_is_a_configuration_error() -> None:
    b = Bench.make(**{"servo.torque_limit": "1e-30"})
    r = b.setpoint(1.0)
    assert isinstance(r, Rejected) and "force limit" in r.reason
    with pytest.raises(ConfigurationError, match="cannot move"):
        loop_config(ServoRegistry(None, {"SIM__MAX_FORCE": "0"}))


def test_item8_a_joint_that_cannot_follow_is_a_following_error() -> None:
    b = Bench.make()
    b.run(1.0, accepted(b.setpoint(100.0, force=0.05)))  # Legal, but far too little force to follow the profile.
    s = b.loop.sample()
    assert s.error is ErrorCode.FOLLOWING_ERROR
    b.assert_ends_at_rest()


def test_item9_slow_loop_caps_the_gain_and_stays_in_the_limits() -> None:
    b = Bench.make(**{"servo.loop_rate": "10"})
    assert b.loop.config.velocity_gain == pytest.approx(5.0)
    assert any("capped" in n for n in b.notes)
    b.run(2.0, accepted(b.setpoint(100.0)))
    assert b.peak_velocity <= 10.0 * (1 + VELOCITY_MARGIN) + 0.01
    b.assert_ends_at_rest()


_limit = st.one_of(st.just(0.0), st.floats(1e-40, 1e-2), st.floats(0.1, 1e3), st.floats(1e4, 1e30))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_force=st.floats(5.0, 500.0),
    inertia=st.floats(0.2, 5.0),
    friction=st.floats(0.0, 2.0),
    law=st.sampled_from(["velocity", "torque"]),
    steps=st.lists(
        st.tuples(
            st.floats(-50.0, 50.0),  # target
            _limit,  # velocity limit
            _limit,  # deceleration
            _limit,  # acceleration
            _limit,  # jerk
            st.sampled_from([0.001, 0.02, 0.1, 0.3]),  # time to the next setpoint [s]
            st.booleans(),  # readiness lost (a stop) before it
        ),
        min_size=1,
        max_size=25,
    ),
)
@example(max_force=198.0, inertia=0.203125, friction=2.0, law="torque",
         steps=[(25.0, 10000.0, 10000.0, 10000.0, 10002.0, 0.001, False), (28.0, 0.0, 0.0, 0.0, 0.1, 0.3, False)])
def test_property_in_envelope_and_at_rest_after_the_last_setpoint(
    max_force: float, inertia: float, friction: float, law: str, steps: list[tuple[float, ...]]
) -> None:
    """Random drives and setpoint sequences (tiny/huge/zero limits, flips, stops): the measured velocity stays in
    the envelope, and after the last setpoint the joint is at rest within deadman + stop bound, every time. The
    ``@example``, found by CI: the computed-torque law at the envelope's limits (jerk 38 600, 0.2 kg·m² at 198 N·m,
    static friction) overshot the envelope's 95 rad/s to 100.5 before the command stage cut any force that would
    carry the joint past it."""
    b = Bench.make(
        **{
            "sim.max_force": str(max_force),
            "sim.inertia": str(inertia),
            "sim.static_friction": str(friction),
            "servo.drive.mode": law,
        }
    )
    env = b.loop.config.envelope
    for target, v, dec, acc, jerk, dt, stop in steps:
        if stop:
            b.loop.stop()
        sp = b.setpoint(target, v_lim=(-v, v) if v else (0.0, 0.0), a_lim=(-dec, acc) if dec and acc else (0.0, 0.0),
                        jerk=jerk)  # fmt: skip
        if isinstance(sp, Setpoint):
            b.loop.command(sp, b.loop.now())
        for _ in range(max(1, round(dt / b.period))):
            b.loop.advance(b.period)
            b.peak_velocity = max(b.peak_velocity, abs(b.loop.sample().velocity))
    assert b.peak_velocity <= env.velocity * (1 + VELOCITY_MARGIN) + 0.01
    b.assert_ends_at_rest()
    assert math.isfinite(b.loop.sample().position)
