"""A servo's ``dynamics`` is every sample of its joint's motion at ``servo.dynamics_rate``, each stamped with its
own time, even when the node's event loop falls behind its control loop.

The hold-up is certain: the node's process is stopped (SIGSTOP) for 0.3 s mid-motion. On the stepped loop clock
(``servo.loop_clock = stepped``: loop time advances one period per tick, the simulation is deterministic) the loop
then catches up on the 0.3 s of loop time in a burst, far faster than the event loop publishes; a node that sampled
its loop's latest output when the event loop got round to it left out nearly all of those 0.3 s (a gap of ~0.3 s
in the stamps), which made the motion unjudgeable from its samples (``servo-coord``'s measured line and arrival).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np

from tests.mimic.recorder import Recorder
from tests.procs import BIN, base_env, popen, read_register, servo_node, wait_for

NODE, SETPOINT, DYNAMICS, RECORDER = 3751, 3752, 3753, 3754
RATE_HZ = 200.0
STOPPED_S = 0.3


def test_dynamics_keeps_every_sample_when_the_node_is_held_up(tmp_path: Path) -> None:
    env = base_env(UAVCAN__NODE__ID=str(NODE), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT),
                   UAVCAN__PUB__DYNAMICS__ID=str(DYNAMICS), SERVO__DYNAMICS_RATE=str(RATE_HZ),
                   SERVO__LOOP_CLOCK="stepped", SERVO__PROFILE__VELOCITY="-1 1")
    with servo_node(env, tmp_path / "servo.db", NODE) as node, \
            popen([str(BIN / "y"), "pub", "-T", "0.05", f"{SETPOINT}:uavcan.primitive.scalar.real32", "100"],
                  {**env, "UAVCAN__NODE__ID": "3755"}):
        rec = Recorder(env, [DYNAMICS], RECORDER)
        try:
            wait_for(lambda: abs(json.loads(read_register(NODE, "sys.motion", env))["meas"][1]) > 0.5, timeout=60,
                     what="the joint moving")
            t_stop = rec.latest(0)[0]
            node.send_signal(signal.SIGSTOP)
            time.sleep(STOPPED_S)
            node.send_signal(signal.SIGCONT)
            wait_for(lambda: rec.latest(0)[0] > t_stop + STOPPED_S + 0.5, timeout=30, what="samples after the hold-up")
            timing = json.loads(read_register(NODE, "sys.timing", env))
            rows = rec.series(0)
        finally:
            rec.close()
    t, p, v = rows[:, 0], rows[:, 1], rows[:, 2]
    window = (t >= t_stop - 0.2) & (t <= t_stop + STOPPED_S + 0.4)
    gaps = np.diff(t[window])
    print(f"{np.count_nonzero(window)} samples around the hold-up; stamps {gaps.min() * 1e3:.3f}–"
          f"{gaps.max() * 1e3:.3f} ms apart; sys.timing {timing}")
    assert np.all(np.diff(t) > 0.0), "stamps out of order or repeated"
    assert gaps.max() <= 1.5 / RATE_HZ, f"a gap of {gaps.max() * 1e3:.1f} ms in the samples"
    # One motion: each position where the velocities before and after it put it (no jump, no stale sample).
    dp = np.diff(p[window])
    assert np.allclose(dp, 0.5 * (v[window][1:] + v[window][:-1]) * gaps, atol=1e-4), np.abs(dp).max()
    assert timing["dynamics_lost"] == 0
