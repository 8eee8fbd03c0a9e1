"""Coordinated start (``motion_start``): a new setpoint waits for a start message, and its plan starts at the
instant the message names, on the simulated loop clock and over a real UDP transport (see ``test_shell``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import uavcan.time

from servo_node.node import ServoNode
from servo_node.setpoint import ProfileLimits, Setpoint
from servo_node.start import MAX_LEAD_S, Staging
from tests.node.test_shell import DEADMAN_S, Client, servo_env, until

START = 28


def _sp(target: float) -> Setpoint:
    return Setpoint(target, 0.0, ProfileLimits(-1.0, 1.0, -2.0, 2.0, 10.0), 1.0)


def test_staging_releases_only_a_fresh_setpoint_within_the_lead() -> None:
    s = Staging(DEADMAN_S)
    assert s.start(0.99, 1.0) == "no staged setpoint"
    assert s.offer(_sp(1.0), 1.0, active=None) is None  # Different from the active one: staged.
    assert "ahead" in str(s.start(1.0 + MAX_LEAD_S + 0.1, 1.0))
    assert "in the past" in str(s.start(1.0 - DEADMAN_S - 0.1, 1.0))
    started = s.start(1.05, 1.01)
    assert not isinstance(started, str) and started.at_s == 1.05 and started.received_at_s == 1.0
    assert s.offer(_sp(1.0), 1.02, active=_sp(1.0)) == 1.05  # A repeat before the start is dated at the start.
    assert s.offer(_sp(1.0), 1.10, active=_sp(1.0)) == 1.10
    assert s.offer(_sp(2.0), 2.0, active=_sp(1.0)) is None
    assert s.start(2.0 + DEADMAN_S + 0.01, 2.0 + DEADMAN_S + 0.01) is None  # Too old: dropped; the start waits.
    assert s.lapsed(2.0 + 2 * DEADMAN_S) is None
    assert s.lapsed(2.0 + 2 * DEADMAN_S + 0.02) == "no setpoint received by the start's instant"
    assert s.offer(_sp(2.0), 3.0, active=_sp(1.0)) is None  # The lapsed start releases nothing.


def test_a_start_that_overtook_its_setpoint_waits_for_it() -> None:
    """Setpoint and start travel on different subjects, handled by different tasks: their order is not kept."""
    s = Staging(DEADMAN_S)
    assert s.start(1.05, 1.001) is None
    started = s.offer(_sp(1.0), 1.0, active=None)  # Received before the start's instant: the start's setpoint.
    assert started is not None and not isinstance(started, float)
    assert started.setpoint == _sp(1.0) and started.at_s == 1.05 and started.received_at_s == 1.0
    assert s.offer(_sp(2.0), 1.01, active=_sp(1.0)) is None  # The start was used: the next one is staged.
    late = Staging(DEADMAN_S)
    assert late.start(1.2, 1.1) is None and late.offer(_sp(3.0), 1.21, active=None) is None  # Received too late.


@pytest.fixture()
async def client() -> AsyncIterator[Client]:
    c = Client()
    yield c
    c.node.close()


@pytest.fixture()
async def servo() -> AsyncIterator[ServoNode]:
    async with ServoNode(None, servo_env(UAVCAN__SUB__MOTION_START__ID=str(START)), loop_clock="simulated") as node:
        yield node


async def test_a_staged_setpoint_moves_nothing_until_its_start_then_plans_from_that_instant(
    servo: ServoNode, client: Client
) -> None:
    axis = servo.axis()
    await client.send(axis, 5.0)
    assert axis.counters.setpoints_staged == 1 and axis.counters.setpoints_accepted == 0
    axis.advance(0.2)
    s = axis.loop.sample()
    assert not s.engaged and s.position == 0.0 and s.velocity == 0.0
    assert axis.status()["servo"]["state"] == "standby"

    await client.send(axis, 5.0)  # The deadman feed of the staged setpoint: still staged.
    at = axis.now() + 0.0537  # Between ticks on purpose: the plan starts at this instant, not at a tick.
    assert axis.start_staged(at, axis.now())
    axis.advance(0.05)
    s = axis.loop.sample()
    assert not s.engaged and s.position == 0.0, "it started before its instant"
    axis.advance(0.01)
    s = axis.loop.sample()
    assert s.engaged and s.plan_start_s == pytest.approx(at, abs=1e-12)
    await client.send(axis, 5.0)  # A repeat keeps it alive and changes nothing.
    axis.advance(0.1)
    assert axis.loop.sample().plan_start_s == pytest.approx(at, abs=1e-12)
    assert axis.counters.starts == 1 and axis.counters.setpoints_accepted == 2


async def test_after_an_expiry_even_the_same_setpoint_waits_for_a_start(servo: ServoNode, client: Client) -> None:
    axis = servo.axis()
    await client.send(axis, 5.0)
    assert axis.start_staged(axis.now(), axis.now())
    axis.advance(1.0)
    assert axis.loop.sample().position == pytest.approx(5.0, abs=1e-3)
    axis.advance(DEADMAN_S + 0.5)  # No setpoint since: expired, stopped (it was at rest already).
    assert axis.status()["servo"]["state"] == "expired" and not axis.loop.sample().engaged
    await client.send(axis, 5.0)
    axis.advance(0.2)
    assert axis.counters.setpoints_staged == 2 and not axis.loop.sample().engaged
    assert axis.counters.starts == 1 and axis.counters.setpoints_accepted == 1


async def test_refused_starts_are_counted_and_nothing_moves(servo: ServoNode, client: Client) -> None:
    axis = servo.axis()
    assert not axis.start_staged(axis.now() - 0.01, axis.now())  # Nothing staged (and its instant has passed).
    await client.send(axis, 5.0)
    assert not axis.start_staged(axis.now() + MAX_LEAD_S + 1.0, axis.now())  # A start too far ahead.
    axis.advance(DEADMAN_S + 0.05)
    assert not axis.start_staged(axis.now() - 0.01, axis.now())  # The staged setpoint got too old.
    assert axis.start_staged(axis.now() + 0.1, axis.now()) is False  # Waits for a setpoint that never comes...
    axis.advance(0.5)
    assert axis.counters.starts_refused == 3
    axis.advance(0.2)  # ...and lapses a deadman after its instant.
    s = axis.loop.sample()
    assert not s.engaged and s.position == 0.0
    assert axis.counters.starts_refused == 4 and axis.counters.starts == 0
    counters = axis.counts()
    assert counters["starts_refused"] == 4 and counters["staged"] == 1


async def test_without_a_start_the_active_command_expires_and_stops(client: Client) -> None:
    """A staged setpoint refreshes neither the gate nor the loop: if no start follows, the deadman stops the joint."""
    env = servo_env(UAVCAN__SUB__MOTION_START__ID=str(START))
    async with ServoNode(None, env, loop_clock="simulated") as node:
        axis = node.axis()
        await client.send(axis, 5.0)
        assert axis.start_staged(axis.now(), axis.now())
        axis.advance(0.3)
        assert axis.loop.sample().velocity > 0.0
        for _ in range(5):  # A new target, repeated, with no start: the moving joint must stop on the deadman.
            await client.send(axis, -5.0)
            axis.advance(0.2)
        assert axis.status()["servo"]["state"] == "expired"
        axis.advance(3.0)
        s = axis.loop.sample()
        assert not s.engaged and abs(s.velocity) <= 0.01 and s.position > 0.0


async def test_a_start_over_the_bus_maps_synchronized_time_onto_the_loop(servo: ServoNode, client: Client) -> None:
    axis = servo.axis()
    await client.send(axis, 5.0)
    pub = client.node.make_publisher(uavcan.time.SynchronizedTimestamp_1_0, START)
    lead = 0.2
    await pub.publish(uavcan.time.SynchronizedTimestamp_1_0(microsecond=int((time.time() + lead) * 1e6)))
    before = axis.now()
    await until(lambda: axis.counters.starts == 1, "the start to arrive")
    axis.advance(0.5)
    s = axis.loop.sample()
    assert s.engaged and before + lead - 0.05 <= s.plan_start_s <= before + lead  # Simulated time stood still.
    pub.close()


