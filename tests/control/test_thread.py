"""The real-time control thread: one thread ticks several loops; attaching and detaching never stalls the others.

Wall time passes here (it is the real clock), but no verdict is about how fast: only whether a loop is ticked
at all, by which thread, and that its motion is right.
"""

from __future__ import annotations

import threading
import time

from servo_node.control import ControlLoop, ControlThread, LoopConfig
from servo_node.drive import SimDrive
from servo_node.setpoint import ProfileLimits, Setpoint
from sim_plant import JointParams

LIMITS = ProfileLimits(-2.0, 2.0, -20.0, 20.0, 200.0)


def make_loop(rate_hz: float) -> ControlLoop:
    return ControlLoop(LoopConfig(rate_hz=rate_hz, deadman_timeout_s=10.0), SimDrive(JointParams()), clock="real")


def wait_ticks(loop: ControlLoop, more: int, timeout: float = 30.0) -> None:
    """Wait until ``loop`` has been ticked ``more`` times again (fails if it never is)."""
    start = loop.sample().ticks
    deadline = time.monotonic() + timeout
    while loop.sample().ticks < start + more:
        assert time.monotonic() < deadline, "the loop is not ticked"
        time.sleep(0.01)


def control_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "control-loop"]


def test_one_thread_ticks_every_attached_loop() -> None:
    before = len(control_threads())
    thread = ControlThread()
    fast, slow = make_loop(1000.0), make_loop(250.0)
    fast.start(thread)
    slow.start(thread)
    try:
        assert thread.loops == (fast, slow)
        assert len(control_threads()) == before + 1  # Both axes, one thread.
        now = time.monotonic()
        fast.command(Setpoint(0.5, 0.0, LIMITS, 10.0), now)
        slow.command(Setpoint(-0.5, 0.0, LIMITS, 10.0), now)
        for loop, target in ((fast, 0.5), (slow, -0.5)):
            deadline = time.monotonic() + 30.0
            while abs(loop.sample().position - target) > 1e-3 or not loop.sample().settled_after_s > 0.0:
                assert time.monotonic() < deadline, loop.sample()
                time.sleep(0.02)
        assert thread.period_errors().size > 0
    finally:
        fast.close()
        slow.close()
    assert not thread.running and thread.loops == ()
    assert len(control_threads()) == before


def test_detach_stops_only_that_loop_and_close_is_idempotent() -> None:
    thread = ControlThread()
    a, b = make_loop(500.0), make_loop(500.0)
    a.start(thread)
    b.start(thread)
    a.close()
    a.close()  # Idempotent.
    ticks = a.sample().ticks
    wait_ticks(b, 50)  # The other loop goes on…
    assert a.sample().ticks == ticks  # …and the detached one is not ticked any more.
    assert thread.running and thread.loops == (b,)
    thread.close()
    thread.close()
    assert not thread.running
    b.close()


def test_a_loop_without_a_thread_gets_its_own() -> None:
    before = len(control_threads())
    loop = make_loop(500.0)
    loop.start()
    loop.start()  # Idempotent.
    try:
        wait_ticks(loop, 20)
        assert len(control_threads()) == before + 1
    finally:
        loop.close()
    assert len(control_threads()) == before
