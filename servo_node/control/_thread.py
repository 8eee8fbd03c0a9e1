"""The real-time control thread: one GIL-free thread that ticks every control loop of a node.

A node hosting several axes runs one thread for all of them (:func:`._kernel.run_realtime` over a tuple of their
arrays), so the axes tick back to back after one wake-up and share one timing measurement. Attaching or detaching
a loop replaces the running thread between two ticks; the kernel for the new number of loops is compiled (or
loaded from the cache) *before* the old thread stops, so the loops already running never miss more than a tick.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import _layout as L
from ._kernel import run_realtime

if TYPE_CHECKING:
    from ._loop import ControlLoop


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
        self._loops: list[ControlLoop] = []
        self._ctl = np.zeros(L.N_CTL)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loops(self) -> Sequence[ControlLoop]:
        """The loops this thread ticks, in attachment order."""
        return tuple(self._loops)

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None

    def attach(self, loop: ControlLoop) -> None:
        """Tick ``loop`` from now on too (no effect if attached already)."""
        with self._lock:
            if loop not in self._loops:
                self._replace([*self._loops, loop])

    def detach(self, loop: ControlLoop) -> None:
        """Stop ticking ``loop``; the thread ends with its last loop."""
        with self._lock:
            if loop in self._loops:
                self._replace([x for x in self._loops if x is not loop])

    def close(self) -> None:
        """Stop ticking every loop and end the thread; idempotent."""
        with self._lock:
            self._replace([])

    def period_errors(self) -> np.ndarray:
        """Wake-up lateness [second] of the most recent ticks, oldest first."""
        n = int(self.timing[L.TIMING_RING])
        ring = L.TIMING_RING
        if n <= ring:
            return self.timing[:n].copy()
        k = n % ring
        return np.concatenate((self.timing[k:ring], self.timing[:k]))

    def _replace(self, loops: list[ControlLoop]) -> None:
        group = tuple(x.arrays for x in loops)
        if group:
            run_realtime(group, np.ones(L.N_CTL), self.timing, self._timespec)  # Compile/load; returns at once.
        if self._thread is not None:
            self._ctl[L.CTL_QUIT] = 1.0
            self._thread.join()
            self._thread = None
        self._loops = loops
        if group:
            self._ctl = np.zeros(L.N_CTL)
            priority = max([self.realtime_priority, *(x.config.realtime_priority for x in loops)])
            self._thread = threading.Thread(
                target=_thread_body, args=(group, self._ctl, self.timing, priority), name="control-loop", daemon=True
            )
            self._thread.start()


def _thread_body(group: tuple[object, ...], ctl: np.ndarray, timing: np.ndarray, priority: int) -> None:
    """Ask the OS for a tight timer and, if configured, real-time priority; then run the kernel."""
    _tighten_timer_slack()
    if priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except OSError as ex:  # Not permitted (no CAP_SYS_NICE / rtprio limit): run with normal priority.
            _logger.warning("Control loop: SCHED_FIFO %d not permitted (%s)", priority, ex)
    run_realtime(group, ctl, timing, np.zeros(2, dtype=np.int64))


def _tighten_timer_slack() -> None:
    """Linux delays timer wake-ups by up to 50 µs by default to batch them; 1 ns keeps the loop on time."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
    except (OSError, AttributeError):  # Not Linux: nothing to tighten.
        pass


_PR_SET_TIMERSLACK = 29

_logger = logging.getLogger(__name__)
