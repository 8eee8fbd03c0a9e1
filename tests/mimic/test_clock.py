"""A mimic follower under a wrong time master, on the simulated clock (issue 26, finding 5): a leader stamp mapped
through a master 0.45 s ahead claims 0.46 s of latency; the follower believes at most ``LATENCY_MAX_S`` of it and
stays on its relation (it ran 2.24 units ahead of a leader cruising at 5 units/s)."""

from __future__ import annotations

import numpy as np

from servo_node.control import Relation
from servo_node.control._mimic import LATENCY_MAX_S
from tests.mimic.test_loop import PERIOD, Bench

LATENCY_S = 0.01
MASTER_AHEAD_S = 0.45
V_LEADER = 5.0


def run_skewed(b: Bench, seconds: float, skew_s: float) -> None:
    """As :meth:`Bench.run`, but each stamp is mapped ``skew_s`` too early (a master that far ahead)."""
    for _ in range(round(seconds / PERIOD)):
        now = b.loop.now()
        if now >= b.next_sample:
            ts = now - b.latency_s
            b.lead.sample(b.leader_at(ts), b.leader_v, 0.0, ts - skew_s, now)
            b.next_sample += b.sample_s
        b.loop.advance(PERIOD)
        s = b.loop.sample()
        b.rows.append((s.time_s, s.ref_position, s.ref_velocity, s.ref_acceleration, s.position, s.velocity,
                       float(s.engaged), s.mode, 0.0))  # fmt: skip


def test_a_master_ahead_moves_the_follower_off_its_relation_by_at_most_the_believed_latency() -> None:
    rel = Relation(1.0, 0.0, 0.0)
    b = Bench(rel, latency_s=LATENCY_S)
    b.leader_v = V_LEADER
    run_skewed(b, 0.2, MASTER_AHEAD_S)
    b.follow()
    run_skewed(b, 3.0, MASTER_AHEAD_S)
    r = b.array()[-500:]
    ahead = r[:, 4] - rel(b.leader_at(r[:, 0]))
    bound = V_LEADER * (LATENCY_MAX_S - LATENCY_S)
    print(f"follower ahead of its relation by {np.median(ahead):.4f} (was {V_LEADER * MASTER_AHEAD_S:.2f}; "
          f"bound v·(L_max − L) = {bound:.3f})")
    assert np.all(np.abs(ahead) <= bound + 1e-3) and r[-1, 6] == 1.0
