"""One python-can bus per CAN iface, shared by every ODrive axis on it: one receive thread hands each frame to the
axis of its node-ID, sends are serialised.

A real interface is opened once per process (several drivers cannot hold one adapter), so axes on one bus share it,
as the CiA 402 backend's axes share one canopen network. Frames for node-IDs nobody drives are dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import can

from cyphal_common.errors import ConfigurationError

_logger = logging.getLogger(__name__)

Handler = Callable[[can.Message, float], None]
"""Called from the receive thread with each frame of its node-ID and its reception time (monotonic)."""

_lock = threading.Lock()
_buses: dict[str, CanSimpleBus] = {}


class CanSimpleBus:
    """The bus of one iface; :func:`acquire` / :meth:`release` count its axes."""

    def __init__(self, iface: str, bitrate: int) -> None:
        from cyphal_common.transport import CanIfaceError, open_can_bus

        try:
            self.bus = open_can_bus(iface, bitrate)
        except CanIfaceError as ex:
            raise ConfigurationError(f"servo.drive.can.iface: {ex}") from ex
        self.iface = iface
        self._handlers: dict[int, Handler] = {}
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._users = 0
        self.send_errors = 0
        self._thread = threading.Thread(target=self._run, name=f"odrive-rx {iface}", daemon=True)
        self._thread.start()

    def attach(self, node_id: int, handler: Handler) -> None:
        """Frames of ``node_id`` go to ``handler``.

        :raises ConfigurationError: another axis of this node drives that node-ID on this bus.
        """
        with _lock:
            if node_id in self._handlers:
                raise ConfigurationError(f"ODrive node-ID {node_id} on {self.iface} is already driven by another axis")
            self._handlers = {**self._handlers, node_id: handler}

    def detach(self, node_id: int) -> None:
        """No more frames for ``node_id``."""
        with _lock:
            self._handlers = {k: v for k, v in self._handlers.items() if k != node_id}

    def send(self, msg: can.Message) -> bool:
        """Send one frame; False if the bus refused it (counted: a full queue or a bus-off loses it)."""
        try:
            with self._send_lock:
                self.bus.send(msg, timeout=0.01)
            return True
        except (can.CanError, OSError, ValueError) as ex:
            self.send_errors += 1
            _logger.debug("send on %s failed: %s", self.iface, ex)
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.bus.recv(0.1)
            except (can.CanError, OSError, ValueError) as ex:
                if self._stop.is_set():
                    return
                _logger.warning("receive on %s failed: %s", self.iface, ex)
                time.sleep(0.1)
                continue
            if msg is None or msg.is_extended_id or msg.is_error_frame:
                continue
            handler = self._handlers.get((msg.arbitration_id >> 5) & 0x3F)
            if handler is not None:
                try:
                    handler(msg, time.monotonic())
                except Exception:  # One axis's failure must not stop the others' reception.
                    _logger.exception("ODrive frame handler failed on %s", self.iface)

    def release(self) -> None:
        """One user less; the last one stops the receive thread and leaves the bus. Idempotent per user."""
        with _lock:
            self._users -= 1
            if self._users > 0:
                return
            _buses.pop(self.iface, None)
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        try:
            self.bus.shutdown()
        except Exception as ex:  # Leaving anyway.
            _logger.warning("Leaving %s: %s", self.iface, ex)


def acquire(iface: str, bitrate: int) -> CanSimpleBus:
    """The bus on ``iface`` (opened by its first user).

    :raises ConfigurationError: the iface is empty, malformed or cannot be opened.
    """
    if not iface.strip():
        raise ConfigurationError("servo.drive.can.iface is empty: name the ODrive's CAN bus (e.g. socketcan:can0)")
    key = iface.strip()
    with _lock:
        bus = _buses.get(key)
        if bus is None:
            bus = CanSimpleBus(key, bitrate)
            _buses[key] = bus
        bus._users += 1
        return bus
