"""The servo node as a real process, driven by the real yakut CLI exactly as a user types it (UDP on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.procs import BIN, base_env, popen, read_register, servo_node, status, wait_for, y

NODE, CLIENT = 3725, 3726
"""Uncommon node-IDs: other Cyphal traffic on 127.0.0.1 may use the usual 125/126."""
DEADMAN_S = 0.5


def servo(env: dict[str, str]) -> dict[str, Any]:
    return dict(status(NODE, env)["servo"])


def publish(*args: str, env: dict[str, str]) -> Any:
    """A ``y pub`` running in the background until the block ends (the user pressing Ctrl+C)."""
    e = {k: v for k, v in env.items() if not k.startswith(("SERVO__", "SIM__"))}
    e["UAVCAN__NODE__ID"] = str(CLIENT)
    return popen([str(BIN / "y"), "pub", *args], e)


def restart(env: dict[str, str]) -> None:
    before = json.loads(read_register(NODE, "sys.counters", env))["restarts"]
    out = y("cmd", str(NODE), "restart", env=env)
    assert '"status":0' in out.replace(" ", ""), out
    wait_for(
        lambda: json.loads(read_register(NODE, "sys.counters", env))["restarts"] == before + 1,
        timeout=60,
        what="the node to come back after RESTART",
    )


@pytest.fixture()
def node_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    with servo_node(env, tmp_path / "servo.db", NODE):
        yield env


def test_issue_workflow_verbatim(node_env: dict[str, str]) -> None:
    env = node_env
    assert y("r", str(NODE), "uavcan.sub.setpoint_servo.id", "27", env=env).strip() == "27"
    assert y("r", str(NODE), "uavcan.sub.readiness.id", "10", env=env).strip() == "10"
    restart(env)
    s = servo(env)
    assert s["state"] == "standby"

    with publish("-T", "0.1", "10:zubax.service.readiness", "3", "27:uavcan.primitive.scalar.real32", "100", env=env):
        s = wait_for(lambda: (s := servo(env))["state"] == "engaged" and s, timeout=30, what="engaged")
        assert s["target"] == [100.0, 0.0] and s["mode"] == "position"
        assert s["v_lim"] == [-10.0, 10.0] and s["a_lim"] == [-50.0, 50.0] and s["j_lim"] == 500.0
    wait_for(lambda: servo(env)["state"] != "engaged", timeout=10, what="disengage after the publisher stops")

    assert y("r", str(NODE), "uavcan.sub.readiness.id", "65535", env=env).strip() == "65535"
    restart(env)
    cmd = "{target: 500, profile_deceleration_acceleration: [-300, +3.14]}"
    with publish("-T", "0.1", "27:zubax.telega.ServoCommand", cmd, env=env):
        s = wait_for(lambda: (s := servo(env))["state"] == "engaged" and s, timeout=30, what="engaged, ungated")
        assert s["target"] == [500.0, 0.0]
        assert s["a_lim"] == [-300.0, 3.14]
        assert s["v_lim"] == [-10.0, 10.0] and s["j_lim"] == 500.0  # defaults elsewhere
        motion = json.loads(read_register(NODE, "sys.motion", env))
        assert motion["engaged"] and motion["plan"]["status"] == 0
    s = wait_for(lambda: (s := servo(env))["state"] == "expired" and s, timeout=10, what="expiry")
    # The node's own measure of its deadman reaction: last valid setpoint to expiry.
    print(f"deadman expiry after {s['expired_after_s']} s (timeout {DEADMAN_S} s)")
    assert DEADMAN_S <= s["expired_after_s"] <= DEADMAN_S + 0.1


def test_readiness_gating_and_rejections(node_env: dict[str, str]) -> None:
    env = node_env
    y("r", str(NODE), "uavcan.sub.setpoint_servo.id", "27", env=env)
    y("r", str(NODE), "uavcan.sub.readiness.id", "10", env=env)
    restart(env)
    for readiness in ("0", "1", "2"):  # SLEEP, the invalid value 1, STANDBY
        before = json.loads(read_register(NODE, "sys.counters", env))["ignored_unarmed"]
        y("pub", "-T", "0.1", "-N", "5", "10:zubax.service.readiness", readiness, "27:uavcan.primitive.scalar.real32",
          "7", env=env)  # fmt: skip
        counters = json.loads(read_register(NODE, "sys.counters", env))
        assert counters["ignored_unarmed"] >= before + 4, (readiness, counters)
        assert servo(env)["state"] == "standby"
        assert not json.loads(read_register(NODE, "sys.motion", env))["engaged"]

    # Setpoints alone with a stale readiness: still standby.
    y("pub", "-T", "0.1", "-N", "3", "27:uavcan.primitive.scalar.real32", "7", env=env)
    assert servo(env)["state"] == "standby"

    bad = {
        "{target: {kinematics: {position: .nan}}}": "NaN",
        "{target: {kinematics: {position: 1, velocity: .inf}}}": "infinite",
        "{target: 1, profile_jerk: -.inf}": "infinite",
        "{target: 1, profile_velocity_reverse_forward: [1, 2]}": "velocity limits",
    }
    for text, reason in bad.items():
        before = json.loads(read_register(NODE, "sys.counters", env))["rejected"]
        y("pub", "-T", "0.1", "-N", "2", "10:zubax.service.readiness", "3", "27:zubax.telega.ServoCommand", text,
          env=env)  # fmt: skip
        after = json.loads(read_register(NODE, "sys.counters", env))["rejected"]
        assert after == before + 2, text
        assert reason in read_register(NODE, "sys.last_rejection", env), text
        assert not json.loads(read_register(NODE, "sys.motion", env))["engaged"]


def test_registers_refused_restart_and_persistence(tmp_path: Path) -> None:
    db = tmp_path / "servo.db"
    env = base_env(UAVCAN__NODE__ID=str(NODE), SERVO__PROFILE__JERK="200")
    with servo_node(env, db, NODE):
        assert float(y("r", str(NODE), "servo.profile.jerk", env=env)) == 200.0
        assert float(y("r", str(NODE), "servo.profile.jerk", "300", env=env)) == 300.0
        # Refused: not positive, not finite, wrong signs. The old value stays.
        assert float(y("r", str(NODE), "servo.profile.jerk", "--", "-5", env=env)) == 300.0
        assert json.loads(y("-j", "r", str(NODE), "servo.profile.velocity", "--", "3", "4", env=env)) == [-10.0, 10.0]
        assert json.loads(read_register(NODE, "sys.counters", env))["refused_writes"] == 2
        assert json.loads(y("-j", "r", str(NODE), "servo.profile.velocity", "--", "-3", "4", env=env)) == [-3.0, 4.0]
        restart(env)
        assert float(y("r", str(NODE), "servo.profile.jerk", env=env)) == 300.0  # Not re-applied from the environment.
        out = y("-j", "cmd", str(NODE), "123", env=env, check=False)  # yakut exits 100 on a non-success status.
        assert json.loads(out)["status"] == 3  # STATUS_BAD_COMMAND
        out = y("-j", "cmd", str(NODE), "store_persistent_states", env=env)
        assert json.loads(out)["status"] == 0
    with servo_node(env, tmp_path / "other.db", NODE):
        y("r", str(NODE), "servo.profile.jerk", "321", env=env)
        y("r", str(NODE), "servo.deadman_timeout", "2", env=env)
        before = json.loads(read_register(NODE, "sys.counters", env))["restarts"]
        assert json.loads(y("-j", "cmd", str(NODE), "factory_reset", env=env))["status"] == 0
        wait_for(
            lambda: json.loads(read_register(NODE, "sys.counters", env))["restarts"] == before + 1,
            timeout=60,
            what="restart after FACTORY_RESET",
        )
        assert float(y("r", str(NODE), "servo.profile.jerk", env=env)) == 200.0  # Default, then the environment.
        assert float(y("r", str(NODE), "servo.deadman_timeout", env=env)) == 0.5
    env.pop("SERVO__PROFILE__JERK")
    with servo_node(env, db, NODE):  # A new process over the same register file.
        assert float(y("r", str(NODE), "servo.profile.jerk", env=env)) == 300.0
        assert json.loads(y("-j", "r", str(NODE), "servo.profile.velocity", env=env)) == [-3.0, 4.0]
