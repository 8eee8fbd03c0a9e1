"""``sim-plant --arm`` on UDP loopback: three UDRAL drives on one node, one coupled plant under gravity."""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import reg.udral.service.common as common
import uavcan.node

from sim_plant import arm
from sim_plant_node._arm_plant import JOINTS
from tests.procs import SIM_PLANT, realtime, start, stop

from .conftest import STARTUP_TIMEOUT, Bus, Ids, clean_env

ENGAGED = int(common.Readiness_0_1.ENGAGED)
STANDBY = int(common.Readiness_0_1.STANDBY)


def _ids() -> list[Ids]:
    """One plant node-ID, a tester node-ID and five subjects per joint."""
    rnd = random.SystemRandom()
    nodes = rnd.sample(range(10, 120), 4)
    base = rnd.randrange(1000, 6000, 16)
    return [Ids(nodes[0], nodes[1 + j], 0, *(base + 5 * j + k for k in range(5))) for j in range(3)]


@pytest.fixture
async def arm_node(tmp_path: Path) -> AsyncIterator[list[Bus]]:
    """The real ``sim-plant --arm`` and a test bus per joint, OPERATIONAL."""
    ids = _ids()
    env = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(ids[0].plant)}
    for name, i in zip(JOINTS, ids, strict=True):
        for port, sid, kind in (("setpoint", i.setpoint, "SUB"), ("readiness", i.readiness, "SUB"),
                                ("dynamics", i.dynamics, "PUB"), ("feedback", i.feedback, "PUB"),
                                ("status", i.status, "PUB")):
            env[f"UAVCAN__{kind}__{name.upper()}__{port.upper()}__ID"] = str(sid)
    log = tmp_path / "arm.log"
    proc = start([*SIM_PLANT, "--arm", "--registry", ":memory:", "--verbose"], clean_env(**env), log=log)
    buses = [Bus(i) for i in ids]
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        operational = int(uavcan.node.Mode_1_0.OPERATIONAL)
        while not (buses[0].heartbeat and int(buses[0].heartbeat[-1].msg.mode.value) == operational
                   and all(b.dynamics for b in buses)):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sim-plant --arm did not come up:\n{log.read_text()}")
            await asyncio.sleep(0.1)
        realtime(proc.pid)  # Above this process (the plant integrates in real time; a drive would hold its joint).
        yield buses
    finally:
        for b in buses:
            await b.close()
        stop(proc, timeout=15)
        text = log.read_text()
        if "Traceback" in text:
            print(text, file=sys.stderr)
        assert proc.returncode == 0, text


async def test_three_joints_move_together_and_the_shoulder_holds_gravity(arm_node: list[Bus]) -> None:
    """Position setpoints on all three drives: each joint reaches its target; the torques the drives report at
    rest are the arm's gravity torques there (the coupled plant, not three independent joints)."""
    target = (0.3, 0.8, 0.6)
    for bus, q in zip(arm_node, target, strict=True):
        bus.command(ENGAGED, position=q, velocity=1.0)

    def all_at_rest() -> bool:  # At once, and no longer accelerating: a joint still settling loads the shoulder.
        return all(abs((s := b.latest())[1] - q) < 1e-3 and abs(s[2]) < 1e-3 and abs(s[3]) < 1e-2
                   for b, q in zip(arm_node, target, strict=True))

    await arm_node[0].wait_for("all three joints at their targets, at rest together", all_at_rest)
    torques = [bus.latest()[4] for bus in arm_node]
    holding = arm.gravity(arm.ArmParams(), target)
    assert torques[0] == pytest.approx(0.0, abs=1e-2)
    assert torques[1] == pytest.approx(holding[1], abs=2e-2)  # −7.6 N·m: the shoulder carries the arm
    assert torques[2] == pytest.approx(holding[2], abs=2e-2)
    assert all(bus.feedback_readiness() == ENGAGED for bus in arm_node)


async def test_a_released_shoulder_falls_while_the_others_hold(arm_node: list[Bus]) -> None:
    """STANDBY on the shoulder alone: its motor is off and the arm falls outward under gravity."""
    for bus, q in zip(arm_node, (0.0, 0.5, 0.5), strict=True):
        bus.command(ENGAGED, position=q)
    await arm_node[1].wait_for("shoulder at 0.5", lambda: abs(arm_node[1].latest()[1] - 0.5) < 1e-3)
    arm_node[1].command(STANDBY, position=0.5)
    await arm_node[1].wait_for("shoulder falling", lambda: arm_node[1].latest()[1] > 1.5)
    assert abs(arm_node[2].latest()[1] - 0.5) < 0.05  # the elbow's motor still holds its angle
    assert math.isfinite(arm_node[0].latest()[1])
