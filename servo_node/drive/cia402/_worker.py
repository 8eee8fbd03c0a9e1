"""The one thread of a CiA 402 drive that waits on the drive: every SDO and NMT exchange after the bus is open.

One thread, created once, so that no two SDO transfers ever share the drive's SDO channel and no event costs a
thread. It brings the drive up (:func:`._walks.bring_up`), then serves, most urgent first: a stop by every
channel (:mod:`._escalate`) and the joint's watch after it, a fault's code to read, an object to read at once
(0x1017 when the heartbeat went silent while the TPDOs come), the user's jobs (re-arm, homing, stand-down; each
answers a future), and between them the objects its PDOs cannot carry (every :data:`POLL_PERIOD_S`), the read-back
(:class:`._verify.ReadBack`) and, while no TPDO comes, the statusword and mode display by SDO so that
``sys.drive`` says what the drive says. The receive and cycle threads only set a request and wake it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from ...errors import ErrorCode
from . import _dictionary as od
from . import _walks as walks
from ._context import DriveContext
from ._escalate import WATCH_S, stop_by_every_channel, watch_after_stop, watching
from ._verify import READBACK_PERIOD_S, ReadBack, plan, read

_logger = logging.getLogger(__name__)

IDLE_S = 0.5
"""The longest the worker sleeps with nothing due (it is woken for anything sooner) [second]."""
POLL_PERIOD_S = 0.05
"""How often the objects no TPDO carries (velocity, torque actual: :attr:`._bringup.PdoLayout.polled`) are read
by SDO [second]."""


class Worker:
    """The worker of one drive; :meth:`submit` a job, :meth:`close` to end it."""

    def __init__(self, c: DriveContext, cycler: Callable[[], None]) -> None:
        self.c = c
        self._cycler = cycler
        self._jobs: collections.deque[tuple[str, Future[bool]]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._brought_up = False
        self.readback = ReadBack()
        self._view_at = 0.0
        self._watch_at = 0.0

    def start(self) -> None:
        """Start the thread (the bring-up first); idempotent."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"cia402 {self.c.s.node_id}", daemon=True)
            self._thread.start()

    def submit(self, kind: str) -> Future[bool]:
        """A job (``rearm``, ``recover``, ``home``, ``stand_down``) for the thread; its future holds whether it
        succeeded."""
        fut: Future[bool] = Future()
        if self._thread is None or not self._thread.is_alive():
            fut.set_result(False)
            return fut
        self._jobs.append((kind, fut))
        self.c.wake.set()
        return fut

    def busy(self) -> bool:
        return bool(self._jobs) or self.c.walking or not self._brought_up

    def close(self, timeout: float) -> None:
        self.c.closing.set()
        self.c.wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ---------------------------------------------------------------- the thread

    def _run(self) -> None:
        c = self.c
        try:
            walks.bring_up(c, self._cycler, self._answer_waiting)
            self._brought_up = True
            if c.up:
                self.readback.reset(plan(c))
            while not c.closing.is_set():
                c.wake.wait(self._sleep_s())
                c.wake.clear()
                if not c.closing.is_set():
                    self._pass()
        except Exception:  # A bug here must not leave the drive unsupervised silently.
            _logger.exception("%s: worker failed", c.name)
            c.set_fault(ErrorCode.DRIVE_FAULT, f"{c.name}: supervision failed (see the log)")
        finally:
            for _, fut in self._jobs:
                fut.set_result(False)
            self._answer_waiting(False)

    def _answer_waiting(self, up: bool) -> None:
        """The outcome of a bring-up attempt for the re-arms asked while the first bring-up is not done."""
        while self._jobs and self._jobs[0][0] == "rearm" and not self._brought_up:
            self._jobs.popleft()[1].set_result(up)  # A re-arm asked during the bring-up: it is that bring-up.

    def _polling(self) -> bool:
        c = self.c
        return bool(c.ready and c.layout is not None and c.layout.polled and not c.walking and not c.stopping
                    and c.nmt != od.NMT_STOPPED)

    def _sleep_s(self) -> float:
        c = self.c
        if watching(c):
            return max(0.0, min(IDLE_S, self._watch_at - time.monotonic()))
        if self._polling():
            due = c.polled_at + POLL_PERIOD_S
            if self._reading_back():
                due = min(due, self.readback.next_at)
            return max(0.0, min(IDLE_S, due - time.monotonic()))
        if self._reading_back():
            return max(0.0, min(IDLE_S, self.readback.next_at - time.monotonic()))
        if c.ready and not c.tpdo_fresh(time.monotonic()):
            return max(0.0, min(IDLE_S, self._view_at - time.monotonic()))
        return IDLE_S

    def _reading_back(self) -> bool:
        c = self.c
        return c.up and c.fault is None and not c.walking and not c.stopping and c.nmt != od.NMT_STOPPED

    def _pass(self) -> None:
        """Everything due, most urgent first."""
        c = self.c
        if c.stop_reason is not None and not c.stopping:
            stop_by_every_channel(c)
            self._watch_at = time.monotonic() + WATCH_S
        if watching(c) and time.monotonic() >= self._watch_at:
            self._watch_at = time.monotonic() + WATCH_S
            watch_after_stop(c)
        if c.fault_read is not None:
            (state, sw), c.fault_read = c.fault_read, None
            walks.read_fault(c, state, sw)
        if c.urgent is not None:
            self._urgent()
        while self._jobs and not (c.stop_reason is not None and not c.stopping):
            kind, fut = self._jobs.popleft()
            fut.set_result(self._job(kind))
        now = time.monotonic()
        if self._polling() and now >= c.polled_at + POLL_PERIOD_S:
            self._poll()
        if self._reading_back() and now >= self.readback.next_at:
            found = self.readback.step(c)
            if found is not None and self._reading_back():
                verdict, check = found
                c.lose_control(verdict, escalate=check.commands)
        if c.ready and not c.tpdo_fresh(now) and now >= self._view_at and c.nmt != od.NMT_STOPPED:
            self._view_at = now + READBACK_PERIOD_S
            self._view_by_sdo()

    def _job(self, kind: str) -> bool:
        c = self.c
        if kind in ("rearm", "recover"):  # The whole bring-up again: its read-back plan anew.
            ok = (walks.rearm if kind == "rearm" else walks.recover)(c, self._cycler)
            if ok:
                self.readback.reset(plan(c))
            return ok
        if kind == "home":
            walks.home(c)
            return c.fault is None
        if kind == "stand_down":
            walks.stand_down(c, self._cycler)
            return True
        return False

    def _urgent(self) -> None:
        """The heartbeat went silent while the TPDOs come: did someone turn its producer off?"""
        c = self.c
        c.urgent = None
        check = self.readback.find(od.PRODUCER_HEARTBEAT)
        value = read(c.node, od.PRODUCER_HEARTBEAT)
        verdict = check.verdict(value, c.name) if check is not None and value is not None else None
        if verdict is not None:
            c.lose_control(verdict, escalate=False)
        elif c.fault is None:
            silent = time.monotonic() - c.nmt_at
            if silent <= max(3.0 * c.s.heartbeat_s, c.s.lost_after_s):
                return  # Heard again meanwhile (a stalled host's late heartbeat): nothing was lost.
            what = "heartbeat" if c.comm.watch != "guarding" else "answer to guarding"
            c.set_fault(ErrorCode.DRIVE_LOST, f"{c.name}: {what} silent for {silent:.3g} s though its PDOs come "
                        f"(0x1017 {'unreadable' if value is None else f'= {value}'})")

    def _poll(self) -> None:
        """The objects its PDOs cannot carry, by SDO (the measurement takes the latest of each)."""
        c = self.c
        assert c.layout is not None
        c.polled_at = time.monotonic()
        for index in c.layout.polled:
            value = read(c.node, index)
            if value is None:
                continue
            if index == od.VELOCITY_ACTUAL:
                c.v_counts = value
            elif index == od.TORQUE_ACTUAL:
                c.f_permille = value

    def _view_by_sdo(self) -> None:
        """The statusword and mode display while no TPDO brings them (NMT PRE-OPERATIONAL)."""
        c = self.c
        sw = read(c.node, od.STATUSWORD)
        mode = read(c.node, od.MODES_OF_OPERATION_DISPLAY)
        if sw is not None:
            c.statusword, c.sw_at = sw, time.monotonic()
        if mode is not None:
            c.mode_display, c.mode_at = mode, time.monotonic()
