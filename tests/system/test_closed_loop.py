"""Closed loop through real processes: yakut → servo-node → drive (embedded, or sim-plant over CAN or UDP).

The embedded case runs the loop on the stepped clock (one period of simulated time per tick), so its verdict on
arrival time does not depend on how the machine schedules processes. The two-process cases check behaviour
(arrival, stop after the publisher dies, error when the drive dies), not durations.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cyphal_common.transport import yakut_transport_expression
from tests.procs import (
    BIN,
    SIM_PLANT,
    Processes,
    RegisterClient,
    base_env,
    popen,
    realtime,
    servo_node,
    settled_on_time,
    wait_for,
    y,
)

NODE, PLANT, CLIENT = 107, 87, 108
SETPOINT = 3127
"""Uncommon IDs (CAN-valid node-IDs): other Cyphal traffic on 127.0.0.1 may use the usual 125/126 and subject 27."""
DEADMAN_S = 0.5


_readers: dict[str, RegisterClient] = {}


@pytest.fixture(autouse=True)
def _close_readers() -> Iterator[None]:
    yield
    while _readers:
        _readers.popitem()[1].close()


def _reader(env: dict[str, str]) -> RegisterClient:
    key = env.get("UAVCAN__CAN__IFACE") or env["UAVCAN__UDP__IFACE"]
    if key not in _readers:
        _readers[key] = RegisterClient(env, NODE)
    return _readers[key]


def motion(env: dict[str, str]) -> dict[str, Any]:
    return dict(_reader(env).json("sys.motion"))


def servo(env: dict[str, str]) -> dict[str, Any]:
    return dict(_reader(env).json("sys.status")["servo"])


def at_target(env: dict[str, str], target: float) -> dict[str, Any]:
    """sys.motion once the joint is engaged and at the target (else AssertionError showing where it is)."""
    m = motion(env)
    assert m["engaged"] and abs(m["meas"][0] - target) < 0.05, m
    return m


@contextmanager
def publisher(env: dict[str, str], *args: str) -> Iterator[Any]:
    e = {k: v for k, v in env.items() if not k.startswith(("SERVO__", "SIM__"))}
    e["UAVCAN__NODE__ID"] = str(CLIENT)
    with popen([str(BIN / "y"), "pub", *args], e) as proc:
        yield proc


def test_embedded_move_with_yakut(tmp_path: Path) -> None:
    env = base_env(
        UAVCAN__NODE__ID=str(NODE),
        UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT),
        SERVO__LOOP_CLOCK="stepped",
    )
    with servo_node(env, tmp_path / "servo.db", NODE):
        y("r", str(NODE), "servo.profile.velocity", "--", "-40", "40", env=env)
        y("r", str(NODE), "servo.profile.acceleration", "--", "-80", "80", env=env)
        y("r", str(NODE), "servo.profile.jerk", "1000", env=env)
        (rate,) = _reader(env).read("servo.loop_rate")
        with publisher(env, "-T", "0.1", f"{SETPOINT}:uavcan.primitive.scalar.real32", "100"):
            m = wait_for(lambda: isinstance((m := motion(env))["settled"], float) and m, timeout=60, what="arrival")
            # The reference at full precision (sys.motion rounds it): the target, at rest.
            assert _reader(env).read("sys.reference") == [100.0, 0.0, 0.0]
        final = m["meas"][0]
        print(
            f"embedded: planned {m['plan']['T']} s, settled after {m['settled']} s, "
            f"max tracking error during motion {m['track_max']:.3e}, position {final}"
        )
        assert abs(final - 100.0) <= 1e-3
        assert settled_on_time(m, 2.0 / rate), m


def _bus_env(kind: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(servo env, sim-plant env, yakut env) for one bus of the given kind."""
    ids = {"drive_setpoint": 3140, "drive_readiness": 3141, "drive_dynamics": 3142, "drive_feedback": 3143}
    if kind.startswith("udpmc"):
        buses = 2 if kind == "udpmc-redundant" else 1
        port = str(random.randint(20000, 60000))
        iface = " ".join(
            f"udpmc:239.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}:{port}"
            for _ in range(buses)
        )
        common = {"UAVCAN__CAN__IFACE": iface, "UAVCAN__CAN__MTU": "64"}
        yakut = base_env(**common, YAKUT_TRANSPORT=yakut_transport_expression(iface, CLIENT, 64))
        yakut.pop("UAVCAN__UDP__IFACE")
    else:
        common = {"UAVCAN__UDP__IFACE": "127.0.0.1"}
        yakut = base_env(**common)
    servo_env = base_env(
        **common,
        UAVCAN__NODE__ID=str(NODE),
        UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT),
        SERVO__DRIVE__BACKEND="udral",
        UAVCAN__PUB__DRIVE_SETPOINT__ID=str(ids["drive_setpoint"]),
        UAVCAN__PUB__DRIVE_READINESS__ID=str(ids["drive_readiness"]),
        UAVCAN__SUB__DRIVE_DYNAMICS__ID=str(ids["drive_dynamics"]),
        UAVCAN__SUB__DRIVE_FEEDBACK__ID=str(ids["drive_feedback"]),
        SERVO__PROFILE__VELOCITY="-20 20",
        SERVO__PROFILE__ACCELERATION="-40 40",
        SERVO__PROFILE__JERK="400",
    )
    plant_env = base_env(
        **common,
        UAVCAN__NODE__ID=str(PLANT),
        UAVCAN__SUB__SERVO__SETPOINT__ID=str(ids["drive_setpoint"]),
        UAVCAN__SUB__SERVO__READINESS__ID=str(ids["drive_readiness"]),
        UAVCAN__PUB__SERVO__DYNAMICS__ID=str(ids["drive_dynamics"]),
        UAVCAN__PUB__SERVO__FEEDBACK__ID=str(ids["drive_feedback"]),
        SIM__PUBLISH_RATE="200",
    )
    for e in (servo_env, plant_env):
        if kind.startswith("udpmc"):
            e.pop("UAVCAN__UDP__IFACE")
    return servo_env, plant_env, yakut


@pytest.mark.parametrize("bus", ["udpmc-redundant", "udp"])
def test_servo_with_sim_plant_drive(bus: str, tmp_path: Path) -> None:
    """The same scenario over Cyphal/UDP and over CAN (udpmc; redundant: two buses, each the same single-bus
    media, so one udpmc run covers the plain case too)."""
    servo_env, plant_env, yakut_env = _bus_env(bus)
    with Processes() as group:  # Both end together.
        plant = group.start([*SIM_PLANT, "--registry", str(tmp_path / "plant.db")], plant_env)
        node_env = yakut_env | {k: v for k, v in servo_env.items() if k.startswith(("SERVO", "UAVCAN"))}
        group.servo_nodes((node_env, tmp_path / "servo.db", NODE))
        realtime(plant.pid)  # The drive as the servo (Processes.servo_nodes): on time whatever the other workers do.
        env = yakut_env
        with publisher(env, "-T", "0.1", f"{SETPOINT}:uavcan.primitive.scalar.real32", "30"):
            m = wait_for(lambda: at_target(env, 30.0), timeout=60, what=f"the remote joint to reach 30 over {bus}")
            print(f"{bus}: reached {m['meas'][0]:.4f} (ref {m['ref'][0]}), max tracking error {m['track_max']:.3e}")
            assert servo(env)["state"] == "engaged"
        # Far away, then kill the publisher mid-motion (the user's Ctrl+C is no kinder): deadman expiry,
        # then a jerk-limited stop, then no force.
        with publisher(env, "-T", "0.1", f"{SETPOINT}:uavcan.primitive.scalar.real32", "1000") as pub:
            wait_for(lambda: abs(motion(env)["meas"][1]) > 10.0, timeout=30, what="fast motion")
            pub.send_signal(signal.SIGKILL)
        s = wait_for(lambda: (s := servo(env))["state"] == "expired" and s, timeout=10, what="expiry")
        m = wait_for(lambda: not (m := motion(env))["engaged"] and m, timeout=10, what="stop and disengage")
        planned, took, bound = m["stop"]
        expired = s["expired_after_s"]
        print(f"{bus}: expired {expired} s after the last setpoint; stop {planned} s planned, {took} s taken")
        assert expired <= DEADMAN_S + 0.1
        assert planned > 0.3  # It was moving fast: a real stop, not a formality.
        assert planned <= took <= bound  # Then held until the drive is at rest, within the bound fixed up front.
        assert abs(m["meas"][1]) <= 1e-3, m  # The drive followed the stop down to rest.

        # Move again, then kill the drive: the servo reports a drive error and keeps braking.
        with publisher(env, "-T", "0.1", f"{SETPOINT}:uavcan.primitive.scalar.real32", "35"):
            wait_for(lambda: motion(env)["engaged"], timeout=30, what="engaged again")
            plant.send_signal(signal.SIGKILL)
            s = wait_for(lambda: (s := servo(env))["state"] == "error" and s, timeout=15, what="drive error")
            assert s["error"] == 3 and "drive" in s["reason"]
            # A joint whose state is unknown is never let go: the servo keeps commanding zero velocity.
            assert motion(env)["engaged"]
            # The heartbeat tells the whole network: health WARNING.
            beats = y("--json", "sub", "-N", "2", "--with-metadata", "7509:uavcan.node.heartbeat", env=env)
            health = [
                b["7509"]["health"]["value"]
                for b in map(json.loads, beats.splitlines())
                if b["7509"]["_meta_"]["source_node_id"] == NODE
            ]
            assert health and all(h == 3 for h in health), health
