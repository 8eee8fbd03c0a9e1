"""One canopen ``Network`` per CAN bus, shared by every axis on it: the SYNC, the cycle and this node's heartbeat.

Axes on one bus share one network (one python-can bus, one receive thread), one SYNC producer and one cycle
thread: every period the thread lets each drive put its RPDOs on the bus (the command of this cycle), then sends
SYNC, at which every drive latches them and answers with its TPDOs. Without SYNC production (another node
produces it) the RPDOs go out right after each SYNC heard, for the next one. The first axis to open a bus sets its
rate, SYNC production and this node's CANopen node-ID (its heartbeat, which the drives watch).

One master per bus role: a frame we receive was sent by another node (the bus, like a CAN controller, does not
give us our own). So a SYNC heard while we produce SYNC, or a heartbeat with our own node-ID, is another master on
the bus: :meth:`CanopenBus.claim` listens for :func:`listen_s` before this node sends anything at all (its heartbeat
included) and refuses while it hears one; once we send, each such frame is reported to every drive on the bus
(:meth:`CanopenBus.watch`), which then stops commanding (a fault) and names it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cyphal_common.errors import ConfigurationError

from . import _dictionary as od

_logger = logging.getLogger(__name__)

SYNC_COB_ID = 0x80
HEARTBEAT_COB_ID = 0x700
NOTIFIER_CYCLE_S = 0.1
"""Receive-thread poll period (canopen's 1 s default would make every close last a second)."""
LISTEN_MIN_S = 0.3
"""The least a master listens before it sends anything on a bus [second]."""


def listen_s(heartbeat_s: float, period_s: float) -> float:
    """How long a master listens for another one before it sends: three of its heartbeat periods and of its
    cycles, at least :data:`LISTEN_MIN_S` [second]."""
    return max(3.0 * heartbeat_s, 3.0 * period_s, LISTEN_MIN_S)

_lock = threading.Lock()
_buses: dict[str, CanopenBus] = {}


class CanopenBus:
    """A canopen network on one CAN iface with its cycle thread; :func:`acquire`/:meth:`release` count users."""

    def __init__(self, iface: str, bitrate: int, rate_hz: float, sync_producer: bool, master_id: int,
                 heartbeat_s: float) -> None:
        import canopen

        from cyphal_common.transport import CanIfaceError, open_can_bus

        try:
            bus = open_can_bus(iface, bitrate)
        except CanIfaceError as ex:
            raise ConfigurationError(f"servo.drive.can.iface: {ex}") from ex
        self.iface = iface
        self.period_s = 1.0 / rate_hz
        self.sync_producer = sync_producer
        self.master_id = master_id
        self.network = canopen.Network(bus)
        self.network.NOTIFIER_CYCLE = NOTIFIER_CYCLE_S
        self.heartbeat_s = heartbeat_s
        self.listen_s = listen_s(heartbeat_s, self.period_s)
        self._users = 0
        self._cyclers: list[Callable[[], None]] = []
        self._watchers: list[Callable[[Callable[[], str]], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sync_at = 0.0
        self._next_at = 0.0
        self.syncs = 0
        self.heartbeat: Any = None  # Our NMT slave (its heartbeat), once the bus is ours (claim).
        self._claimed = False
        self.foreign: dict[int, tuple[int, float]] = {}
        """COB-ID → (frames, monotonic time of the last) of what another master sent: SYNC, our heartbeat."""
        self.network.subscribe(SYNC_COB_ID, self._on_sync if not sync_producer else self._on_foreign)
        self.network.subscribe(HEARTBEAT_COB_ID + master_id, self._on_foreign)
        self.network.connect()
        self._opened_at = time.monotonic()

    def claim(self) -> str | None:
        """Listen until :attr:`listen_s` after the bus was opened, then (once per bus) produce our heartbeat —
        unless another master was heard within the last :attr:`listen_s`: its description, and nothing new sent
        (ask again later). Blocking."""
        delay = self._opened_at + self.listen_s - time.monotonic()
        if delay > 0.0 and self._stop.wait(delay):
            return "closed"
        conflict = self.conflict(self.listen_s)
        if conflict is not None:
            return conflict
        with _lock:
            if self._claimed:
                return None
            self._claimed = True
        self.heartbeat = self.network.create_node(self.master_id, od.master_dictionary(round(self.heartbeat_s * 1e3)))
        self.heartbeat.nmt.state = "INITIALISING"  # Boot-up, then the heartbeat producer runs.
        self.heartbeat.nmt.state = "PRE-OPERATIONAL"
        self.heartbeat.nmt.state = "OPERATIONAL"
        return None

    def conflict(self, within_s: float) -> str | None:
        """Another master heard within the last ``within_s`` (SYNC while we produce it, our heartbeat's COB-ID)."""
        now = time.monotonic()
        found = []
        for cob_id, (count, at) in list(self.foreign.items()):
            if now - at <= within_s:
                found.append(describe_foreign(cob_id, count, self.master_id))
        return "; ".join(found) or None

    def watch(self, fn: Callable[[Callable[[], str]], None]) -> None:
        """Call ``fn(describe)`` on the receive thread for every frame of another master (keep it O(1); ``describe()``
        is its text); idempotent."""
        with _lock:
            if fn not in self._watchers:
                self._watchers = [*self._watchers, fn]

    def unwatch(self, fn: Callable[[Callable[[], str]], None]) -> None:
        with _lock:
            self._watchers = [w for w in self._watchers if w is not fn]

    def _on_foreign(self, can_id: int, _data: bytes, _timestamp: float) -> None:
        count = self.foreign.get(can_id, (0, 0.0))[0] + 1
        self.foreign[can_id] = (count, time.monotonic())
        if self._claimed:
            for fn in self._watchers:
                fn(lambda: describe_foreign(can_id, count, self.master_id))

    def add_cycler(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` every cycle before SYNC (from the cycle thread, or after each SYNC heard); idempotent."""
        with _lock:
            if fn not in self._cyclers:
                self._cyclers = [*self._cyclers, fn]
            if self._thread is None and self.sync_producer:
                self._thread = threading.Thread(target=self._run, name=f"canopen-cycle {self.iface}", daemon=True)
                self._thread.start()

    def remove_cycler(self, fn: Callable[[], None]) -> None:
        """Stop calling ``fn``."""
        with _lock:
            self._cyclers = [c for c in self._cyclers if c is not fn]

    def next_cycle_at(self) -> float:
        """When the cycle after this one starts (monotonic) — when a command sent now is replaced."""
        return self._next_at

    def sync_at(self) -> float:
        """When the last SYNC went out (or was heard) — the instant the drives' TPDOs describe (monotonic)."""
        return self._sync_at

    def _cycle(self) -> None:
        for fn in self._cyclers:
            try:
                fn()
            except Exception:  # One drive's failure must not stop the bus's cycle.
                _logger.exception("CANopen cycle failed on %s", self.iface)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._next_at = next_at + self.period_s
            self._cycle()
            self._sync_at = time.monotonic()  # The actual instant, late or not: what the measurements are stamped.
            try:
                self.network.sync.transmit()
                self.syncs += 1
            except Exception as ex:  # A bus error: keep cycling, the drives' silence is reported by the loop.
                _logger.warning("SYNC on %s failed: %s", self.iface, ex)
            next_at += self.period_s
            delay = next_at - time.monotonic()
            if delay < -self.period_s:  # Overrun: restart the schedule from now instead of bursting.
                next_at = time.monotonic()
            self._stop.wait(max(0.0, delay))

    def _on_sync(self, _can_id: int, _data: bytes, _timestamp: float) -> None:
        self._sync_at = time.monotonic()
        self._next_at = self._sync_at + self.period_s
        self.syncs += 1
        self._cycle()

    def release(self) -> None:
        """One user less; the last one stops the thread, the heartbeat and leaves the bus. Idempotent per user."""
        with _lock:
            self._users -= 1
            if self._users > 0:
                return
            _buses.pop(self.iface, None)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        try:
            if self.heartbeat is not None:
                self.heartbeat.nmt.stop_heartbeat()
        except Exception:  # Closing anyway.
            pass
        try:
            self.network.disconnect()
        except Exception as ex:
            _logger.warning("Leaving %s: %s", self.iface, ex)


def describe_foreign(cob_id: int, count: int, master_id: int) -> str:
    """What a frame of another master means, naming its COB-ID (short: it ends in ``sys.status``)."""
    if cob_id == SYNC_COB_ID:
        return f"another SYNC producer: SYNC COB-ID 0x{cob_id:03X} not sent by us ({count} heard)"
    return f"another node has our master node-ID {master_id}: heartbeat COB-ID 0x{cob_id:03X} ({count} heard)"


def acquire(iface: str, bitrate: int, rate_hz: float, sync_producer: bool, master_id: int,
            heartbeat_s: float) -> CanopenBus:
    """The bus on ``iface`` (opened by its first user with these settings).

    :raises ConfigurationError: the iface is malformed or cannot be opened.
    """
    if not iface.strip():
        raise ConfigurationError("servo.drive.can.iface is empty: name the CANopen bus (e.g. socketcan:can0)")
    key = iface.strip()
    with _lock:
        bus = _buses.get(key)
        if bus is None:
            bus = CanopenBus(key, bitrate, rate_hz, sync_producer, master_id, heartbeat_s)
            _buses[key] = bus
        bus._users += 1
        return bus
