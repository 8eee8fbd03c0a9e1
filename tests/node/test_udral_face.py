"""The node as a UDRAL servo, driven by the real yakut CLI: Planar setpoints and Readiness, the group mode (three
nodes, one ``sp.Vector3`` message), and the feedback/status/power/dynamics publications."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import numpy as np
import pytest

from tests.procs import BIN, Processes, RegisterClient, base_env, popen, wait_for, y

NODES = (3751, 3752, 3753)
CLIENT = 3759
SETPOINT, READINESS, GROUP = 3750, 3751, 3752
FEEDBACK, STATUS, POWER, DYNAMICS = 3760, 3761, 3762, 3763


def _env(node_id: int, index: int) -> dict[str, str]:
    return base_env(
        UAVCAN__NODE__ID=str(node_id),
        UAVCAN__SUB__SERVO__SETPOINT__ID=str(SETPOINT),
        UAVCAN__SUB__SERVO__READINESS__ID=str(READINESS),
        UAVCAN__SUB__SERVO__GROUP_SETPOINT__ID=str(GROUP),
        UAVCAN__PUB__SERVO__FEEDBACK__ID=str(FEEDBACK + 10 * index),
        UAVCAN__PUB__SERVO__STATUS__ID=str(STATUS + 10 * index),
        UAVCAN__PUB__SERVO__POWER__ID=str(POWER + 10 * index),
        UAVCAN__PUB__SERVO__DYNAMICS__ID=str(DYNAMICS + 10 * index),
        SERVO__UDRAL__GROUP_INDEX=str(index),
        SERVO__DEADMAN_TIMEOUT="1",
    )


@pytest.fixture(scope="module")
def servos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RegisterClient]]:
    tmp = tmp_path_factory.mktemp("udral")
    with ExitStack() as stack:
        nodes = [(_env(n, k), tmp / f"servo{n}.db", n) for k, n in enumerate(NODES)]
        stack.enter_context(Processes()).servo_nodes(*nodes)
        readers = [RegisterClient(base_env(), n, client_node_id=3770 + k) for k, n in enumerate(NODES)]
        stack.callback(lambda: [r.close() for r in readers])
        yield readers


def _yenv() -> dict[str, str]:
    return {**base_env(), "UAVCAN__NODE__ID": str(CLIENT)}


def _pub(*args: str) -> Any:
    return popen([str(BIN / "y"), "pub", *args], _yenv())


def _stamps(subject: int, dtype: str, count: int) -> list[float]:
    """The node's own timestamps [second] of ``count`` messages on ``subject``."""
    out = y("-j", "sub", "-N", str(count), f"{subject}:{dtype}", env=_yenv(), client_id=CLIENT + 2, timeout=30)
    return [json.loads(line)[str(subject)]["timestamp"]["microsecond"] * 1e-6 for line in out.splitlines()]


def _motion(r: RegisterClient) -> dict[str, Any]:
    return dict(r.json("sys.motion"))


def test_planar_setpoint_and_readiness_move_and_stop(servos: list[RegisterClient]) -> None:
    first = servos[0]
    planar = "{kinematics: {angular_position: {radian: 1.5}, angular_velocity: {radian_per_second: 4}}}"
    # STANDBY: the setpoint moves nothing (and is counted as ignored).
    y("pub", "-T", "0.05", "-N", "5", f"{READINESS}:reg.udral.service.common.readiness", "2",
      f"{SETPOINT}:reg.udral.physics.dynamics.rotation.planar", planar, env=_yenv(), client_id=CLIENT)  # fmt: skip
    assert not _motion(first)["engaged"]
    assert first.json("sys.counters")["ignored_unarmed"] >= 4
    with _pub("-T", "0.05", f"{READINESS}:reg.udral.service.common.readiness", "3",
              f"{SETPOINT}:reg.udral.physics.dynamics.rotation.planar", planar):
        m = wait_for(lambda: (m := _motion(first))["engaged"] and abs(m["meas"][0] - 1.5) < 1e-3 and m, timeout=30,
                     what="at 1.5 under ENGAGED")
        s = first.json("sys.status")["servo"]
        assert s["v_lim"] == [-4.0, 4.0], s  # The velocity field limits the profile.
        # The feedback, power and dynamics of the UDRAL face, with this node's state.
        out = y("-j", "sub", "--with-metadata", "-N", "6", f"{FEEDBACK}:reg.udral.service.actuator.common.feedback",
                f"{DYNAMICS}:reg.udral.physics.dynamics.rotation.planarts",
                f"{POWER}:reg.udral.physics.electricity.powerts", env=_yenv(), client_id=CLIENT + 1, timeout=30)
        msgs = [json.loads(line) for line in out.splitlines()]
        fb = [m[str(FEEDBACK)] for m in msgs if str(FEEDBACK) in m]
        dyn = [m[str(DYNAMICS)] for m in msgs if str(DYNAMICS) in m]
        assert fb and all(f["heartbeat"]["readiness"]["value"] == 3 for f in fb), msgs
        assert dyn and abs(dyn[-1]["value"]["kinematics"]["angular_position"]["radian"] - 1.5) < 1e-3, dyn
        # Clocked by the setpoints (20 Hz here), never above the service's 50 Hz: the node's own stamps.
        stamps = _stamps(DYNAMICS, "reg.udral.physics.dynamics.rotation.planarts", 12)
        assert 10.0 <= (len(stamps) - 1) / (stamps[-1] - stamps[0]) <= 50.0, stamps
    # Without setpoints, at least once a second (the service's MAX_PUBLICATION_PERIOD), status included: both
    # subscribers at once (each waits for three messages at 1 Hz).
    def arrivals(subject: int, dtype: str, client: int) -> list[float]:
        out = y("-j", "sub", "--with-metadata", "-N", "3", f"{subject}:{dtype}", env=_yenv(), client_id=client,
                timeout=30)
        return [json.loads(line)[str(subject)]["_meta_"]["ts_monotonic"] for line in out.splitlines()]

    with ThreadPoolExecutor(2) as pool:
        subs = [pool.submit(arrivals, FEEDBACK, "reg.udral.service.actuator.common.feedback", CLIENT + 1),
                pool.submit(arrivals, STATUS, "reg.udral.service.actuator.common.status", CLIENT + 3)]
        for sub in subs:
            times = sub.result()
            assert len(times) == 3 and max(b - a for a, b in itertools.pairwise(times)) <= 1.5, times
    # The publisher stopped: the deadman (and the stale readiness) stop the joint, at rest.
    m = wait_for(lambda: not (m := _motion(first))["engaged"] and m, timeout=10, what="the stop")
    assert abs(m["meas"][1]) < 1e-3
    # Velocity as the commanded quantity: the joint reaches it.
    vel = "{kinematics: {angular_position: {radian: .nan}, angular_velocity: {radian_per_second: -2}}}"
    with _pub("-T", "0.05", f"{READINESS}:reg.udral.service.common.readiness", "3",
              f"{SETPOINT}:reg.udral.physics.dynamics.rotation.planar", vel):
        wait_for(lambda: abs(_motion(first)["meas"][1] + 2.0) < 1e-3, timeout=30, what="velocity -2")
    wait_for(lambda: not _motion(first)["engaged"], timeout=10, what="the stop after velocity mode")


def test_one_group_message_moves_three_nodes(servos: list[RegisterClient]) -> None:
    starts = [_motion(r)["meas"][0] for r in servos]
    # The group setpoint carries float16: each node's target is the float16 nearest to what was sent (0.016 apart
    # at 20 units, where an earlier test may leave a joint).
    targets = [float(np.float16(s + d)) for s, d in zip(starts, (0.5, -0.25, 1.0), strict=True)]
    vector = "[" + ", ".join(f"{t!r}" for t in targets) + "]"
    with _pub("-T", "0.05", f"{READINESS}:reg.udral.service.common.readiness", "3",
              f"{GROUP}:reg.udral.service.actuator.common.sp.vector3", vector):
        for r, t in zip(servos, targets, strict=True):
            wait_for(lambda r=r, t=t: abs(_motion(r)["meas"][0] - t) < 2e-3, timeout=30,
                     what=f"a node at {t} ({r.json('sys.status')}, {_motion(r)})")
