"""Coordinated start (``motion_start``): a new setpoint waits for a start message, and its plan starts at the
instant the message names, on the simulated loop clock and over a real UDP transport (see ``test_shell``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import uavcan.time

from servo_node.node import ServoNode
from servo_node.setpoint import ProfileLimits, Setpoint
from servo_node.staging import MAX_LEAD_S, MAX_PENDING, REORDER_S, Staging, Start
from tests.node.test_shell import DEADMAN_S, Client, servo_env, until

START = 28


def _sp(target: float) -> Setpoint:
    return Setpoint(target, 0.0, ProfileLimits(-1.0, 1.0, -2.0, 2.0, 10.0), 1.0)


COORD, STRANGER = 40, 41
"""Node-IDs of the coordinator (publishes the setpoints and the start) and of a stranger (only starts)."""


def test_staging_releases_only_a_fresh_setpoint_within_the_lead() -> None:
    s = Staging(DEADMAN_S)
    assert s.start(0.99, 1.0, COORD) is None  # Nothing staged, its instant past: waits for its setpoint...
    assert s.lapsed(0.99 + DEADMAN_S + 0.01) == f"no setpoint from node {COORD} received before its start"
    assert s.offer(_sp(1.0), 1.0, None, COORD) is None  # ...which never came. This one differs from the active: staged.
    assert "ahead" in str(s.start(1.0 + MAX_LEAD_S + 0.1, 1.0, COORD))
    assert "in the past" in str(s.start(1.0 - DEADMAN_S - 0.1, 1.0, COORD))
    started = s.start(1.05, 1.01, COORD)
    assert not isinstance(started, str) and started.at_s == 1.05 and started.received_at_s == 1.0
    assert s.offer(_sp(1.0), 1.02, _sp(1.0), COORD) == 1.05  # A repeat before the start is dated at the start.
    assert s.offer(_sp(1.0), 1.10, _sp(1.0), COORD) == 1.10
    assert s.offer(_sp(2.0), 2.0, _sp(1.0), COORD) is None
    assert s.start(2.0 + DEADMAN_S + 0.01, 2.0 + DEADMAN_S + 0.01, COORD) is None  # Too old: dropped; waits.
    assert s.lapsed(2.0 + 2 * DEADMAN_S) is None
    assert s.lapsed(2.0 + 2 * DEADMAN_S + 0.02) == f"no setpoint from node {COORD} received before its start"
    assert s.offer(_sp(2.0), 3.0, _sp(1.0), COORD) is None  # The lapsed start releases nothing.


def test_a_repeat_of_the_start_just_obeyed_is_ignored() -> None:
    """A coordinator sends its first start twice (``servo_node.coord``): the copy releases nothing, waits for
    nothing (so nothing lapses into a refusal), and is not refused when it arrives after its instant."""
    s = Staging(DEADMAN_S)
    assert s.offer(_sp(1.0), 1.0, None, COORD) is None
    started = s.start(1.05, 1.01, COORD)
    assert started is not None and not isinstance(started, str) and started.at_s == 1.05
    assert s.start(1.05, 1.011, COORD) is None
    assert s.start(1.05, 1.06, COORD) is None  # After its instant: not refused, not waiting.
    assert s.lapsed(1.05 + 2 * DEADMAN_S) is None
    assert s.offer(_sp(2.0), 2.0, _sp(1.0), COORD) is None  # The next setpoint is staged, as before.
    released = s.start(2.05, 2.01, COORD)
    assert released is not None and not isinstance(released, str) and released.setpoint == _sp(2.0)


def test_a_held_axis_takes_its_start_quietly_and_a_repeat_starts_only_its_own_setpoint() -> None:
    """A coordinated move holds some axes at their target: their setpoint is the active one again, and the start
    then has nothing to start (no refusal lapses). A repeat of a start already obeyed starts nothing staged since
    (a stale repetition staged after it stays staged), while a repeat does start a setpoint whose first copy was
    lost (staged from a later repetition): late, not never."""
    s = Staging(DEADMAN_S)
    assert s.start(1.05, 1.0, COORD) is None  # Handled before the (unchanged) setpoint: waits for it.
    assert s.offer(_sp(1.0), 0.999, _sp(1.0), COORD) == 0.999  # The active one again: it only keeps it alive.
    assert s.lapsed(1.05 + 2 * DEADMAN_S) is None  # Not "no setpoint ... received before its start".
    assert s.offer(_sp(2.0), 2.0, _sp(1.0), COORD) is None
    started = s.start(2.05, 2.001, COORD)
    assert started is not None and not isinstance(started, str) and started.setpoint == _sp(2.0)
    assert s.offer(_sp(1.0), 2.1, _sp(2.0), COORD) is None  # A stale repetition of the old target: staged...
    assert s.start(2.05, 2.101, COORD) is None and s.staged == _sp(1.0)  # ...and the repeated start leaves it.
    lost = Staging(DEADMAN_S)  # The setpoint's first copy lost: the start waits, a repetition comes too late.
    assert lost.start(3.05, 3.001, COORD) is None and lost.offer(_sp(3.0), 3.1, None, COORD) is None
    again = lost.start(3.05, 3.101, COORD)
    assert again is not None and not isinstance(again, str) and again.setpoint == _sp(3.0) and again.at_s == 3.05


def test_a_start_that_overtook_its_setpoint_waits_for_it() -> None:
    """Setpoint and start travel on different subjects, handled by different tasks: their order is not kept."""
    s = Staging(DEADMAN_S)
    assert s.start(1.05, 1.001, COORD) is None
    started = s.offer(_sp(1.0), 1.0, None, COORD)  # Received before the start: the start's setpoint.
    assert started is not None and not isinstance(started, float)
    assert started.setpoint == _sp(1.0) and started.at_s == 1.05 and started.received_at_s == 1.0
    assert s.offer(_sp(2.0), 1.01, _sp(1.0), COORD) is None  # The start was used: the next one is staged.
    # Stamped a little after its start (receiving threads race; within REORDER_S): still the start's setpoint.
    raced = Staging(DEADMAN_S)
    assert raced.start(1.2, 1.1, COORD) is None
    released = raced.offer(_sp(3.0), 1.1 + 0.8 * REORDER_S, None, COORD)
    assert released is not None and not isinstance(released, float) and released.at_s == 1.2
    late = Staging(DEADMAN_S)  # Sent later than that: staged, not started.
    assert late.start(1.2, 1.1, COORD) is None and late.offer(_sp(3.0), 1.1 + 2 * REORDER_S, None, COORD) is None
    # A busy node's event loop reads (stamps) both late, past the instant, and handles the start first: it waits for
    # its setpoint all the same, and the plan starts at the (past) instant, which the loop clamps to its last tick.
    busy = Staging(DEADMAN_S)
    assert busy.start(1.2, 1.3, COORD) is None
    behind = busy.offer(_sp(4.0), 1.299, None, COORD)
    assert behind is not None and not isinstance(behind, float) and behind.at_s == 1.2


def test_a_start_is_obeyed_only_from_the_setpoints_publisher_and_only_after_it() -> None:
    """Finding 4 of issue 26: a stranger's start, an anonymous one, or one sent before the setpoint (even dated
    after it) releases nothing; the coordinator's own start still does."""
    s = Staging(DEADMAN_S)
    assert s.start(1.8, 1.0, COORD) is None  # Sent before any setpoint, dated 0.8 s ahead: waits...
    assert s.offer(_sp(1.0), 1.1, None, COORD) is None  # ...but this setpoint came after it: staged, not started.
    assert s.start(1.2, 1.15, STRANGER) == f"start from node {STRANGER}: the staged setpoint is node {COORD}'s"
    assert s.start(1.2, 1.15, None) == "start from an anonymous node"
    # Handled after it, but received before it (by more than the receiving threads' race, REORDER_S):
    assert s.start(1.2, 1.1 - 2 * REORDER_S, COORD) == "start received before its setpoint"
    started = s.start(1.25, 1.2, COORD)
    assert not isinstance(started, str) and started is not None and started.setpoint == _sp(1.0)
    assert s.start(1.4, 1.3, STRANGER) is None and s.offer(_sp(2.0), 1.29, _sp(1.0), COORD) is None  # Not his.


def test_a_strangers_waiting_start_does_not_displace_the_coordinators() -> None:
    """Both starts overtook their setpoints: the coordinator's setpoint still finds its own start (not delayed to a
    repetition), and the stranger's, whose setpoint never comes, lapses with its own reason. A flood of senders
    keeps at most MAX_PENDING waiting, the oldest dropped."""
    s = Staging(DEADMAN_S)
    assert s.start(1.05, 1.001, COORD) is None and s.start(1.06, 1.002, STRANGER) is None
    started = s.offer(_sp(1.0), 1.0, None, COORD)
    assert isinstance(started, Start) and started.at_s == 1.05 and started.setpoint == _sp(1.0)
    assert s.lapsed(1.05 + DEADMAN_S + 0.005) is None
    assert s.lapsed(1.06 + DEADMAN_S + 0.01) == f"no setpoint from node {STRANGER} received before its start"
    assert s.lapsed(1.06 + DEADMAN_S + 0.02) is None
    flood = Staging(DEADMAN_S)
    for k, node in enumerate([COORD, *range(100, 100 + MAX_PENDING)]):
        assert flood.start(2.0 + k * 1e-3, 2.0, node) is None
    assert flood.offer(_sp(2.0), 1.999, None, COORD) is None  # Its start was the oldest of MAX_PENDING + 1.
    late = [flood.lapsed(2.1 + DEADMAN_S) for _ in range(MAX_PENDING + 1)]
    assert late[:-1] == [f"no setpoint from node {n} received before its start" for n in range(100, 100 + MAX_PENDING)]
    assert late[-1] is None


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
    assert axis.start_staged(at, axis.now(), client.node.id)
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


async def test_a_started_setpoint_waiting_for_its_instant_keeps_the_running_one_alive(
    servo: ServoNode, client: Client
) -> None:
    """A path's next segment: its setpoint staged and started ahead (0.9 s, more than the deadman) while the current
    move runs. The node obeys the start at once; the current setpoint's repetitions are staged from then on (no
    longer the active one), so only the next one's repetitions say the publisher is there: they keep the running
    move alive until the instant (before: it expired 0.5 s after the start). Without them it still expires."""
    axis = servo.axis()
    src = client.node.id
    await client.send(axis, 50.0)  # A long move.
    assert axis.start_staged(axis.now(), axis.now(), src)
    axis.advance(0.3)
    await client.send(axis, 50.0)
    await client.send(axis, -50.0)  # The next segment: staged...
    at = axis.now() + 0.9
    assert axis.start_staged(at, axis.now(), src)  # ...and started, ahead of its instant.
    first = axis.loop.sample().plan_start_s
    for _ in range(8):  # What the path runner repeats: the current segment's setpoint, then the next one's.
        axis.advance(0.1)
        await client.send(axis, 50.0)
        await client.send(axis, -50.0)
        s = axis.loop.sample()
        assert s.engaged and not s.expired and s.plan_start_s == first, "the running move expired"
    axis.advance(0.15)
    s = axis.loop.sample()
    assert s.engaged and not s.expired and s.plan_start_s == pytest.approx(at, abs=1e-12)  # The next one took over.
    await client.send(axis, 50.0)  # Its stale repetition: staged, it starts nothing.
    await client.send(axis, 10.0)
    assert axis.start_staged(axis.now() + 0.9, axis.now(), src)  # Started ahead again, but nothing comes after.
    axis.advance(0.7)
    assert axis.loop.sample().expired  # The deadman holds: silence expires the running move as before.


async def test_after_an_expiry_even_the_same_setpoint_waits_for_a_start(servo: ServoNode, client: Client) -> None:
    axis = servo.axis()
    await client.send(axis, 5.0)
    assert axis.start_staged(axis.now(), axis.now(), client.node.id)
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
    src = client.node.id
    assert not axis.start_staged(axis.now() - 0.01, axis.now(), src)  # Nothing staged: waits for its setpoint...
    axis.advance(DEADMAN_S + 0.05)  # ...which never comes: it lapses, refused.
    assert axis.counters.starts_refused == 1
    await client.send(axis, 5.0)
    assert not axis.start_staged(axis.now() + MAX_LEAD_S + 1.0, axis.now(), client.node.id)  # A start too far ahead.
    axis.advance(DEADMAN_S + 0.05)
    assert not axis.start_staged(axis.now() - 0.01, axis.now(), client.node.id)  # The staged setpoint got too old:
    assert axis.start_staged(axis.now() + 0.1, axis.now(), src) is False  # dropped. Waits for a fresh one...
    axis.advance(0.5)
    assert axis.counters.starts_refused == 2
    axis.advance(0.2)  # ...which never comes: it lapses a deadman after its instant.
    s = axis.loop.sample()
    assert not s.engaged and s.position == 0.0
    assert axis.counters.starts_refused == 3 and axis.counters.starts == 0
    events = axis.events()
    assert events["starts_refused"] == 3 and events["staged"] == 1


async def test_without_a_start_the_active_command_expires_and_stops(client: Client) -> None:
    """A staged setpoint refreshes neither the gate nor the loop: if no start follows, the deadman stops the joint."""
    env = servo_env(UAVCAN__SUB__MOTION_START__ID=str(START))
    async with ServoNode(None, env, loop_clock="simulated") as node:
        axis = node.axis()
        await client.send(axis, 5.0)
        assert axis.start_staged(axis.now(), axis.now(), client.node.id)
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
    before = axis.now()
    named = time.time() + lead
    await pub.publish(uavcan.time.SynchronizedTimestamp_1_0(microsecond=int(named * 1e6)))
    await until(lambda: axis.counters.starts == 1, "the start to arrive")
    taken = time.time()
    axis.advance(0.5)
    s = axis.loop.sample()
    # Simulated time stood still at ``before`` while real time went on: the node maps the named instant onto its loop
    # as "lead ahead of when it was named" less the real time that passed before the node took the start.
    assert s.engaged and before + lead - (taken - (named - lead)) <= s.plan_start_s <= before + lead
    pub.close()


