"""What reaches the setpoint subject is not automatically a command (real servo-node processes, real yakut).

- Payloads that are no ServoCommand prefix (a ``String``, an ``Empty``, a heartbeat, one byte) move nothing and are
  counted (``sys.counters`` ``bad_payload``), while a ``Real32`` (the smallest prefix) still commands the servo.
- Two publishers on the subject are counted (``publishers``).
- A second node with the servo's node-ID is detected from its heartbeats: health WARNING, error 6, no actuation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.procs import BIN, RegisterClient, base_env, popen, servo_node, wait_for, y

NODE = 97
SUBJECT = 3719


_observer: list[RegisterClient] = []
"""The in-process reader of the node under test (observation; commands stay with yakut)."""


def counters(env: dict[str, str]) -> dict[str, Any]:
    return dict(_observer[-1].json("sys.counters"))


def motion(env: dict[str, str]) -> dict[str, Any]:
    return dict(_observer[-1].json("sys.motion"))


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    e = base_env(UAVCAN__NODE__ID=str(NODE), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SUBJECT))
    with servo_node(e, tmp_path / "servo.db", NODE):
        _observer.append(RegisterClient(e, NODE, client_node_id=3723))
        try:
            yield e
        finally:
            _observer.pop().close()


def test_foreign_payloads_move_nothing_and_are_counted(env: dict[str, str]) -> None:
    p0 = motion(env)["meas"][0]
    for dtype, value in (
        ("uavcan.primitive.String", "hello"),  # Read as a Real32 it would be 6.85e22: full speed.
        ("uavcan.primitive.Empty", "{}"),
        ("uavcan.node.Heartbeat", "{uptime: 1, health: {value: 0}, mode: {value: 0}, vendor_specific_status_code: 0}"),
        ("uavcan.primitive.scalar.Natural8", "7"),
    ):
        y("pub", "-N", "3", "-T", "0.05", f"{SUBJECT}:{dtype}", value, env=env)
    seen: list[dict[str, Any]] = []
    try:
        c = wait_for(lambda: (c := counters(env), seen.append(c))[0]["bad_payload"] >= 12 and c, timeout=20,
                     what="12 bad payloads counted")
    except AssertionError as ex:
        raise AssertionError(f"{ex}; the node's counters: {seen[-1:]}") from None
    assert c["accepted"] == 0, c
    m = motion(env)
    assert not m["engaged"] and m["meas"][0] == p0, m
    # The smallest real setpoint (a Real32 target) still commands the servo.
    y("pub", "-N", "3", "-T", "0.05", f"{SUBJECT}:uavcan.primitive.scalar.Real32", "0.5", env=env)
    wait_for(lambda: counters(env)["accepted"] >= 1, timeout=20, what="the Real32 setpoint accepted")


def test_two_publishers_are_counted(env: dict[str, str]) -> None:
    cmd = f"{SUBJECT}:uavcan.primitive.scalar.Real32"
    first = {**env, "UAVCAN__NODE__ID": "3721"}
    second = {**env, "UAVCAN__NODE__ID": "3722"}
    with popen([str(BIN / "y"), "pub", "-T", "0.05", cmd, "0.25"], first), popen(
        [str(BIN / "y"), "pub", "-T", "0.05", cmd, "0.75"], second
    ):
        wait_for(lambda: counters(env)["publishers"] == 2, timeout=30, what="two publishers counted")


def test_duplicate_node_id_is_detected(env: dict[str, str], tmp_path: Path) -> None:
    """A second servo with the same node-ID: within a few heartbeats both report health WARNING (3)."""
    with servo_node_twin(env, tmp_path / "twin.db"):

        def warning() -> bool:
            out = y("--json", "sub", "-N", "3", "--with-metadata", "7509:uavcan.node.heartbeat", env=env, timeout=30)
            beats = [json.loads(line)["7509"] for line in out.splitlines()]
            mine = [b["health"]["value"] for b in beats if b["_meta_"]["source_node_id"] == NODE]
            return bool(mine) and all(h == 3 for h in mine)

        wait_for(warning, timeout=60, what="health WARNING from node-ID collision")


def servo_node_twin(env: dict[str, str], registry: Path) -> Any:
    """Another servo-node process with the same node-ID (returns once it runs; it cannot be told apart on the bus)."""
    return popen([str(BIN / "servo-node"), "run", "--registry", str(registry)], env)
