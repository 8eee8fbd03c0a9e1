"""The real ``sim-plant`` command on UDP loopback: readiness gating, setpoint modes, control timeout, reports."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import reg.udral.service.common as common
from pycyphal.application.heartbeat_publisher import Health

from sim_plant_node._plant import REST_VELOCITY

from .conftest import BIN, Bus, Ids, SimPlantProcess, clean_env

ENGAGED = int(common.Readiness_0_1.ENGAGED)
STANDBY = int(common.Readiness_0_1.STANDBY)

PlantStarter = Callable[..., Any]


def near(a: float, b: float, tol: float) -> bool:
    """|a − b| ≤ tol."""
    return abs(a - b) <= tol


async def test_yakut_pub_velocity_setpoint(plant: PlantStarter, ids: Ids) -> None:
    """(a) ENGAGED readiness and a 2 rad/s velocity setpoint from the real ``yakut pub`` spin the joint to 2 rad/s."""
    _proc, bus = await plant()
    setpoint = (
        "{kinematics: {angular_position: {radian: .nan}, angular_velocity: {radian_per_second: 2.0},"
        " angular_acceleration: {radian_per_second_per_second: .nan}}, torque: {newton_meter: 10}}"
    )
    yakut = subprocess.Popen(
        [
            str(BIN / "yakut"),
            "pub",
            "-T",
            "0.05",
            f"{ids.readiness}:reg.udral.service.common.readiness",
            "3",
            f"{ids.setpoint}:reg.udral.physics.dynamics.rotation.planar",
            setpoint,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(UAVCAN__UDP__IFACE="127.0.0.1", UAVCAN__NODE__ID=str(ids.yakut)),
    )
    try:
        await bus.wait_for("velocity 2 rad/s", lambda: near(bus.latest()[2], 2.0, 0.02), timeout=90.0)
        await bus.wait_for("feedback ENGAGED", lambda: bool(bus.feedback) and bus.feedback_readiness() == ENGAGED)
        assert yakut.poll() is None, "yakut pub died"
        t0, p0 = bus.latest()[:2]
        await bus.wait_for("a later sample", lambda: bus.latest()[0] > t0 + 0.5)
        t1, p1, v1, _a, f1 = bus.latest()
        assert near((p1 - p0) / (t1 - t0), 2.0, 0.05)  # Moves at 2 rad/s on the timestamps: sim time = wall time.
        assert near(v1, 2.0, 0.02)
        assert abs(f1) <= 10.0 + 1e-3  # Within the torque limit of the setpoint.
    finally:
        yakut.kill()
        _out, err = yakut.communicate(timeout=30)
    assert "Traceback" not in err, err


async def test_standby_applies_no_force_and_joint_coasts(plant: PlantStarter) -> None:
    """(b) STANDBY ignores setpoints (no force, no motion); after ENGAGED, STANDBY lets the spinning joint coast."""
    _proc, bus = await plant()
    bus.command(STANDBY, velocity=3.0, force=50.0)
    await bus.wait_for("feedback STANDBY", lambda: bool(bus.feedback) and bus.feedback_readiness() == STANDBY)
    n = len(bus.dynamics)
    await bus.settle(1.5)
    for r in bus.dynamics[n:]:
        _t, _p, v, _a, f = Bus.state(r)
        assert f == 0.0 and v == 0.0, "the joint moved under STANDBY"
    assert bus.feedback[-1].msg.demand_factor_pct == 0

    bus.command(ENGAGED, velocity=3.0, force=50.0)
    await bus.wait_for("velocity 3", lambda: near(bus.latest()[2], 3.0, 0.02))
    await bus.wait_for("feedback ENGAGED", lambda: bus.feedback_readiness() == ENGAGED)

    bus.command(STANDBY, velocity=-3.0, force=50.0)  # Would reverse if it were applied.
    await bus.wait_for("feedback STANDBY", lambda: bus.feedback_readiness() == STANDBY)
    await bus.wait_for("force 0", lambda: bus.latest()[4] == 0.0)
    n = len(bus.dynamics)
    await bus.settle(1.0)
    for r in bus.dynamics[n:]:
        _t, _p, v, _a, f = Bus.state(r)
        assert f == 0.0
        assert near(v, 3.0, 0.02), "a frictionless passive joint keeps its speed"


async def test_control_timeout_removes_force(plant: PlantStarter) -> None:
    """(c) When the controller falls silent the plant drops to STANDBY within about a second, stops, force 0 — but
    a plant that itself stood still longer than the timeout (SIGSTOP: a loaded host) hears the messages queued
    meanwhile before it judges the controller, and keeps going."""
    proc, bus = await plant(damping_constant="2")
    bus.command(ENGAGED, velocity=1.5, force=20.0)
    await bus.wait_for("velocity 1.5", lambda: near(bus.latest()[2], 1.5, 0.02))
    await bus.wait_for("damping torque", lambda: near(bus.latest()[4], 3.0, 0.1))  # B·v holds the speed.
    proc.proc.send_signal(signal.SIGSTOP)
    await bus.settle(1.5)
    proc.proc.send_signal(signal.SIGCONT)
    n = len(bus.dynamics)
    await bus.settle(0.5)
    assert "Control timeout" not in proc.log(), "its own stall was taken for the controller's silence"
    assert all(near(Bus.state(r)[2], 1.5, 0.02) for r in bus.dynamics[n:])
    bus.silence()
    await bus.wait_for("feedback STANDBY", lambda: bus.feedback_readiness() == STANDBY)
    await bus.wait_for(
        "stopped, motor off", lambda: abs(bus.latest()[2]) <= REST_VELOCITY and bus.latest()[4] == 0.0
    )
    n = len(bus.dynamics)
    await bus.settle(0.5)
    assert all(Bus.state(r)[4] == 0.0 for r in bus.dynamics[n:]), "the force came back without a controller"


async def test_a_host_slow_on_every_round_still_stops_an_uncommanded_joint(plant: PlantStarter) -> None:
    """(c) The stall guard defers judging the controller once, not for ever: a plant whose every supervision round
    comes late (it runs 5 ms in every 0.3 s) still quick-stops a joint its controller stopped commanding."""
    proc, bus = await plant(damping_constant="2")
    bus.command(ENGAGED, velocity=1.5, force=20.0)
    await bus.wait_for("velocity 1.5", lambda: near(bus.latest()[2], 1.5, 0.02))
    bus.silence()
    try:
        for _ in range(10):
            proc.proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(0.3)
            proc.proc.send_signal(signal.SIGCONT)
            await asyncio.sleep(0.005)
        proc.proc.send_signal(signal.SIGSTOP)
        assert "Control timeout: quick stop" in proc.log(), "no round judged the controller's silence"
    finally:
        proc.proc.send_signal(signal.SIGCONT)
    await bus.wait_for(
        "stopped, motor off", lambda: abs(bus.latest()[2]) <= REST_VELOCITY and bus.latest()[4] == 0.0
    )


async def test_torque_only_setpoint_is_force_control(plant: PlantStarter) -> None:
    """(d) A torque-only setpoint accelerates the joint at torque/inertia and reports the applied torque."""
    _proc, bus = await plant(inertia="2")
    bus.command(ENGAGED, force=3.0)
    await bus.wait_for("accelerating", lambda: bus.latest()[2] > 0.5)
    await bus.wait_for("a later sample", lambda: len(bus.dynamics) > 20)
    t0, _p0, v0, a0, f0 = bus.latest()
    await bus.wait_for("another second", lambda: bus.latest()[0] > t0 + 1.0)
    t1, _p1, v1, a1, f1 = bus.latest()
    assert near(a0, 1.5, 1e-3) and near(a1, 1.5, 1e-3)
    assert near(f0, 3.0, 1e-4) and near(f1, 3.0, 1e-4)
    assert near((v1 - v0) / (t1 - t0), 1.5, 0.03)  # Velocity grows at T/J over the plant's timestamps.
    assert bus.feedback[-1].msg.demand_factor_pct == 3  # 3 N·m of the available 100 N·m.


async def test_linear_position_setpoint(plant: PlantStarter) -> None:
    """A linear joint (``sim.kind=linear``) follows a position setpoint with a speed cap, in metres."""
    _proc, bus = await plant("linear", control_p="20")
    bus.command(ENGAGED, position=0.5, velocity=0.4)
    await bus.wait_for("moving", lambda: bus.latest()[1] > 0.1)
    assert bus.latest()[2] <= 0.4 + 1e-3, "|v| caps the speed in position control"
    await bus.wait_for("at 0.5 m", lambda: near(bus.latest()[1], 0.5, 1e-3) and abs(bus.latest()[2]) < 1e-3)


async def test_infinite_setpoint_is_rejected_without_harm(plant: PlantStarter) -> None:
    """Infinite fields are rejected (error count, ADVISORY, no crash); they do not count as setpoints."""
    proc, bus = await plant()
    bus.command(ENGAGED, velocity=1.0)
    await bus.wait_for("velocity 1", lambda: near(bus.latest()[2], 1.0, 0.02))
    bus.setpoint = None  # Keep readiness going, send garbage instead of setpoints.
    for _ in range(20):
        await bus.publish_once(bus.make_setpoint(velocity=float("inf")))
        await bus.publish_once(bus.make_setpoint(position=float("-inf"), force=1.0))
        await bus.settle(0.02)
    await bus.wait_for("error count", lambda: bool(bus.status) and bus.status[-1].msg.error_count > 0)
    assert any(int(r.msg.heartbeat.health.value) == int(Health.ADVISORY) for r in bus.feedback)
    await bus.wait_for("control timeout: garbage keeps nothing alive", lambda: bus.feedback_readiness() == STANDBY)
    await bus.wait_for(
        "quick stop to rest, motor off", lambda: bus.latest()[4] == 0.0 and abs(bus.latest()[2]) <= REST_VELOCITY
    )
    bus.command(ENGAGED, velocity=-1.0)
    await bus.wait_for("valid setpoints work again", lambda: near(bus.latest()[2], -1.0, 0.02))
    assert proc.proc.poll() is None


async def test_all_nan_setpoint_changes_nothing(plant: PlantStarter) -> None:
    """An all-NaN setpoint keeps the previous command (and counts as a setpoint for the timeout)."""
    _proc, bus = await plant()
    bus.command(ENGAGED, velocity=-1.0)
    await bus.wait_for("velocity -1", lambda: near(bus.latest()[2], -1.0, 0.02))
    bus.command(ENGAGED)
    n = len(bus.dynamics)
    await bus.settle(2.0)  # Longer than the control timeout: NaN setpoints keep it alive.
    assert bus.feedback_readiness() == ENGAGED
    assert all(near(Bus.state(r)[2], -1.0, 0.02) for r in bus.dynamics[n:])


def test_invalid_register_is_a_clear_startup_error(ids: Ids, workdir: Path) -> None:
    """An invalid register stops the node at startup, naming the register."""
    proc = SimPlantProcess(ids, workdir, inertia="-1")
    try:
        rc = proc.proc.wait(timeout=120)
        log = proc.log()
    finally:
        proc.close()
    assert rc == 2
    assert "sim.inertia" in log and "Traceback" not in log
    assert not proc.registry.exists()
