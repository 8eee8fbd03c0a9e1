"""One canopen ``Network`` per CAN bus, shared by every axis on it: the SYNC, the cycle and this node's heartbeat.

Axes on one bus share one network (one python-can bus, one receive thread), one SYNC producer and one cycle
thread: every period the thread lets each drive put its RPDOs on the bus (the command of this cycle), then sends
SYNC, at which every drive latches them and answers with its TPDOs. Without SYNC production (another node
produces it) the RPDOs go out right after each SYNC heard, for the next one. The first axis to open a bus sets its
rate, SYNC production and this node's CANopen node-ID (its heartbeat, which the drives watch).
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
NOTIFIER_CYCLE_S = 0.1
"""Receive-thread poll period (canopen's 1 s default would make every close last a second)."""

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
        self.network.connect()
        self._users = 0
        self._cyclers: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sync_at = 0.0
        self._next_at = 0.0
        self.syncs = 0
        self.heartbeat: Any = self.network.create_node(master_id, od.master_dictionary(round(heartbeat_s * 1e3)))
        self.heartbeat.nmt.state = "INITIALISING"  # Boot-up, then the heartbeat producer runs.
        self.heartbeat.nmt.state = "PRE-OPERATIONAL"
        self.heartbeat.nmt.state = "OPERATIONAL"
        if not sync_producer:
            self.network.subscribe(SYNC_COB_ID, self._on_sync)

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
            self.heartbeat.nmt.stop_heartbeat()
        except Exception:  # Closing anyway.
            pass
        try:
            self.network.disconnect()
        except Exception as ex:
            _logger.warning("Leaving %s: %s", self.iface, ex)


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
