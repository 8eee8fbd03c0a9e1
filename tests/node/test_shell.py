"""The node shell and its axis in one process, on the simulated loop clock, over UDP on 127.0.0.1.

The servo node and a client node (the "controller" a user would run) talk over real pycyphal UDP transports.
Loop time moves only when the test (or the shell's safe stop) advances it, so every timing verdict is on the
loop's clock. Waiting for a message to arrive is wall time, but loop time stands still meanwhile.
Run inside a network namespace (``docs/testing.md``) so no other node answers.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import pycyphal
import pycyphal.application
import pytest
import reg.udral.physics.dynamics.rotation as rot
import uavcan.diagnostic
import uavcan.node
import zubax.physics.dynamics
import zubax.physics.kinematics
import zubax.telega

from cyphal_common.udral import make_dynamics_ts
from servo_node.axis import Axis
from servo_node.axis._supervision import SUPERVISE_IDLE_PERIOD_S, SUPERVISE_PERIOD_S
from servo_node.drive._remote_link import RX_COUNT
from servo_node.node import ServoNode

NODE, CLIENT = 3733, 3734  # Uncommon: other Cyphal traffic on 127.0.0.1 may use 125/126.
SETPOINT, DYNAMICS = 27, 30
DEADMAN_S = 0.5
DRIVE_PORTS = {
    "UAVCAN__PUB__DRIVE_SETPOINT__ID": "40",
    "UAVCAN__PUB__DRIVE_READINESS__ID": "41",
    "UAVCAN__SUB__DRIVE_DYNAMICS__ID": "42",
    "UAVCAN__SUB__DRIVE_FEEDBACK__ID": "43",
}
LIMITS = {"SERVO__PROFILE__VELOCITY": "-40 40", "SERVO__PROFILE__ACCELERATION": "-80 80", "SERVO__PROFILE__JERK": "800"}


def command(target: float) -> zubax.telega.ServoCommand_1_0:
    return zubax.telega.ServoCommand_1_0(
        target=zubax.physics.dynamics.DoF2nd_1_0(
            kinematics=zubax.physics.kinematics.DoF2nd_1_0(position=target, velocity=0.0), force=0.0
        )
    )


async def until(predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Wait (wall time; loop time does not move) until ``predicate()`` is truthy."""
    async with asyncio.timeout(timeout):
        while not (value := predicate()):
            await asyncio.sleep(0.005)
    return value


class Client:
    """The controller side: a pycyphal node that publishes setpoints and calls ExecuteCommand."""

    def __init__(self) -> None:
        reg = pycyphal.application.make_registry(
            None, {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(CLIENT)}
        )
        self.node = pycyphal.application.make_node(pycyphal.application.NodeInfo(name="test.client"), reg)
        self.pubs: dict[int, pycyphal.presentation.Publisher[zubax.telega.ServoCommand_1_0]] = {}
        self.node.start()

    async def send(self, axis: Axis, target: float, subject: int = SETPOINT) -> None:
        """Publish one setpoint and wait until the axis has counted it (accepted or not)."""
        c = axis.counters
        before = c.setpoints_accepted + c.setpoints_ignored_unarmed + c.setpoints_ignored_error + c.setpoints_staged
        if subject not in self.pubs:
            self.pubs[subject] = self.node.make_publisher(zubax.telega.ServoCommand_1_0, subject)
        await self.pubs[subject].publish(command(target))
        await until(
            lambda: c.setpoints_accepted + c.setpoints_ignored_unarmed + c.setpoints_ignored_error + c.setpoints_staged
            > before,
            "the setpoint to arrive",
        )

    async def execute(self, cmd: int) -> int:
        client = self.node.make_client(uavcan.node.ExecuteCommand_1, NODE)
        client.response_timeout = 5.0
        try:
            result = await client.call(uavcan.node.ExecuteCommand_1.Request(command=cmd))
        finally:
            client.close()
        assert result is not None, "no response to ExecuteCommand"
        return int(result[0].status)


@pytest.fixture()
async def client() -> AsyncIterator[Client]:
    c = Client()
    yield c
    c.node.close()


def servo_env(**extra: str) -> dict[str, str]:
    return {
        "UAVCAN__UDP__IFACE": "127.0.0.1",
        "UAVCAN__NODE__ID": str(NODE),
        "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SETPOINT),
        "UAVCAN__PUB__DYNAMICS__ID": str(DYNAMICS),
        **LIMITS,
        **extra,
    }


@pytest.fixture()
async def servo() -> AsyncIterator[ServoNode]:
    node = ServoNode(None, servo_env(), loop_clock="simulated")
    async with node:
        yield node


async def move_fast(client: Client, axis: Axis, target: float = 100.0, seconds: float = 1.2) -> None:
    """Command a far target and keep it fresh (every 0.2 s of loop time) while the joint speeds up."""
    t = 0.0
    while t < seconds:
        await client.send(axis, target)
        axis.advance(0.2)
        t += 0.2
    s = axis.loop.sample()
    assert s.engaged and abs(s.velocity) > 20.0, s


async def test_setpoint_motion_deadman_stop(servo: ServoNode, client: Client) -> None:
    axis = servo.axis()
    await client.send(axis, 20.0)
    received_at = axis.now()
    axis.advance(0.3)
    s = axis.loop.sample()
    assert axis.status()["servo"]["state"] == "engaged"
    assert s.engaged and 0.0 < s.position < 20.0 and s.velocity > 0.0

    axis.advance(received_at + DEADMAN_S + 0.02 - axis.now())  # No setpoint since: the deadman fires.
    status = axis.status()["servo"]
    assert status["state"] == "expired"
    assert DEADMAN_S < axis.gate.expired_after_s <= DEADMAN_S + 0.011  # Within one supervision period.
    axis.advance(3.0)
    s = axis.loop.sample()
    assert not s.engaged and abs(s.velocity) <= 0.01
    assert s.stop_planned_s > 0.0 and s.stop_planned_s <= s.stop_took_s <= s.stop_planned_s + 1.0, s


async def test_a_status_read_that_finds_the_deadman_expired_reports_its_reaction_time(
    servo: ServoNode, client: Client
) -> None:
    """``sys.status`` read between two supervision passes, the first to see the deadman expired: the state and the
    deadman's reaction time come from the same instant (a CI run read ``expired`` with ``expired_after_s`` NaN)."""
    axis = servo.axis()
    await client.send(axis, 20.0)
    received_at = axis.now()
    axis.advance(0.1)
    axis.loop.advance(received_at + DEADMAN_S + 0.005 - axis.now())  # The loop's time only: no supervision pass.
    status = axis.status()["servo"]
    assert status["state"] == "expired"
    assert DEADMAN_S < status["expired_after_s"] <= DEADMAN_S + 0.006, status


async def test_supervision_watches_every_period_only_what_needs_watching(servo: ServoNode, client: Client) -> None:
    """An idle axis is supervised every SUPERVISE_IDLE_PERIOD_S, an engaged or stopping one every SUPERVISE_PERIOD_S
    (the node's supervision task wakes for the earliest axis)."""
    axis = servo.axis()
    sup = axis._supervision

    async def next_pass_after(now: float) -> float:
        sup._next_supervise = now  # Due now: this call supervises and schedules the next pass.
        await axis.supervise_due(now)
        return sup._next_supervise - now

    assert not sup.watching(axis.loop.sample())
    assert await next_pass_after(1e6) == pytest.approx(SUPERVISE_IDLE_PERIOD_S)
    await client.send(axis, 20.0)
    axis.advance(0.3)
    assert sup.watching(axis.loop.sample())
    assert await next_pass_after(2e6) == pytest.approx(SUPERVISE_PERIOD_S)
    axis.advance(DEADMAN_S)  # No setpoint since: expired, the loop stops the joint.
    s = axis.loop.sample()
    assert axis.status()["servo"]["state"] == "expired" and s.engaged and sup.watching(s)
    axis.advance(3.0)
    s = axis.loop.sample()
    assert not s.engaged and abs(s.velocity) <= 0.01
    assert not sup.watching(s)
    assert await next_pass_after(3e6) == pytest.approx(SUPERVISE_IDLE_PERIOD_S)


async def test_supervision_watches_an_axis_armed_by_readiness_before_its_setpoint() -> None:
    """With a readiness subject, a fresh ENGAGED readiness alone makes the axis watched: a readiness that drops right
    after a setpoint engaged the loop is seen at the next pass, not an idle period later."""
    async with ServoNode(None, servo_env(UAVCAN__SUB__READINESS__ID="28"), loop_clock="simulated") as node:
        axis = node.axis()
        sup = axis._supervision
        assert axis.gate.gated and not sup.watching(axis.loop.sample())
        axis.gate.on_readiness(3, axis.now())  # ENGAGED
        assert sup.watching(axis.loop.sample())
        axis.advance(DEADMAN_S + 0.05)  # The readiness ages past the deadman: no longer armed.
        assert not sup.watching(axis.loop.sample())


async def test_close_makes_a_safe_stop(client: Client) -> None:
    node = ServoNode(None, servo_env(), loop_clock="simulated")
    await node.start()
    axis = node.axis()
    await move_fast(client, axis)
    moving_at = axis.loop.sample()
    await node.close()
    await node.close()  # Idempotent.
    s = axis.loop.sample()
    assert not s.engaged and abs(s.velocity) <= 0.01, s
    assert s.stop_planned_s > 0.3 and s.stop_planned_s <= s.stop_took_s <= s.stop_planned_s + 1.0, s
    assert s.position > moving_at.position  # It braked along its way, it was not teleported or cut.
    assert axis.status()["servo"]["state"] == "standby"
    with pytest.raises(Exception):  # noqa: B017 — the registry is closed last; any access fails now.
        node.registry["servo.profile.jerk"]


@pytest.mark.parametrize("phase", ["moving", "stopping"])
async def test_restart_never_aborts_a_stop(servo: ServoNode, client: Client, phase: str) -> None:
    axis = servo.axis()
    await move_fast(client, axis)
    if phase == "stopping":
        axis.advance(DEADMAN_S + 0.1)  # Expired: the loop's own stop is under way.
        assert axis.status()["servo"]["state"] == "expired" and axis.loop.sample().engaged
    status = await client.execute(uavcan.node.ExecuteCommand_1.Request.COMMAND_RESTART)
    assert status == uavcan.node.ExecuteCommand_1.Response.STATUS_SUCCESS
    await until(lambda: servo.restarts == 1 and servo.ready.is_set(), "the node to come back")
    s = axis.loop.sample()  # The old axis's loop, as it was left.
    assert not s.engaged and abs(s.velocity) <= 0.01, s
    assert s.stop_planned_s > 0.3 and s.stop_planned_s <= s.stop_took_s <= s.stop_planned_s + 1.0, s
    assert servo.axis() is not axis and servo.axis().counters is axis.counters


async def test_transfer_ids_continue_after_restart(servo: ServoNode, client: Client) -> None:
    seen: list[int] = []

    async def on_dynamics(_msg: Any, meta: pycyphal.transport.TransferFrom) -> None:
        seen.append(meta.transfer_id)

    sub = client.node.make_subscriber(zubax.physics.dynamics.DoF3rdTs_1_0, DYNAMICS)
    sub.receive_in_background(on_dynamics)
    await until(lambda: len(seen) >= 5, "dynamics before RESTART")
    assert await client.execute(uavcan.node.ExecuteCommand_1.Request.COMMAND_RESTART) == 0
    await until(lambda: servo.restarts == 1 and servo.ready.is_set(), "the node to come back")
    n_before = len(seen)
    await until(lambda: len(seen) >= n_before + 5, "dynamics after RESTART")
    assert all(b > a for a, b in itertools.pairwise(seen)), seen  # Never back to 0.
    sub.close()


async def test_a_full_collection_no_longer_scans_the_start_up_objects(client: Client) -> None:
    """A running node's start-up objects (modules, kernels, the node: about 170,000) made each full collection of the
    cyclic garbage collector hold the GIL for about 100 ms, setpoints unread meanwhile. Once up, the node freezes
    them (and again after a RESTART, whose old node is collected first, not frozen for good): a collection scans only
    what came since."""
    gc.unfreeze()
    node = ServoNode(None, servo_env(), loop_clock="simulated")
    async with node:
        frozen = gc.get_freeze_count()
        assert frozen > 50_000 and len(gc.get_objects()) < frozen / 10, (frozen, len(gc.get_objects()))
        old = weakref.ref(node.axis())
        assert await client.execute(uavcan.node.ExecuteCommand_1.Request.COMMAND_RESTART) == 0
        await until(lambda: node.restarts == 1 and node.ready.is_set(), "the node to come back")
        assert gc.get_freeze_count() > 50_000 and len(gc.get_objects()) < gc.get_freeze_count() / 10
        assert old() is None, "the old node's axis outlived the RESTART"


async def test_drive_loss_is_one_edge_and_recovers(client: Client) -> None:
    """…and ``dynamics`` carry measurements only: none while the drive has never reported (the loop's zeros are not
    a position), the drive's own position once it does."""
    records: list[str] = []
    positions: list[float] = []

    async def on_record(msg: uavcan.diagnostic.Record_1_1, _meta: pycyphal.transport.TransferFrom) -> None:
        records.append(msg.text.tobytes().decode())

    async def on_dynamics(msg: zubax.physics.dynamics.DoF3rdTs_1_0, meta: pycyphal.transport.TransferFrom) -> None:
        if meta.source_node_id == NODE:
            positions.append(float(msg.value.kinematics.base.position))

    diag = client.node.make_subscriber(uavcan.diagnostic.Record_1_1)
    diag.receive_in_background(on_record)
    dyn = client.node.make_subscriber(zubax.physics.dynamics.DoF3rdTs_1_0, DYNAMICS)
    dyn.receive_in_background(on_dynamics)
    node = ServoNode(None, servo_env(SERVO__DRIVE__BACKEND="udral", **DRIVE_PORTS), loop_clock="simulated")
    async with node:
        axis = node.axis()
        axis.advance(0.6)  # No drive on the bus: silent longer than servo.drive.feedback_timeout.
        assert axis.status()["servo"]["state"] == "error"
        for _ in range(25):  # Setpoints keep coming while the drive stays silent.
            await client.send(axis, 5.0)
            axis.advance(0.1)
            assert axis.status()["servo"]["state"] == "error"
        assert axis.counters.setpoints_ignored_error == 25 and axis.counters.setpoints_accepted == 0
        await until(lambda: any("servo error" in r for r in records), "the error's diagnostic")
        await asyncio.sleep(0.3)  # Any more diagnostics out (and 15 periods of dynamics, were there any).
        assert sum("servo error" in r for r in records) == 1, records
        assert positions == [], positions
        assert axis.motion()["measured"] is False and axis.motion()["meas"][0] == 0.0  # Zeros, and said so.

        # The drive reports again: the loop sees its feedback, and the axis leaves the error by itself.
        drive = client.node.make_publisher(rot.PlanarTs_0_1, 42)
        await drive.publish(make_dynamics_ts(True, 0, 1.25, 0.0, 0.0, 0.0))
        await until(lambda: axis.loop.drive.arrays.rx[RX_COUNT] > 0.0, "the drive feedback to arrive")
        axis.advance(0.02)
        await until(lambda: positions, "dynamics once the drive has reported")
        assert positions[-1] == pytest.approx(1.25), positions
        assert "measured" not in axis.motion() and axis.motion()["meas"][0] == 1.25
        status = axis.status()["servo"]
        assert status["state"] == "standby" and "drive reports again" in status["reason"], status
        await client.send(axis, 5.0)
        assert axis.status()["servo"]["state"] == "engaged"
        await until(lambda: any("restored" in r for r in records), "the restoration's diagnostic")
        await asyncio.sleep(0.3)  # Any more out.
        assert sum("restored" in r for r in records) == 1, records
    diag.close()
    dyn.close()


async def test_a_stale_duplicate_never_revives_a_silent_drive(client: Client) -> None:
    """A measurement no newer than the last one taken (a late duplicate) is dropped and counted.

    Real loop clock: a bus drive's freshness is judged by reception time, which the simulated clock cannot see.
    """
    node = ServoNode(None, servo_env(SERVO__DRIVE__BACKEND="udral", **DRIVE_PORTS))
    async with node:
        axis = node.axis()
        drive = client.node.make_publisher(rot.PlanarTs_0_1, 42)
        await until(lambda: axis.status()["servo"]["state"] == "error", "no drive since the start: lost")
        await drive.publish(make_dynamics_ts(True, 5_000_000, 0.0, 0.0, 0.0, 0.0))
        await until(lambda: axis.status()["servo"]["state"] == "standby", "the drive to report")
        # Then silent longer than servo.drive.feedback_timeout: the drive is lost again.
        await until(lambda: axis.status()["servo"]["state"] == "error", "the drive to be lost")
        await drive.publish(make_dynamics_ts(True, 5_000_000, 0.0, 0.0, 0.0, 0.0))  # The same sample again.
        await until(lambda: axis.loop.drive.stale_measurements == 1, "the duplicate to be dropped")
        await asyncio.sleep(0.1)
        assert axis.loop.drive.arrays.rx[RX_COUNT] == 1.0 and axis.status()["servo"]["state"] == "error"
        await drive.publish(make_dynamics_ts(True, 5_600_000, 0.0, 0.0, 0.0, 0.0))  # A new one: alive again.
        await until(lambda: axis.status()["servo"]["state"] == "standby", "the drive to be back")
        assert axis.loop.drive.arrays.rx[RX_COUNT] == 2.0


TWO_AXES = {
    "UAVCAN__UDP__IFACE": "127.0.0.1",
    "UAVCAN__NODE__ID": str(NODE),
    "SERVO__AXES": "left right",
    "UAVCAN__SUB__LEFT__SETPOINT_SERVO__ID": "27",
    "UAVCAN__SUB__RIGHT__SETPOINT_SERVO__ID": "28",
}
"""A node with the axes "left" and "right", their setpoints on subjects 27 and 28."""


async def test_two_axes_move_independently(client: Client) -> None:
    env = {
        **TWO_AXES,
        "LEFT__SERVO__PROFILE__JERK": "100",
        "RIGHT__SERVO__PROFILE__JERK": "1000",
        "LEFT__SERVO__DEADMAN_TIMEOUT": "10",
        "RIGHT__SERVO__DEADMAN_TIMEOUT": "10",
    }
    async with ServoNode(None, env, loop_clock="simulated") as node:
        left, right = node.axis("left"), node.axis("right")
        assert [a.names.axis for a in node.axes] == ["left", "right"]
        await client.send(left, 1.0, subject=27)
        await client.send(right, -2.0, subject=28)
        for _ in range(50):
            left.advance(0.1)
            right.advance(0.1)
        sl, sr = left.loop.sample(), right.loop.sample()
        assert abs(sl.position - 1.0) < 1e-3 and abs(sr.position + 2.0) < 1e-3, (sl, sr)
        assert left.status()["servo"]["j_lim"] == 100.0 and right.status()["servo"]["j_lim"] == 1000.0
        assert math.isfinite(sl.settled_after_s) and math.isfinite(sr.settled_after_s)
        # Jerk 100 vs 1000 with otherwise equal limits: the left axis took longer for half the distance.
        assert sl.plan_duration > sr.plan_duration
        reg = node.registry
        assert int(reg["uavcan.sub.left.setpoint_servo.id"].ints[0]) == 27
        assert '"state":"engaged"' in reg["left.sys.status"].value.string.value.tobytes().decode()
        assert "servo.profile.jerk" in set(reg)  # The unprefixed registers stay; a multi-axis node ignores them.
        with pytest.raises(ValueError):  # Prefixed registers are validated like the plain ones.
            reg["left.servo.profile.jerk"] = -5.0
        assert reg["left.servo.profile.jerk"].floats[0] == 100.0


async def test_two_axes_share_one_control_thread(client: Client) -> None:
    """Real clock: one thread ticks both axes; they move to their targets; a RESTART builds a new thread."""
    env = {
        **TWO_AXES,
        "LEFT__SERVO__DEADMAN_TIMEOUT": "10",
        "RIGHT__SERVO__DEADMAN_TIMEOUT": "10",
        "RIGHT__SERVO__LOOP_RATE": "500",
    }
    async with ServoNode(None, env) as node:
        left, right = node.axis("left"), node.axis("right")
        assert (left.config.rate_hz, right.config.rate_hz) == (1000.0, 500.0)  # Each ticks at its own rate.
        thread = node.control_thread
        assert thread is not None and thread.loops == (left.loop, right.loop)
        await client.send(left, 0.25, subject=27)
        await client.send(right, -0.5, subject=28)
        await until(
            lambda: all(math.isfinite(a.loop.sample().settled_after_s) for a in (left, right)), "both to arrive"
        )
        assert abs(left.loop.sample().position - 0.25) < 1e-3 and abs(right.loop.sample().position + 0.5) < 1e-3
        assert await client.execute(uavcan.node.ExecuteCommand_1.Request.COMMAND_RESTART) == 0
        await until(lambda: node.ready.is_set() and node.control_thread not in (None, thread), "the restart")
        assert not thread.running
        new = node.control_thread
        assert new is not None and new.loops == (node.axis("left").loop, node.axis("right").loop)
    assert not new.running
