"""The control tick and the real-time loop, compiled with numba ``nogil`` so the GIL can never stall them.

One tick (:func:`tick`) at loop time ``now`` runs the stages of :mod:`._stages` (and of :mod:`._mimic`) in
data-flow order:

1. **measure**: the drive's state (the embedded joint is stepped to ``now``; a bus drive's latest feedback), judged
   (:mod:`._feedback`: a non-finite or implausible sample is a fault, hidden from every later stage), and for a bus
   drive the link model (:mod:`._link`: sends, measurement age, command delay);
2. **supervise the drive**: silence beyond the feedback timeout is DRIVE_LOST;
3. **take the command**: a new setpoint is planned (clipped into the envelope), a stop starts, or the drive is
   released; a motion whose drive does not take commands yet waits for it (:mod:`._drive_wait`);
4. **supervise the motion**: deadman by reception time, the end of an envelope brake, the following error;
5. **reference**: the trajectory sampled at ``now`` and one period ahead; a stop ends when the joint is at rest;
6. **control law**, the command bounded into the envelope (:mod:`._feedback`), and **drive command**;
7. **publish** a sample for the node, and into the trace when one is due (:mod:`._trace`: every sample the node
   publishes as ``dynamics``, however late its event loop).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.typed import List

from .._jit import tick_jit
from ..drive import _dispatch as drive
from ..drive._base import DRIVE_SIM
from . import _layout as L
from ._clock import monotonic_ns, sleep_until_ns, wait_or_wake
from ._drive_wait import await_drive
from ._feedback import bound_command, check_feedback
from ._law import control_law
from ._layout import LoopArrays
from ._link import compensated, observe
from ._mimic import follow_leader
from ._stages import (
    publish,
    reference,
    supervise_drive,
    supervise_motion,
    take_command,
)
from ._trace import record


@tick_jit
def tick(now: float, A: LoopArrays) -> None:
    """Run one control tick at loop time ``now`` [second]; see the module docstring. Allocates nothing."""
    st, cfg = A.st, A.cfg
    first = st[L.ST_TICKS] == 0.0
    dt = 0.0 if first else now - st[L.ST_PREV_T]
    if first:
        st[L.ST_STARTED_T] = now
    st[L.ST_PREV_T] = now
    st[L.ST_TICKS] += 1.0
    kind = cfg[L.K_DRIVE]
    drive.measure(kind, A.drive, now, dt, cfg[L.K_PERIOD], st[L.ST_STARTED_T], cfg[L.K_FEEDBACK_TIMEOUT], A.meas)
    check_feedback(now, A)
    observe(now, A)
    supervise_drive(now, A)
    take_command(now, A)
    await_drive(now, dt, A)  # A drive asked to enable and not there yet: the plan waits for it.
    follow_leader(now, A)  # Mimic only: the leader's state and the relation, re-planned each tick.
    supervise_motion(now, A)
    braking = reference(now, A)
    v_cmd, f_cmd = bound_command(A, *control_law(A, braking))
    ref_e = A.ref[8:16] if compensated(A) else A.ref[0:8]  # The reference when the command takes effect.
    drive.command(
        kind, A.drive, now, cfg[L.K_PERIOD], st[L.ST_ENGAGED] != 0.0, cfg[L.K_LAW] == L.LAW_TORQUE, v_cmd, f_cmd,
        st[L.ST_FLIM], ref_e,
    )
    publish(now, A, v_cmd, f_cmd)
    record(now, A)


@tick_jit
def run_simulated(ticks: int, start_s: float, A: LoopArrays) -> float:
    """Run ``ticks`` ticks on a simulated clock from ``start_s`` at the configured period; returns the end time."""
    period = A.cfg[L.K_PERIOD]
    now = start_s
    for _ in range(ticks):
        now += period
        tick(now, A)
    return now


@njit(cache=True)
def new_group(first: LoopArrays) -> List[LoopArrays]:
    """A group (numba typed list) of one loop's arrays, for :func:`run_realtime`; see :func:`group_append`."""
    group = List()
    group.append(first)
    return group


@njit(cache=True)
def group_append(group: List[LoopArrays], arrays: LoopArrays) -> None:
    """Add a loop's arrays to ``group`` (compiled and cached here: the typed list's own methods are not cached)."""
    group.append(arrays)


@njit(cache=True, nogil=True)
def command_pending(A: LoopArrays) -> bool:
    """The node wrote a command the loop has not taken yet (or is writing one)."""
    return A.cmd[L.C_SEQ] != A.st[L.ST_CMD_SEQ]


@njit(cache=True, nogil=True)
def idle(A: LoopArrays) -> bool:
    """The loop has nothing to do but step its embedded joint: a real-clock loop of the simulated drive, not
    commanding it (the joint passive), no stop under way, no command pending (a coordinated start waiting for its
    instant is pending). A bus drive's loop is never idle (it supervises the drive's feedback and link), nor a mimic
    follower's (it takes its leader's samples every tick, engaged or not)."""
    cfg, st = A.cfg, A.st
    return (
        cfg[L.K_DRIVE] == DRIVE_SIM
        and cfg[L.K_STEPPED] == 0.0
        and A.lead[L.LD_SEQ] == 0.0  # No leader input (control._leader) ever written: not a mimic follower.
        and st[L.ST_ENGAGED] == 0.0
        and (st[L.ST_MODE] == L.MODE_IDLE or st[L.ST_MODE] == L.MODE_DISENGAGE)
        and not command_pending(A)
    )


@njit(cache=True, nogil=True)
def run_realtime(group: List[LoopArrays], ctl: np.ndarray, timing: np.ndarray, timespec: np.ndarray) -> None:
    """Tick every loop of ``group`` at its own period against CLOCK_MONOTONIC until ``ctl[L.CTL_QUIT]`` is set.

    One thread for all the axes of a node: loops with the same period tick back to back after one wake-up.
    ``group`` is a numba typed list (:func:`new_group`), so one compiled kernel serves any number of axes.
    Deadlines are absolute (no drift); after an overrun a loop's schedule restarts from now instead of bursting, and
    the ticks due meanwhile are counted as missed (``st[L.ST_MISSED]``), the largest lateness of a tick kept
    (``st[L.ST_LATE_MAX]``): a host too busy for the loop is reported, not hidden.
    Each wake-up's lateness [second] goes into the ``timing`` ring for measurement. ``ctl[L.CTL_QUIT]`` already set
    returns at once (how the kernel is loaded before the running thread is replaced).

    An :func:`idle` loop is ticked every :data:`~._layout.IDLE_PERIOD_NS` instead; while every loop is idle the
    thread waits on the eventfd ``ctl[L.CTL_WAKE_FD]`` as well, which a new command writes: the loops are ticked at
    once (those wake-ups are not timed). Otherwise an idle loop with a command pending is ticked at the next wake-up.
    """
    n = len(group)
    next_ns = np.empty(n, np.int64)  # Once per run, not per tick.
    stepped_now = np.empty(n)
    idle_k = np.zeros(n, np.bool_)
    pollfd = np.zeros(2, np.int32)
    scratch = np.zeros(1, np.uint64)
    wake_fd = int(ctl[L.CTL_WAKE_FD])
    start_ns = monotonic_ns(timespec)
    for k in range(n):
        next_ns[k] = start_ns
        stepped_now[k] = start_ns * 1e-9
    ring = L.TIMING_RING
    while ctl[L.CTL_QUIT] == 0.0:
        due_ns = next_ns.min()
        if wake_fd >= 0 and idle_k.all():
            woken = wait_or_wake(wake_fd, due_ns, timespec, pollfd, scratch)
            now_ns = monotonic_ns(timespec)
            if woken:
                for k in range(n):
                    next_ns[k] = min(next_ns[k], now_ns)
        else:
            sleep_until_ns(due_ns, timespec)
            now_ns = monotonic_ns(timespec)
            m = int(timing[ring])
            timing[m % ring] = (now_ns - due_ns) * 1e-9
            timing[ring] = m + 1
        for k in range(n):
            A = group[k]
            if next_ns[k] > now_ns and not (idle_k[k] and command_pending(A)):
                continue
            period = A.cfg[L.K_PERIOD]
            period_ns = int(period * 1e9)
            stepped = A.cfg[L.K_STEPPED] != 0.0
            if not stepped and not idle_k[k]:
                late = (now_ns - next_ns[k]) * 1e-9
                if late > A.st[L.ST_LATE_MAX]:
                    A.st[L.ST_LATE_MAX] = late
            stepped_now[k] += period
            tick(stepped_now[k] if stepped else now_ns * 1e-9, A)
            was_idle = idle_k[k]
            idle_k[k] = wake_fd >= 0 and idle(A)
            if idle_k[k]:
                next_ns[k] = now_ns + L.IDLE_PERIOD_NS
            elif was_idle:
                next_ns[k] = now_ns + period_ns  # Out of idle: the loop's schedule restarts from now.
            else:
                next_ns[k] += period_ns
                if not stepped and now_ns - next_ns[k] > period_ns:
                    A.st[L.ST_MISSED] += (now_ns - next_ns[k]) // period_ns + 1  # Due meanwhile, never ticked.
                    next_ns[k] = now_ns + period_ns
