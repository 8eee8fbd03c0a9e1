"""Cyphal synchronized time between real pycyphal nodes (UDP on 127.0.0.1, run inside a network namespace).

The slave's own clock is deliberately off by a known amount, so its estimated offset is checked against a known
value (early by the one-way latency, a few milliseconds here). The period and the master timeout are shortened
(module constants) to keep the test short; the logic is the one a node runs.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pycyphal.application
import pytest

from cyphal_common import timesync
from cyphal_common.timesync import TimeSync
from tests.lost_cancellation import LostCancellation

MASTER, LOW_MASTER, SLAVE = 101, 99, 102
SKEW_S = 2.5
"""The slave's clock is this much behind the master's: its offset must come out as +SKEW_S."""
LOW_SKEW_S = -1.0
"""The second master's clock is this much behind the first one's."""
TOLERANCE_S = 0.05
"""The estimate is early by the one-way latency (milliseconds on loopback, more on a loaded host)."""


def make_node(node_id: int) -> pycyphal.application.Node:
    env = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(node_id)}
    reg = pycyphal.application.make_registry(None, env)
    node = pycyphal.application.make_node(pycyphal.application.NodeInfo(name=f"test.timesync{node_id}"), reg)
    node.start()
    return node


async def until(predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture()
async def nodes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[int, pycyphal.application.Node]]:
    monkeypatch.setattr(timesync, "PERIOD_S", 0.1)
    monkeypatch.setattr(timesync, "TIMEOUT_S", 0.3)
    made = {n: make_node(n) for n in (MASTER, LOW_MASTER, SLAVE)}
    yield made
    for node in made.values():
        node.close()


def started(node: pycyphal.application.Node, mode: str, clock: Callable[[], float]) -> TimeSync:
    sync = TimeSync(node, mode, clock)
    node.add_lifetime_hooks(sync.start, sync.close)
    return sync


async def test_slave_adopts_the_lowest_node_id_master(nodes: dict[int, pycyphal.application.Node]) -> None:
    slave = started(nodes[SLAVE], "slave", lambda: time.time() - SKEW_S)
    assert slave.offset_s == 0.0 and slave.master_node_id is None  # No master heard: the own clock.
    master = started(nodes[MASTER], "master", time.time)
    await until(lambda: slave.master_node_id == MASTER and abs(slave.offset_s - SKEW_S) < TOLERANCE_S,
                "the slave to adopt the master's time")
    await asyncio.sleep(0.5)  # A few more samples: the median stays.
    assert abs(slave.offset_s - SKEW_S) < TOLERANCE_S, slave.report()
    assert abs(slave.now_s() - master.now_s()) < TOLERANCE_S
    assert master.offset_s == 0.0 and master.report()["master"] is None
    # A master with a lower node-ID takes over (the Specification's rule); its clock is 1 s behind.
    low = started(nodes[LOW_MASTER], "master", lambda: time.time() + LOW_SKEW_S)
    await until(lambda: slave.master_node_id == LOW_MASTER and abs(slave.offset_s - SKEW_S - LOW_SKEW_S) < TOLERANCE_S,
                "the slave to follow the lower node-ID")
    await asyncio.sleep(0.5)  # The higher master goes on publishing: ignored while the lower one is alive.
    assert slave.master_node_id == LOW_MASTER and abs(slave.offset_s - SKEW_S - LOW_SKEW_S) < TOLERANCE_S
    # The lower master goes silent: after the timeout the remaining master is adopted again.
    low.close()
    await until(lambda: slave.master_node_id == MASTER and abs(slave.offset_s - SKEW_S) < TOLERANCE_S,
                "the slave to return to the remaining master")
    # No master at all: back to the own clock.
    master.close()
    await until(lambda: slave.offset_s == 0.0 and slave.master_node_id is None, "the own clock without a master")
    assert slave.report() == {"mode": "slave", "master": None, "offset_ms": 0.0}


async def test_modes(nodes: dict[int, pycyphal.application.Node]) -> None:
    """``off`` and ``master`` keep their own clock while another master publishes; one instance per node."""
    with pytest.raises(ValueError):
        TimeSync(nodes[SLAVE], "primary")
    started(nodes[LOW_MASTER], "master", lambda: time.time() + 10.0)
    off = TimeSync.of(nodes[SLAVE], "off")
    assert TimeSync.of(nodes[SLAVE], "master") is off  # One instance per node, tied to its lifetime.
    master = TimeSync.of(nodes[MASTER], "master")
    await asyncio.sleep(0.5)
    assert off.offset_s == 0.0 and off.master_node_id is None and abs(off.now_s() - time.time()) < 0.01
    assert master.offset_s == 0.0 and master.master_node_id is None


async def test_a_pinned_slave_ignores_other_masters_and_reports_a_step_of_its_own_once(
    nodes: dict[int, pycyphal.application.Node],
) -> None:
    """Issue 26: the lower node-ID would win by the Cyphal rule; pinned, the slave keeps its master, reports the
    other one once, and a step of its master's clock once (counted), while the median follows the step."""
    slave = TimeSync(nodes[SLAVE], "slave", lambda: time.time() - SKEW_S, pinned=MASTER)
    nodes[SLAVE].add_lifetime_hooks(slave.start, slave.close)
    shift = [0.0]
    started(nodes[MASTER], "master", lambda: time.time() + shift[0])
    started(nodes[LOW_MASTER], "master", lambda: time.time() + LOW_SKEW_S)
    await until(lambda: slave.master_node_id == MASTER and abs(slave.offset_s - SKEW_S) < TOLERANCE_S, "adopted")
    await asyncio.sleep(0.5)
    assert slave.master_node_id == MASTER and slave.master_changes == 0 and slave.foreign_masters > 0
    assert slave.take_notes() == [f"time sync: master {LOW_MASTER} ignored (pinned master: {MASTER})"]
    shift[0] = 0.45
    await until(lambda: abs(slave.offset_s - SKEW_S - 0.45) < TOLERANCE_S, "the median to follow the step")
    await asyncio.sleep(0.5)
    notes = slave.take_notes()
    step = re.search(r"stepped by ([+-][\d.]+) s", notes[0]) if len(notes) == 1 else None
    assert slave.clock_steps == 1 and step is not None and abs(float(step[1]) - 0.45) < 0.02, notes  # Measured.


async def test_a_closed_master_stops_publishing_even_when_its_cancellation_is_lost(
    nodes: dict[int, pycyphal.application.Node],
) -> None:
    """On Python 3.11 ``asyncio.wait_for`` inside the transport's send swallows a cancellation that meets the send's
    completion; under load a closed master then went on publishing for good (a slave never returned to the remaining
    master). The send here swallows every cancellation: the master must still stop within a period or two."""
    master = started(nodes[MASTER], "master", time.time)
    assert master._session is not None
    send = LostCancellation(master._session.send)
    master._session.send = send  # type: ignore[method-assign]
    task = master._task
    assert task is not None
    await send.close_mid_send(master.close)
    await asyncio.sleep(0.5)  # Five periods.
    assert task.done() and send.sent_since(0.4) == 0, len(send.sent)
