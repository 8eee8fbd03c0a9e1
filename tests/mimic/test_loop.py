"""Mimic in the control loop on the simulated clock: convergence, own limits, lag, gear-in, compensation, safety.

A synthetic leader writes samples into the loop's ``lead`` array as the node would (stamp, reception time); every
verdict is on loop time, so it is deterministic.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servo_node.control import ControlLoop, LeaderInput, LoopConfig, MimicSample, Relation
from servo_node.control import _layout as L
from servo_node.drive import SimDrive
from servo_node.setpoint import ProfileLimits, Setpoint
from sim_plant import JointParams

PERIOD = 1e-3
LIMITS = ProfileLimits(-6.0, 6.0, -30.0, 30.0, 300.0)
DEADMAN = 0.3


class Bench:
    """A follower loop and a leader at constant acceleration/velocity, sampled every ``sample_s`` with latency."""

    def __init__(self, relation: Relation, latency_s: float = 0.01, sample_s: float = 0.02, compensate: bool = True):
        cfg = LoopConfig(deadman_timeout_s=DEADMAN)
        self.loop = ControlLoop(cfg, SimDrive(JointParams(max_force=1000.0, max_velocity=100.0)), clock="simulated")
        self.loop.start()
        self.lead = LeaderInput(self.loop.arrays.lead, relation, compensate)
        self.relation = relation
        self.latency_s, self.sample_s = latency_s, sample_s
        self.next_sample = 0.0
        self.leader_v = 0.0
        self.leader_p = 0.0
        self.leader_a = 0.0
        self.alive = True
        self.lead.state(L.LEADER_OK, 0.0)
        self.rows: list[tuple[float, ...]] = []

    def leader_at(self, t: float) -> float:
        return self.leader_p + self.leader_v * t + 0.5 * self.leader_a * t * t

    def follow(self) -> None:
        self.loop.follow(Setpoint(0.0, 0.0, LIMITS, 100.0), self.loop.now())

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / PERIOD)):
            now = self.loop.now()
            if self.alive and now >= self.next_sample:
                ts = now - self.latency_s  # The sample describes the leader at ts and arrives now.
                self.lead.sample(self.leader_at(ts), self.leader_v + self.leader_a * ts, self.leader_a, ts, now)
                self.next_sample += self.sample_s
            self.loop.advance(PERIOD)
            s = self.loop.sample()
            m = MimicSample.read(self.loop.out)
            self.rows.append((s.time_s, s.ref_position, s.ref_velocity, s.ref_acceleration, s.position, s.velocity,
                              float(s.engaged), s.mode, float(m.lag)))

    def array(self) -> np.ndarray:
        return np.array(self.rows)


def test_converges_exactly_at_constant_leader_velocity_with_offset_and_reference() -> None:
    rel = Relation(5.0, 0.3, 1.0)
    b = Bench(rel)
    b.leader_v = 1.0
    b.run(0.2)
    b.follow()
    b.run(3.0)
    r = b.array()
    err = r[-500:, 4] - rel(b.leader_at(r[-500:, 0]))
    print(f"relation error after gear-in: max {np.abs(err).max():.2e} (uncompensated m·v·L = {5 * 1 * 0.01:.2e})")
    assert np.abs(err).max() < 1e-6
    assert MimicSample.read(b.loop.out).lag_count == 0


def test_without_compensation_the_error_is_m_v_latency() -> None:
    rel = Relation(5.0, 0.0, 0.0)
    b = Bench(rel, compensate=False)
    b.leader_v = 1.0
    b.follow()
    b.run(3.0)
    r = b.array()
    err = r[-500:, 4] - rel(b.leader_at(r[-500:, 0]))
    assert abs(np.mean(err) + 5.0 * 1.0 * 0.01) < 1e-3  # Lags by m·v·L: the sample is taken as of its reception.


def test_gear_in_to_a_moving_leader_has_no_step_and_stays_within_own_limits() -> None:
    rel = Relation(2.0, -0.5, 0.0)
    b = Bench(rel)
    b.leader_v = 2.5  # Target velocity 5 of the follower's 6.
    b.run(0.5)
    b.follow()
    b.run(4.0)
    r = b.array()
    v_ref, a_ref = r[:, 2], r[:, 3]
    assert np.abs(v_ref).max() <= LIMITS.v_max * (1 + 1e-9)
    assert np.abs(a_ref).max() <= LIMITS.a_max * (1 + 1e-9)
    jerk = np.abs(np.diff(a_ref)) / PERIOD
    assert jerk.max() <= LIMITS.j_max * (1 + 1e-6)  # No step in acceleration, hence none in velocity.
    assert np.abs(np.diff(r[:, 5])).max() <= LIMITS.a_max * PERIOD * 1.5  # Measured velocity: no step either.
    err = r[-200:, 4] - rel(b.leader_at(r[-200:, 0]))
    assert np.abs(err).max() < 1e-6


def test_a_leader_faster_than_the_follower_lags_within_limits_then_catches_up() -> None:
    rel = Relation(5.0, 0.0, 0.0)
    b = Bench(rel)
    b.leader_v = 1.5  # Asks for 7.5 of 6.
    b.follow()
    b.run(1.0)
    assert MimicSample.read(b.loop.out).lag
    b.leader_p, b.leader_v = b.leader_at(b.loop.now()) - 1.0 * b.loop.now(), 1.0  # Continuous, slower: 5 of 6.
    b.run(12.0)
    r = b.array()
    assert np.abs(r[:, 2]).max() <= LIMITS.v_max * (1 + 1e-9)
    assert np.abs(r[:, 3]).max() <= LIMITS.a_max * (1 + 1e-9)
    m = MimicSample.read(b.loop.out)
    assert not m.lag and m.lag_count == 1
    assert abs(r[-1, 4] - rel(b.leader_at(r[-1, 0]))) < 1e-6


def test_an_accelerating_leader_beyond_the_follower_s_speed_keeps_the_reference_within_it() -> None:
    """The target accelerates (feed-forward) past the follower's own speed limit: the reference must reach the limit
    with zero acceleration (it passed it by a²/2j, 6.83 for a limit of 6, while the feed-forward stayed on), and the
    relative frame's drift within a tick must not push it over (a·T, the 0.2 % seen over the bus)."""
    b = Bench(Relation(5.0, 0.0, 0.0))
    b.leader_v, b.leader_a = 1.0, 2.0  # The target: 5 → beyond 6 units/s within 0.1 s, accelerating at 10 units/s².
    b.follow()
    b.run(1.0)
    r = b.array()
    print(f"|v_ref| max {np.abs(r[:, 2]).max():.9g} (limit {LIMITS.v_max:g})")
    assert np.abs(r[:, 2]).max() <= LIMITS.v_max * (1 + 1e-9)
    assert np.abs(r[:, 3]).max() <= LIMITS.a_max * (1 + 1e-9)


@settings(max_examples=24, deadline=None)
@given(
    multiplier=st.floats(-8.0, 8.0).filter(lambda m: abs(m) > 0.05),
    leader_v=st.floats(-3.0, 3.0),
    leader_a=st.floats(-3.0, 3.0),
    start_s=st.floats(0.0, 1.0),
)
def test_reference_never_exceeds_own_limits(
    multiplier: float, leader_v: float, leader_a: float, start_s: float
) -> None:
    """Also while the target accelerates into, through and back out of the follower's speed limits."""
    b = Bench(Relation(multiplier, 0.1, -0.2))
    b.leader_v, b.leader_a = leader_v, leader_a
    b.run(start_s)
    b.follow()
    b.run(1.5)
    r = b.array()
    assert np.abs(r[:, 2]).max() <= LIMITS.v_max * (1 + 1e-9)
    assert np.abs(r[:, 3]).max() <= LIMITS.a_max * (1 + 1e-9)
    assert (np.abs(np.diff(r[:, 3])) / PERIOD).max() <= LIMITS.j_max * (1 + 1e-6)


def test_a_leader_that_disengages_stops_the_follower_within_two_periods() -> None:
    b = Bench(Relation(2.0, 0.0, 0.0))
    b.leader_v = 1.0
    b.follow()
    b.run(1.0)
    rx = b.loop.now()
    b.lead.state(L.LEADER_DISENGAGED, rx)
    b.run(2 * PERIOD)
    s = b.loop.sample()
    assert s.stopping
    m = MimicSample.read(b.loop.out)
    assert m.stop_reason == "the leader disengaged" and m.stop_latency_s <= 2 * PERIOD
    b.run(1.5)
    s = b.loop.sample()
    assert not s.engaged and abs(s.velocity) < 1e-3  # Jerk-limited stop to rest, then released.


def test_a_lost_leader_stops_after_the_deadman_and_a_stop_then_rest() -> None:
    b = Bench(Relation(2.0, 0.0, 0.0))
    b.leader_v = 1.0
    b.follow()
    b.run(1.0)
    b.alive = False
    last_rx = b.loop.now()  # No sample arrives after this.
    b.run(DEADMAN + 0.01)
    s = b.loop.sample()
    assert s.stopping and s.expired
    assert MimicSample.read(b.loop.out).stop_reason.startswith("lost leader")
    assert s.expired_after_s <= DEADMAN + 2 * PERIOD
    b.run(s.stop_bound_s)
    s = b.loop.sample()
    assert not s.engaged and abs(s.velocity) < 1e-3
    assert s.stop_took_s <= s.stop_bound_s
    assert last_rx <= s.expired_at_s  # Counted from the reception of the last sample.


def test_a_leader_sample_stuck_mid_update_is_neither_waited_for_nor_taken_torn() -> None:
    """The node's writer of the leader's samples stalls mid-update (odd sequence number, torn fields): the loop ticks
    on with the last whole sample, never the torn one, and the leader's silence is seen as a lost leader after the
    deadman, a stop to rest; once the writer finishes, the next sample is taken again."""
    b = Bench(Relation(2.0, 0.0, 0.0))
    b.leader_v = 1.0
    b.follow()
    b.run(1.0)
    lead = b.loop.arrays.lead
    lead[L.LD_SEQ] += 1.0  # begin_write of the next sample, which does not finish while the loop ticks
    lead[1:] = np.inf
    b.alive = False
    before = b.loop.sample()
    b.run(DEADMAN + 0.01)
    s = b.loop.sample()
    assert s.time_s > before.time_s + DEADMAN
    assert s.stopping and s.expired and MimicSample.read(b.loop.out).stop_reason.startswith("lost leader")
    b.run(s.stop_bound_s)
    s = b.loop.sample()
    assert not s.engaged and abs(s.velocity) < 1e-3 and np.isfinite(s.position)
