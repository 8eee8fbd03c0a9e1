"""The real-time control thread: one GIL-free thread that ticks every control loop of a node.

A node hosting several axes runs one thread for all of them (:func:`._kernel.run_realtime` over a numba typed list
of their arrays: one compiled kernel for any number of axes), so the axes tick back to back after one wake-up and
share one timing measurement. Attaching or detaching a loop replaces the running thread between two ticks; the
kernel is loaded (compiled on a cold cache) *before* the old thread stops, so the loops already running never miss
more than a tick. Inside :meth:`ControlThread.batch` attachments wait and take effect together: a node starts all
its axes with one replacement.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from . import _layout as L
from ._kernel import group_append, new_group, run_realtime
from ._layout import LoopArrays


class Ticked(Protocol):
    """What the thread needs of a loop (a :class:`~._loop.ControlLoop`): its arrays and the SCHED_FIFO priority
    it asks for; the thread never calls the loop itself."""

    arrays: LoopArrays

    @property
    def realtime_priority(self) -> int: ...


class ControlThread:
    """Ticks the attached :class:`~._loop.ControlLoop` objects (real clock) until closed; idempotent close.

    :param realtime_priority: SCHED_FIFO priority (1..99) where the OS permits it; 0 keeps normal scheduling.
        The highest of this and the attached loops' configured priorities is used.
    """

    def __init__(self, realtime_priority: int = 0) -> None:
        self.realtime_priority = realtime_priority
        self.timing = np.zeros(L.TIMING_RING + 1)
        """Ring of wake-up lateness [second]; slot ``TIMING_RING`` holds the write count."""
        self._timespec = np.zeros(2, dtype=np.int64)
        self._loops: list[Ticked] = []
        """The loops the running thread ticks."""
        self._pending: list[Ticked] = []
        """Loops attached inside :meth:`batch`, ticked from its end."""
        self._batch_depth = 0
        self._ctl = np.zeros(L.N_CTL)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._wake_fd = _eventfd()
        """Written by :meth:`wake`: the idle thread's wait ends (−1: none, the loops never idle)."""
        self._wake_lock = threading.Lock()
        """Guards the eventfd's writes against its close (not ``_lock``: a kernel load holds that for seconds)."""

    @property
    def loops(self) -> Sequence[Ticked]:
        """The loops attached to this thread, in attachment order (inside :meth:`batch`: some not ticked yet)."""
        return (*self._loops, *self._pending)

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None

    def attach(self, loop: Ticked) -> None:
        """Tick ``loop`` from now on too (inside :meth:`batch`: from its end); no effect if attached already."""
        with self._lock:
            if loop in self._loops or loop in self._pending:
                return
            if self._batch_depth > 0:
                self._pending.append(loop)
            else:
                self._replace([*self._loops, loop])

    def detach(self, loop: Ticked) -> None:
        """Stop ticking ``loop`` (it is not ticked any more when this returns); the thread ends with its last loop."""
        with self._lock:
            if loop in self._pending:
                self._pending.remove(loop)
            if loop in self._loops:
                self._replace([x for x in self._loops if x is not loop])

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Loops attached inside start being ticked together when the (outermost) block ends: one replacement of
        the running thread for any number of them. Detaching inside takes effect at once."""
        with self._lock:
            self._batch_depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._batch_depth -= 1
                if self._batch_depth == 0 and self._pending:
                    loops, self._pending = [*self._loops, *self._pending], []
                    self._replace(loops)

    def wake(self) -> None:
        """A loop was given a command: an idle thread ticks at once (:func:`._kernel.run_realtime`)."""
        with self._wake_lock:
            if self._wake_fd >= 0:
                with contextlib.suppress(BlockingIOError):  # The counter is full: the thread is woken anyway.
                    os.eventfd_write(self._wake_fd, 1)

    def close(self) -> None:
        """Stop ticking every loop and end the thread; idempotent."""
        with self._lock:
            self._pending = []
            self._replace([])
            with self._wake_lock:
                if self._wake_fd >= 0:
                    os.close(self._wake_fd)
                    self._wake_fd = -1

    def period_errors(self) -> np.ndarray:
        """Wake-up lateness [second] of the most recent ticks, oldest first."""
        n = int(self.timing[L.TIMING_RING])
        ring = L.TIMING_RING
        if n <= ring:
            return self.timing[:n].copy()
        k = n % ring
        return np.concatenate((self.timing[k:ring], self.timing[:k]))

    def _replace(self, loops: list[Ticked]) -> None:
        group = None
        if loops:
            group = new_group(loops[0].arrays)
            for x in loops[1:]:
                group_append(group, x.arrays)
            load = np.full(L.N_CTL, -1.0)
            load[L.CTL_QUIT] = 1.0
            run_realtime(group, load, self.timing, self._timespec)  # Load (compile); returns at once.
        if self._thread is not None:
            self._ctl[L.CTL_QUIT] = 1.0
            self.wake()  # An idle thread sees the quit at once.
            self._thread.join()
            self._thread = None
        self._loops = loops
        if group is not None:
            self._ctl = np.zeros(L.N_CTL)
            self._ctl[L.CTL_WAKE_FD] = self._wake_fd
            priority = max([self.realtime_priority, *(x.realtime_priority for x in loops)])
            self._thread = threading.Thread(
                target=_thread_body, args=(group, self._ctl, self.timing, priority), name="control-loop", daemon=True
            )
            self._thread.start()


def _thread_body(group: object, ctl: np.ndarray, timing: np.ndarray, priority: int) -> None:
    """Ask the OS for a tight timer and, if configured, real-time priority; then run the kernel."""
    _tighten_timer_slack()
    _request_short_slice()
    if priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except OSError as ex:  # Not permitted (no CAP_SYS_NICE / rtprio limit): run with normal priority.
            _logger.warning("Control loop: SCHED_FIFO %d not permitted (%s)", priority, ex)
    run_realtime(group, ctl, timing, np.zeros(2, dtype=np.int64))


def _eventfd() -> int:
    """A non-blocking eventfd, or −1 where the OS has none (the loops then never idle)."""
    try:
        return os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    except (AttributeError, OSError):
        return -1


def _tighten_timer_slack() -> None:
    """Linux delays timer wake-ups by up to 50 µs by default to batch them; 1 ns keeps the loop on time."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
    except (OSError, AttributeError):  # Not Linux: nothing to tighten.
        pass


_PR_SET_TIMERSLACK = 29


class _SchedAttr(ctypes.Structure):
    """Linux ``struct sched_attr`` (``SCHED_ATTR_SIZE_VER1``)."""

    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64), ("sched_util_min", ctypes.c_uint32),
                ("sched_util_max", ctypes.c_uint32)]


_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
SLICE_NS = 100_000
"""The time slice the control thread asks of Linux's fair scheduler (EEVDF, 6.12 on): the shortest it grants."""


def _request_short_slice() -> bool:
    """Ask for a short slice at standard priority: a waking thread with a shorter slice than the running one may
    preempt it at once (EEVDF's ``PREEMPT_SHORT``), where otherwise it waited for that thread's slice to run out
    (the node's own event loop, busy with a burst of setpoints: ticks late by milliseconds). Older kernels ignore the
    slice; elsewhere nothing is asked."""
    number = _SYS_SCHED_SETATTR.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=os.SCHED_OTHER,
                          sched_nice=os.getpriority(os.PRIO_PROCESS, 0), sched_runtime=SLICE_NS)
        return libc.syscall(number, 0, ctypes.byref(attr), 0) == 0
    except (OSError, AttributeError):
        return False


_logger = logging.getLogger(__name__)
