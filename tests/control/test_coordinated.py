"""Joints of different inertias on one coordinated line, on the simulated clock: the references the coordinator
plans are one normalised profile, and each control law tracks it closely enough, relative to the stroke, that the
joints themselves stay on the line and arrive together (issue 48's three joints).

Deterministic: three loops with their embedded joints are advanced tick by tick from the same instant, as nodes on
one start message are, each on a simulated clock hours in with a phase of its own, as nodes' monotonic clocks are
(a tick is then a period only to floating point, as on a node); the verdicts are on the joints' measured positions.
"""

from __future__ import annotations

import numpy as np
import pytest

from servo_node.control import ControlLoop, Envelope, LoopConfig
from servo_node.coord._joints import ARRIVAL_BAND
from servo_node.coord._segment import AxesInfo, plan_segment
from servo_node.drive import SimDrive
from servo_node.setpoint import ProfileLimits, Setpoint
from sim_plant import JointParams

MAX_FORCE = 1000.0
FORCE_LIMIT = 100.0
"""The setpoint's force limit: a ServoCommand's 0, i.e. the default ``servo.torque_limit``."""
# profile limits, inertia
AXES = [
    (ProfileLimits(-10.0, 10.0, -50.0, 50.0, 500.0), 1.0),
    (ProfileLimits(-4.0, 4.0, -20.0, 30.0, 300.0), 2.0),
    (ProfileLimits(-20.0, 20.0, -80.0, 80.0, 2000.0), 0.5),
]
TARGETS = [3.0, -1.5, 6.0]


def _loop(law: str, inertia: float, rate_hz: float, start_s: float) -> ControlLoop:
    """A loop as ``axis/_config.py`` makes it for the embedded joint (derived envelope, its inertia, default gains)."""
    acceleration = 0.8 * MAX_FORCE / inertia
    env = Envelope(0.95 * 100.0, acceleration, acceleration * rate_hz / 20.0, MAX_FORCE)
    cfg = LoopConfig(rate_hz=rate_hz, law=law, deadman_timeout_s=1e9, envelope=env, inertia=inertia)
    joint = JointParams(max_force=MAX_FORCE, max_velocity=100.0, inertia=inertia)
    loop = ControlLoop(cfg, SimDrive(joint), clock="simulated", start_s=start_s)
    loop.start()
    return loop


@pytest.mark.parametrize("rate_hz", [1000.0, 500.0])
@pytest.mark.parametrize("law", ["velocity", "torque"])
def test_joints_of_different_inertias_stay_on_the_line_and_arrive_together(law: str, rate_hz: float) -> None:
    """At 1 kHz a tick is one of the joint's 1 ms substeps (or, by a hair of rounding, two); at 500 Hz always two:
    a velocity command is reached over the period either way, so the joints track alike."""
    period = 1.0 / rate_hz
    seg = plan_segment([(0.0, 0.0, 0.0)] * 3, TARGETS, AxesInfo(tuple(lim for lim, _ in AXES), (1e-3,) * 3, 0.1),
                       "phase")
    starts = [7200.0 + 0.37e-3 * k for k in range(len(AXES))]
    loops = [_loop(law, inertia, rate_hz, t0) for (_, inertia), t0 in zip(AXES, starts, strict=True)]
    for loop, m, lim in zip(loops, seg.motions, seg.wire, strict=True):
        loop.command(Setpoint(m.target, 0.0, lim, FORCE_LIMIT))
    rows = []
    for _ in range(round((seg.duration + 0.1) / period)):
        row = []
        for loop in loops:
            loop.advance(period)
            s = loop.sample()
            row.append((s.time_s, s.ref_position, s.position))
        rows.append(row)
    a = np.array(rows)  # tick, axis, (t, p_ref, p)
    stroke = np.array([m.target - m.p0 for m in seg.motions])
    ref, joint = a[:, :, 1] / stroke, a[:, :, 2] / stroke
    tracking = np.max(np.abs(ref - joint), axis=0)
    deviation = float(np.max(np.ptp(joint, axis=1)))
    arrivals = [a[np.nonzero(np.abs(joint[:, i] - 1.0) > ARRIVAL_BAND)[0][-1] + 1, i, 0] - starts[i] for i in range(3)]
    print(f"{law}: tracking error {tracking} of the stroke; line deviation {deviation * 100:.5f} %; arrivals "
          f"{arrivals} s")
    assert float(np.max(np.ptp(ref, axis=1))) < 1e-6, "the references are not one normalised profile"
    assert np.all(tracking < 1e-4), tracking
    assert deviation < 1e-4
    assert np.ptp(arrivals) <= period + 1e-9
