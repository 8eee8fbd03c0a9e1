"""The real ``sim-plant`` brakes its joint to rest when its controller dies, then lets go (issue 8, drive side).

Two controllers: the test's own pycyphal node (it simply stops publishing), and a real ``servo-node`` with the
``udral`` backend killed with SIGKILL. In both the joint spins at constant velocity, frictionless (a passive joint
would coast forever), and the verdict reads the plant's own ``servo.dynamics`` timestamps: the braking lasts at
least v₀/d (never harder than the quick-stop deceleration d) and at most the plant's bound v₀/d + margin, the joint
ends at |v| ≤ 1e-3 with the motor off, and it stays where it stopped.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import reg.udral.service.common as common
from pycyphal.application.heartbeat_publisher import Health

from sim_plant_node._plant import QUICK_STOP_MARGIN_S, REST_VELOCITY
from tests.procs import BIN, base_env, popen, servo_node

from .conftest import TIMEOUT, Bus, Ids

ENGAGED = int(common.Readiness_0_1.ENGAGED)
STANDBY = int(common.Readiness_0_1.STANDBY)
PUBLISH_PERIOD = 0.01
"""``sim.publish_rate`` default 100 Hz: the resolution of the observed stop."""

PlantStarter = Callable[..., Any]


async def _assert_quick_stop(bus: Bus, deceleration: float, before: int) -> None:
    """From dynamics sample ``before`` on (the controller already gone): a ramp at ≤ d to rest, then motor off.

    v₀ is the velocity the drive held until its control timeout (the last command; the highest |v| after ``before``).
    """
    await bus.wait_for(
        "rest with the motor off", lambda: abs(bus.latest()[2]) <= REST_VELOCITY and bus.latest()[4] == 0.0
    )
    states: list[tuple[float, float, float, float, float]] = []
    for r in bus.dynamics[before - 1 :]:  # From the last sample while the controller was alive.
        s = Bus.state(r)
        if not states or s[0] > states[-1][0]:  # A sample published twice (no step in between) counts once.
            states.append(s)
    assert abs(states[0][2]) > 0.5, f"not moving when the controller went away: {states[0]}"
    # Until its control timeout the drive keeps (and may still settle onto) the last commanded velocity; the
    # quick stop starts from the fastest it then held.
    v0 = max(abs(s[2]) for s in states)
    cruising = [s for s in states if abs(s[2]) >= v0 - 0.02]
    t_brake = cruising[-1][0]  # The last sample before the ramp.
    t_rest = next(s[0] for s in states if s[0] > t_brake and abs(s[2]) <= REST_VELOCITY and s[4] == 0.0)
    ramp = abs(v0) / deceleration
    trace = [(round(t - t_brake, 3), round(v, 4), round(f, 3)) for t, _p, v, _a, f in states if t >= t_brake - 0.1]
    assert ramp - 2 * PUBLISH_PERIOD <= t_rest - t_brake <= ramp + QUICK_STOP_MARGIN_S + PUBLISH_PERIOD, trace
    braking = [s for s in states if t_brake <= s[0] <= t_rest]
    for (ta, _pa, va, _aa, _fa), (tb, _pb, vb, _ab, _fb) in itertools.pairwise(braking):
        assert abs(vb) <= abs(va) + 1e-9, "sped up while braking"
        assert abs(va - vb) / (tb - ta) <= deceleration * 1.05 + 1e-6, "braked harder than the quick-stop deceleration"
    assert any(int(r.msg.heartbeat.health.value) == int(Health.ADVISORY) for r in bus.feedback), "no ADVISORY"
    assert bus.feedback_readiness() == STANDBY
    n = len(bus.dynamics)
    _t, p_rest, *_ = bus.latest()
    await bus.settle(1.0)  # It must stay at rest for a while (frictionless: any residual speed would show).
    after = [Bus.state(r) for r in bus.dynamics[n:]]
    assert after, "the plant stopped publishing"
    assert all(s[4] == 0.0 and abs(s[2]) <= REST_VELOCITY for s in after), "motor on or moving after the stop"
    assert max(abs(s[1] - p_rest) for s in after) <= REST_VELOCITY, "drifted after the stop"


async def test_silent_controller_quick_stop(plant: PlantStarter) -> None:
    """The test's node drives the joint at 5 rad/s, then falls silent: quick stop at 10 rad/s² to rest."""
    v0, deceleration = 5.0, 10.0
    _proc, bus = await plant(quick_stop_deceleration=str(deceleration))
    bus.command(ENGAGED, velocity=v0, force=100.0)
    await bus.wait_for("velocity 5", lambda: abs(bus.latest()[2] - v0) <= 0.02)
    await bus.wait_for("feedback ENGAGED", lambda: bus.feedback_readiness() == ENGAGED)
    before = len(bus.dynamics)
    bus.silence()
    await _assert_quick_stop(bus, deceleration, before)


async def test_killed_servo_node_quick_stop(plant: PlantStarter, ids: Ids, tmp_path: Path) -> None:
    """A real servo (``udral`` backend) drives the joint at 3 rad/s in velocity mode; ``kill -9``: quick stop."""
    v0, deceleration = 3.0, 20.0
    _proc, bus = await plant(quick_stop_deceleration=str(deceleration), publish_rate="100")
    servo_id = ids.yakut
    setpoint_subject = ids.status + 1
    env = base_env(
        UAVCAN__NODE__ID=str(servo_id),
        UAVCAN__SUB__SETPOINT_SERVO__ID=str(setpoint_subject),
        SERVO__DRIVE__BACKEND="udral",
        UAVCAN__PUB__DRIVE_SETPOINT__ID=str(ids.setpoint),
        UAVCAN__PUB__DRIVE_READINESS__ID=str(ids.readiness),
        UAVCAN__SUB__DRIVE_DYNAMICS__ID=str(ids.dynamics),
        UAVCAN__SUB__DRIVE_FEEDBACK__ID=str(ids.feedback),
    )
    yakut_env = {k: v for k, v in env.items() if not k.startswith(("SERVO__", "SIM__"))}
    yakut_env["UAVCAN__NODE__ID"] = str(ids.tester + 1 if ids.tester + 1 not in (ids.plant, servo_id) else 121)
    with servo_node(env, tmp_path / "servo.db", servo_id) as servo:
        command = f"{setpoint_subject}:zubax.telega.ServoCommand"
        message = f"{{target: {{kinematics: {{position: .inf, velocity: {v0}}}}}}}"  # Velocity mode.
        with popen([str(BIN / "y"), "pub", "-T", "0.1", command, message], yakut_env):
            await bus.wait_for("velocity 3 from the servo", lambda: abs(bus.latest()[2] - v0) <= 0.02, timeout=90)
            await bus.wait_for("feedback ENGAGED", lambda: bus.feedback_readiness() == ENGAGED)
            before = len(bus.dynamics)
            servo.send_signal(signal.SIGKILL)
            servo.wait(TIMEOUT)
            await _assert_quick_stop(bus, deceleration, before)
