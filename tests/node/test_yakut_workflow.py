"""The servo node as a real process, driven by the real yakut CLI exactly as a user types it (UDP on 127.0.0.1).

Commands are yakut's (``y r`` writes, ``y pub``, ``y cmd``); what the test only observes is read in-process
(:class:`~tests.procs.RegisterClient`), and the first two scenarios share one node process (each begins with a
RESTART after its register writes, as a user would).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.procs import BIN, NOT_REALTIME_LATE_S, RegisterClient, base_env, popen, servo_node, wait_for, y

NODE, CLIENT, OTHER = 3725, 3726, 3735
"""Uncommon node-IDs: other Cyphal traffic on 127.0.0.1 may use the usual 125/126. The persistence scenario runs
its own processes (``OTHER``) beside the shared node."""
DEADMAN_S = 0.5


_observers: list[RegisterClient] = []
"""The in-process observer of each node process running, innermost last."""


def _obs() -> RegisterClient:
    assert _observers, "a node process (_node) opens the observer"
    return _observers[-1]


def servo(env: dict[str, str]) -> dict[str, Any]:
    return dict(_obs().json("sys.status")["servo"])


def counters() -> dict[str, Any]:
    return dict(_obs().json("sys.counters"))


def publish(*args: str, env: dict[str, str]) -> Any:
    """A ``y pub`` running in the background until the block ends (the user pressing Ctrl+C)."""
    e = {k: v for k, v in env.items() if not k.startswith(("SERVO__", "SIM__"))}
    e["UAVCAN__NODE__ID"] = str(CLIENT)
    return popen([str(BIN / "y"), "pub", *args], e)


def restart(env: dict[str, str], node_id: int = NODE) -> None:
    """RESTART, then wait for the node to say it is back as a user's tool does: a heartbeat of INITIALIZATION, then
    OPERATIONAL (its registers answer before its ports are subscribed: ci70 lost a 0.5 s burst of setpoints there)."""
    obs = _obs()
    before, inits = counters()["restarts"], obs.initializations
    out = y("cmd", str(node_id), "restart", env=env)
    assert '"status":0' in out.replace(" ", ""), out
    wait_for(lambda: counters()["restarts"] == before + 1 and obs.initializations > inits and obs.operational,
             timeout=60, what="the node to come back after RESTART (restarted, then OPERATIONAL)")


@contextmanager
def _node(env: dict[str, str], db: Path, node_id: int = NODE) -> Iterator[None]:
    """A servo-node process with the in-process observer open on it."""
    with servo_node(env, db, node_id):
        _observers.append(RegisterClient(env, node_id, client_node_id=CLIENT + 1 + len(_observers),
                                         watch_heartbeat=True))
        try:
            yield
        finally:
            _observers.pop().close()


@pytest.fixture(scope="module")
def node_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    with _node(env, tmp_path_factory.mktemp("yakut") / "servo.db"):
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
    wait_for(lambda: servo(env)["state"] != "engaged", timeout=30, what="disengage after the publisher stops")

    assert y("r", str(NODE), "uavcan.sub.readiness.id", "65535", env=env).strip() == "65535"
    restart(env)
    cmd = "{target: 500, profile_deceleration_acceleration: [-300, +3.14]}"
    with publish("-T", "0.1", "27:zubax.telega.ServoCommand", cmd, env=env):
        s = wait_for(lambda: (s := servo(env))["state"] == "engaged" and s, timeout=30, what="engaged, ungated")
        assert s["target"] == [500.0, 0.0]
        assert s["a_lim"] == [-300.0, 3.14]
        assert s["v_lim"] == [-10.0, 10.0] and s["j_lim"] == 500.0  # defaults elsewhere
        motion = _obs().json("sys.motion")
        assert motion["engaged"] and motion["plan"]["status"] == 0
    s = wait_for(lambda: (s := servo(env))["state"] == "expired" and s, timeout=30, what="expiry")
    # The node's own measure of its deadman reaction: last valid setpoint to expiry.
    print(f"deadman expiry after {s['expired_after_s']} s (timeout {DEADMAN_S} s)")
    assert DEADMAN_S <= s["expired_after_s"] <= DEADMAN_S + NOT_REALTIME_LATE_S


def test_readiness_gating_and_rejections(node_env: dict[str, str]) -> None:
    env = node_env
    y("r", str(NODE), "uavcan.sub.setpoint_servo.id", "27", env=env)
    y("r", str(NODE), "uavcan.sub.readiness.id", "10", env=env)
    restart(env)
    for readiness in ("0", "1", "2"):  # SLEEP, the invalid value 1, STANDBY
        c = counters()
        before = c["ignored_unarmed"], c["ignored_unarmed"] + c["coalesced"]
        y("pub", "-T", "0.1", "-N", "5", "10:zubax.service.readiness", readiness, "27:uavcan.primitive.scalar.real32",
          "7", env=env)  # fmt: skip
        # Counted once the node has taken them (a busy host may still have the last in its queue when yakut exits),
        # each either ignored, or not applied at all behind a newer one queued with it (a busy node's batch).
        wait_for(lambda b=before: (c := counters())["ignored_unarmed"] > b[0]
                 and c["ignored_unarmed"] + c["coalesced"] >= b[1] + 4, timeout=30,
                 what=lambda r=readiness, b=before: f"the setpoints under readiness {r} ignored and counted "
                                                    f"(before {b}): {counters()}, {servo(env)}")
        assert servo(env)["state"] == "standby"
        assert not _obs().json("sys.motion")["engaged"]

    # Setpoints alone with a stale readiness: still standby.
    y("pub", "-T", "0.1", "-N", "3", "27:uavcan.primitive.scalar.real32", "7", env=env)
    assert servo(env)["state"] == "standby"

    bad = {
        "{target: {kinematics: {position: .nan}}}": "NaN",
        "{target: {kinematics: {position: 1, velocity: .inf}}}": "infinite",
        "{target: 1, profile_jerk: -.inf}": "infinite",
        "{target: 1, profile_velocity_reverse_forward: [1, 2]}": "velocity limits",
        "{target: 1, profile_velocity_reverse_forward: [-1.0e-30, 1.0e-30]}": "profile velocity forward 1e-30 is "
                                                                             "below the minimum",  # Issue 49.
    }
    for text, reason in bad.items():
        before = counters()["rejected"]
        y("pub", "-T", "0.1", "-N", "2", "10:zubax.service.readiness", "3", "27:zubax.telega.ServoCommand", text,
          env=env)  # fmt: skip
        after = counters()["rejected"]
        assert after == before + 2, text
        assert reason in _obs().read("sys.last_rejection"), text
        assert not _obs().json("sys.motion")["engaged"]


def test_registers_refused_restart_and_persistence(tmp_path: Path) -> None:
    db = tmp_path / "servo.db"
    env = base_env(UAVCAN__NODE__ID=str(OTHER), SERVO__PROFILE__JERK="200")
    with _node(env, db, OTHER):
        assert _obs().read("servo.profile.jerk") == [200.0]
        assert float(y("r", str(OTHER), "servo.profile.jerk", "300", env=env)) == 300.0
        # Refused: not positive, not finite, wrong signs. The old value stays.
        assert float(y("r", str(OTHER), "servo.profile.jerk", "--", "-5", env=env)) == 300.0
        assert json.loads(y("-j", "r", str(OTHER), "servo.profile.velocity", "--", "3", "4", env=env)) == [-10.0, 10.0]
        assert counters()["refused_writes"] == 2
        assert json.loads(y("-j", "r", str(OTHER), "servo.profile.velocity", "--", "-3", "4", env=env)) == [-3.0, 4.0]
        restart(env, OTHER)
        assert _obs().read("servo.profile.jerk") == [300.0]  # Not re-applied from the environment.
        out = y("-j", "cmd", str(OTHER), "123", env=env, check=False)  # yakut exits 100 on a non-success status.
        assert json.loads(out)["status"] == 3  # STATUS_BAD_COMMAND
        out = y("-j", "cmd", str(OTHER), "store_persistent_states", env=env)
        assert json.loads(out)["status"] == 0
    with _node(env, tmp_path / "other.db", OTHER):
        y("r", str(OTHER), "servo.profile.jerk", "321", env=env)
        y("r", str(OTHER), "servo.deadman_timeout", "2", env=env)
        before = counters()["restarts"]
        assert json.loads(y("-j", "cmd", str(OTHER), "factory_reset", env=env))["status"] == 0
        wait_for(lambda: counters()["restarts"] == before + 1, timeout=60, what="restart after FACTORY_RESET")
        assert _obs().read("servo.profile.jerk") == [200.0]  # Default, then the environment.
        assert _obs().read("servo.deadman_timeout") == [0.5]
    env.pop("SERVO__PROFILE__JERK")
    with _node(env, db, OTHER):  # A new process over the same register file.
        assert _obs().read("servo.profile.jerk") == [300.0]
        assert _obs().read("servo.profile.velocity") == [-3.0, 4.0]


def test_a_following_error_holds_while_the_same_setpoint_repeats(tmp_path: Path) -> None:
    """A setpoint whose force limit is far too small for its motion: a following error. ``y pub`` repeating it is
    refused and counted, and ``sys.status`` keeps the error with its reason (the loop does not try that motion
    again, so the status must not say it follows it); a different setpoint is taken."""
    subject = 3739
    env = base_env(UAVCAN__NODE__ID=str(OTHER), UAVCAN__SUB__SETPOINT_SERVO__ID=str(subject))
    starved = "{target: {kinematics: {position: 100}, force: 0.05}}"
    with _node(env, tmp_path / "servo.db", OTHER):
        with publish("-T", "0.1", f"{subject}:zubax.telega.ServoCommand", starved, env=env):
            wait_for(lambda: servo(env)["error"] == 4, timeout=60, what="the following error")
            ignored = counters()["ignored_error"]
            seen = []
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                seen.append(servo(env))
                time.sleep(0.1)
            assert all(s["state"] == "error" and s["error"] == 4 and "following error" in s["reason"]
                       for s in seen), seen
            wait_for(lambda: counters()["ignored_error"] >= ignored + 5, timeout=60, what="the repeats refused")
        wait_for(lambda: abs(_obs().json("sys.motion")["meas"][1]) < 1e-3, timeout=30, what="rest")
        near = _obs().json("sys.motion")["meas"][0] + 0.01
        with publish("-T", "0.1", f"{subject}:zubax.telega.ServoCommand", f"{{target: {near}}}", env=env):
            wait_for(lambda: (s := servo(env))["state"] == "engaged" and s["error"] == 0, timeout=60,
                     what="the different setpoint taken")


def _info(env: dict[str, str]) -> dict[str, Any]:
    """``y call NODE uavcan.node.getinfo`` as a user types it."""
    return dict(json.loads(y("-j", "call", str(NODE), "uavcan.node.getinfo", env=env))["430"])


def test_hardware_version_comes_from_a_register(node_env: dict[str, str]) -> None:
    """Issue 49: GetInfo said hardware 0.0 with no way to change it. A software-only node still says 0.0 (the
    register's default), and ``servo.hardware_version`` sets it from the next start; a value no version can be is
    refused."""
    env = node_env
    y("r", str(NODE), "servo.hardware_version", "0", "0", env=env)
    restart(env)
    assert _info(env)["hardware_version"] == {"major": 0, "minor": 0}
    assert json.loads(y("-j", "r", str(NODE), "servo.hardware_version", "3", "1", env=env)) == [3, 1]
    assert json.loads(y("-j", "r", str(NODE), "servo.hardware_version", "3", "1", "4", env=env)) == [3, 1]
    restart(env)
    assert _info(env)["hardware_version"] == {"major": 3, "minor": 1}
    y("r", str(NODE), "servo.hardware_version", "0", "0", env=env)  # As it was, for the scenarios after this one.


def test_port_type_registers_are_immutable_and_persistent(node_env: dict[str, str]) -> None:
    """Issue 49: the ports' ``.type`` registers said "not persistent"; the Cyphal register conventions make them
    string, immutable, persistent (pycyphal serves them from a getter, but they are the same after every start)."""
    env = node_env
    for name in ("uavcan.pub.dynamics.type", "uavcan.sub.setpoint_servo.type", "uavcan.sub.servo.setpoint.type"):
        out = y("-j", "call", str(NODE), "uavcan.register.access", f"{{name: {{name: {name}}}}}", env=env)
        res = json.loads(out)["384"]
        assert res["value"]["string"]["value"], (name, res)
        assert res["mutable"] is False and res["persistent"] is True, (name, res)
    out = y("-j", "call", str(NODE), "uavcan.register.access", "{name: {name: uavcan.pub.dynamics.id}}", env=env)
    assert json.loads(out)["384"]["persistent"] is True  # A stored register, as before.
