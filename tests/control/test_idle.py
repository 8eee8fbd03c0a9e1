"""An idle loop (its embedded joint not commanded, nothing pending) is ticked every ``IDLE_PERIOD_NS`` instead of
every period, and a command wakes its thread; a loop with a bus drive or a stepped clock never idles.

The thread's verdicts count ticks and timed wake-ups, with bounds a slow machine cannot cross (it ticks fewer,
never more): which mode the thread is in, not how fast it is.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from servo_node.axis._config import loop_config
from servo_node.control import ControlLoop, ControlThread, LoopConfig
from servo_node.control import _layout as L
from servo_node.control._clock import monotonic_ns, wait_or_wake
from servo_node.control._kernel import idle
from servo_node.control._leader import LeaderInput
from servo_node.control._mimic import Relation
from servo_node.drive import SimDrive
from servo_node.registers import ServoRegistry
from servo_node.setpoint import ProfileLimits, Setpoint
from sim_plant import JointParams
from tests.control.bus_model import make_bus
from tests.control.test_thread import wait_ticks

LIMITS = ProfileLimits(-2.0, 2.0, -20.0, 20.0, 200.0)
IDLE_PERIOD_S = L.IDLE_PERIOD_NS * 1e-9


def _timed(thread: ControlThread) -> int:
    """Wake-ups the thread timed so far (every one but those of an idle thread)."""
    return int(thread.timing[L.TIMING_RING])


def _idle_ticks(loop: ControlLoop, thread: ControlThread, seconds: float) -> None:
    """Over ``seconds`` the loop is ticked at most at the idle period, and no wake-up is timed."""
    n0, timed0, t0 = loop.sample().ticks, _timed(thread), time.monotonic()
    time.sleep(seconds)
    n1, timed1, t1 = loop.sample().ticks, _timed(thread), time.monotonic()
    assert n1 - n0 <= (t1 - t0) / IDLE_PERIOD_S + 2, (n1 - n0, t1 - t0)
    assert timed1 - timed0 <= 1, (timed1 - timed0, t1 - t0)


def test_an_idle_loop_ticks_at_the_idle_period_until_a_command_wakes_it() -> None:
    thread = ControlThread()
    loop = ControlLoop(LoopConfig(rate_hz=1000.0, deadman_timeout_s=30.0), SimDrive(JointParams()), clock="real")
    loop.start(thread)
    try:
        wait_ticks(loop, 3)
        _idle_ticks(loop, thread, 0.3)
        timed = _timed(thread)
        loop.command(Setpoint(2.0, 0.0, LIMITS, 10.0))
        # Woken: the command engages the loop and the thread times its wake-ups again. Whether the joint then
        # arrives on time is this host's load (this real-clock loop is not real-time here: under load it missed
        # 962 ticks, and its drive's watchdog braked); the motion is judged on the simulated clock elsewhere.
        deadline = time.monotonic() + 30.0
        while not (loop.sample().position > 0.0 and _timed(thread) - timed >= 10):
            assert time.monotonic() < deadline, loop.sample()
            time.sleep(0.01)
        loop.stop()
        deadline = time.monotonic() + 30.0
        while (s := loop.sample()).engaged:
            assert time.monotonic() < deadline, s
            time.sleep(0.01)
        assert abs(s.velocity) < 1e-3
        _idle_ticks(loop, thread, 0.3)  # At rest and released: idle again.
    finally:
        loop.close()
        thread.close()
    assert not thread.running


def test_which_loops_are_idle() -> None:
    """Idle: disengaged, nothing pending, the embedded joint, the real clock's own time. Not: a command pending (a
    coordinated start waiting for its instant included), engaged, a stop under way, a stepped clock, a mimic
    follower, a bus drive."""
    loop = ControlLoop(LoopConfig(rate_hz=1000.0, deadman_timeout_s=30.0), SimDrive(JointParams()), clock="simulated")
    loop.start()
    assert idle(loop.arrays)
    loop.command(Setpoint(1.0, 0.0, LIMITS, 10.0), received_at_s=loop.now() + 0.05)
    assert not idle(loop.arrays)
    loop.advance(0.01)  # The start is not due yet: still pending.
    assert not idle(loop.arrays) and not loop.sample().engaged
    loop.advance(0.1)
    assert loop.sample().engaged and not idle(loop.arrays)
    loop.stop()
    loop.advance(0.002)
    assert loop.sample().engaged and not idle(loop.arrays)  # Braking to rest.
    loop.advance(5.0)
    assert not loop.sample().engaged and idle(loop.arrays)
    loop.close()

    stepped = ControlLoop(LoopConfig(stepped_clock=True), SimDrive(JointParams()), clock="simulated")
    stepped.start()
    assert not idle(stepped.arrays)
    stepped.close()

    follower = ControlLoop(LoopConfig(), SimDrive(JointParams()), clock="simulated")
    LeaderInput(follower.arrays.lead, Relation(2.0, 0.0, 0.0), compensate=True)
    follower.start()
    assert not idle(follower.arrays)
    follower.close()

    reg = ServoRegistry(None, {"SERVO__DRIVE__BACKEND": "udral"})
    b = make_bus(loop_config(reg), None)
    b.run(0.3)
    assert not b.loop.sample().engaged and not idle(b.loop.arrays)


def test_the_idle_wait_ends_on_a_write_and_never_before_its_deadline_otherwise() -> None:
    """Woken by the eventfd (and the count drained); an fd in error (here a closed one) waits out the deadline
    instead of returning at once, so a broken wake-up can never make the thread spin."""
    ts, pollfd, scratch = np.zeros(2, np.int64), np.zeros(2, np.int32), np.zeros(1, np.uint64)
    fd = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        os.eventfd_write(fd, 3)
        assert wait_or_wake(fd, monotonic_ns(ts) + 10_000_000_000, ts, pollfd, scratch)
        with pytest.raises(BlockingIOError):  # The count was drained.
            os.eventfd_read(fd)
        deadline = monotonic_ns(ts) + 20_000_000
        assert not wait_or_wake(fd, deadline, ts, pollfd, scratch)
        assert monotonic_ns(ts) >= deadline
    finally:
        os.close(fd)
    deadline = monotonic_ns(ts) + 20_000_000
    assert not wait_or_wake(fd, deadline, ts, pollfd, scratch)  # Closed: POLLNVAL.
    assert monotonic_ns(ts) >= deadline
