"""The real-time control thread: one thread ticks several loops; attaching and detaching never stalls the others.

Wall time passes here (it is the real clock), but no verdict is about how fast: only whether a loop is ticked
at all, by which thread, and that its motion is right.
"""

from __future__ import annotations

import contextlib
import threading
import time

from servo_node.control import ControlLoop, ControlThread, LoopConfig
from servo_node.control._kernel import group_append, new_group, run_realtime
from servo_node.drive import SimDrive
from servo_node.setpoint import ProfileLimits, Setpoint
from sim_plant import JointParams

LIMITS = ProfileLimits(-2.0, 2.0, -20.0, 20.0, 200.0)


def make_loop(rate_hz: float) -> ControlLoop:
    """A loop on the real thread whose embedded joint advances one period per tick (``servo.loop_clock`` stepped).

    On the monotonic clock a starved thread (a test at niceness 15 on a busy machine) steps the joint over the
    whole stall (the last command held for the embedded drive's watchdog time, then its brake), so how a move
    ends would depend on the scheduling (before that watchdog, a 0.6 s stall mid-move ended in a following-error
    stop 1.1 rad past the target, as in CI run 34). These verdicts are about which thread ticks which loop, so
    the joint's time is the ticks'.
    """
    config = LoopConfig(rate_hz=rate_hz, deadman_timeout_s=10.0, stepped_clock=True)
    return ControlLoop(config, SimDrive(JointParams()), clock="real")


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


def test_one_compiled_kernel_serves_any_number_of_loops() -> None:
    """1, 3 and 8 loops on one thread, attached one at a time or in one batch: the real-time kernel and the group's
    helpers keep a single compiled signature (no compilation per number of axes, so warm-up covers every node)."""
    for count, batched in ((1, False), (3, False), (8, True)):
        thread = ControlThread()
        loops = [make_loop(500.0) for _ in range(count)]
        with thread.batch() if batched else contextlib.nullcontext():
            for loop in loops:
                loop.start(thread)
            if batched:
                assert not thread.running and thread.loops == tuple(loops)  # Waiting for the batch's end.
        try:
            assert thread.running and thread.loops == tuple(loops)
            for loop in loops:
                wait_ticks(loop, 10)
        finally:
            for loop in loops:
                loop.close()
        for kernel in (run_realtime, new_group, group_append):  # One loop alone never appends: at most one.
            assert len(kernel.signatures) <= 1, (count, kernel, kernel.signatures)
    for kernel in (run_realtime, new_group, group_append):
        assert len(kernel.signatures) == 1, (kernel, kernel.signatures)
    assert not thread.running


def test_a_loop_detached_inside_a_batch_is_never_ticked() -> None:
    thread = ControlThread()
    a, b = make_loop(500.0), make_loop(500.0)
    with thread.batch():
        a.start(thread)
        b.start(thread)
        ticks = a.sample().ticks
        a.close()  # Closed before the batch ended: never handed to the thread.
    try:
        assert thread.loops == (b,)
        wait_ticks(b, 20)
        assert a.sample().ticks == ticks
    finally:
        b.close()
    assert not thread.running


def test_the_thread_asks_for_a_short_time_slice() -> None:
    """At standard priority the control thread asks Linux's fair scheduler for its shortest slice, so it preempts a
    busy thread of the node at its wake-up instead of waiting for that thread's slice (EEVDF, Linux 6.12 on: the
    kernel shows the slice in the thread's ``sched`` file; older kernels have no such line and nothing to check)."""
    from servo_node.control._thread import SLICE_NS

    loop = make_loop(1000.0)
    loop.start()
    try:
        wait_ticks(loop, 10)
        thread = loop._thread._thread  # type: ignore[union-attr]  # its ControlThread's OS thread
        assert thread is not None and thread.native_id is not None
        with open(f"/proc/self/task/{thread.native_id}/sched") as f:
            lines = [line for line in f if line.startswith("se.slice")]
        if lines:
            assert int(lines[0].split(":")[1]) == SLICE_NS
        with open("/proc/thread-self/sched") as f:  # This thread (the test's) keeps the kernel's default.
            assert not any(line.startswith("se.slice") and int(line.split(":")[1]) == SLICE_NS for line in f)
    finally:
        loop.close()
