"""A drive on the bus tracks like an embedded one: real ``servo-node`` and ``sim-plant`` processes, UDP and CAN.

The verdicts are the node's own figures for the move (``sys.motion``: ``track_max`` judges each measurement
against the reference of its own instant, ``settled`` counts from the plan start to the first measurement within
``servo.arrival_tolerance`` at or after the planned end, ``over`` the largest excursion past the target), so they
hold on a loaded machine; wall-clock waits are generous and never asserted. Both processes run under SCHED_FIFO
where permitted, as a servo and its drive are deployed: a loop closed over a bus at 10 units/s cannot track to
0.01 through the scheduling stalls of a host oversubscribed many times (the link figures then show the stalls).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.procs import ARRIVAL_LATE_S, SIM_PLANT, Processes, realtime, settled_on_time, wait_for
from tests.system.test_closed_loop import NODE, SETPOINT, _bus_env, motion, publisher

TARGET = 3.0
TOLERANCE = 0.001
"""``servo.arrival_tolerance`` (the default)."""


def _settled(env: dict[str, str]) -> dict[str, Any] | None:
    m = motion(env)
    return m if isinstance(m["settled"], float) and abs(m["meas"][0] - TARGET) < 0.01 else None


@pytest.mark.parametrize("bus", ["udp", "udpmc"])
def test_move_over_the_bus_tracks_and_settles_on_time(bus: str, tmp_path: Path) -> None:
    servo_env, plant_env, yakut_env = _bus_env(bus)
    servo_env.update(  # The default profile (v 10, a 50, j 500): a 0 → 3 move plans 0.600 s.
        SERVO__PROFILE__VELOCITY="-10 10", SERVO__PROFILE__ACCELERATION="-50 50", SERVO__PROFILE__JERK="500"
    )
    with Processes() as group:  # Both end together.
        plant = group.start([*SIM_PLANT, "--registry", str(tmp_path / "plant.db")], plant_env)
        node_env = yakut_env | {k: v for k, v in servo_env.items() if k.startswith(("SERVO", "UAVCAN"))}
        (node,) = group.servo_nodes((node_env, tmp_path / "servo.db", NODE))
        wait_for(lambda: motion(yakut_env)["meas"][0] == 0.0, timeout=30, what="the drive's dynamics")
        rt = realtime(plant.pid) and realtime(node.pid)
        print(f"{bus}: SCHED_FIFO {'on' if rt else 'not permitted'}")
        with publisher(yakut_env, "-T", "0.1", f"{SETPOINT}:uavcan.primitive.scalar.real32", str(TARGET)):
            m = wait_for(lambda: _settled(yakut_env), timeout=60, what=f"arrival over {bus}")
        duration = m["plan"]["T"]
        age_p50, age_max, delay_p50, delay_max = m["link"]
        print(
            f"{bus}: plan {duration} s, settled after {m['settled']} s, track_max {m['track_max']:.2e}, "
            f"overshoot {m['over']:.1e}; measurement age p50 {age_p50} ms max {age_max} ms, "
            f"command delay p50 {delay_p50} ms max {delay_max} ms"
        )
        assert duration == pytest.approx(0.6, abs=1e-3)
        # Arrival, not tracking quality (bench/remote.py measures that): a loaded host's bus delays a frame or two.
        assert settled_on_time(m, ARRIVAL_LATE_S), m
        assert 0.0 < age_p50 <= age_max and 0.0 < delay_p50 <= delay_max  # The link was measured.
