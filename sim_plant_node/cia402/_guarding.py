"""Node guarding and life guarding (CiA 301) of the emulated drive, for a file that has 0x100C and 0x100D.

The master sends a remote frame (RTR) on COB-ID 0x700 + node-ID every guard time; the drive answers each with one
byte: its NMT state and a toggle bit (bit 7) that alternates from 0 after each boot. Life guarding: once the first
request came, guard time 0x100C [ms] × life time factor 0x100D without one is a life guarding event, which the
drive takes as a lost master (EMCY 0x8130 and the 0x6007 reaction); a later request clears it. Heartbeat and
guarding exclude each other: while the drive produces its heartbeat (0x1017 ≠ 0) it answers no guard request.

canopen's network ignores remote frames, so :class:`GuardListener` listens on the python-can notifier beside it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import can

_logger = logging.getLogger(__name__)


class Guarding:
    """The drive's side of node guarding: answers and the life-guarding watch."""

    def __init__(self, node_id: int, send: Callable[[int, bytes], None], state: Callable[[], int],
                 times: Callable[[], tuple[int, int, int]], lost: Callable[[], None], back: Callable[[], None]) -> None:
        """``send(can_id, data)``; ``state()``: the NMT state code (0, 4, 5, 127); ``times()``: (0x1017, 0x100C,
        0x100D) now; ``lost``/``back``: the life guarding event and its end."""
        self.cob_id = 0x700 + node_id
        self._send, self._state, self._times = send, state, times
        self._lost, self._back = lost, back
        self._lock = threading.Lock()
        self._toggle = 0
        self._last: float | None = None
        self._event = False
        self.answered = 0

    def reset(self) -> None:
        """A boot (reset node or communication): the toggle starts at 0, guarding waits for its first request."""
        with self._lock:
            self._toggle, self._last, self._event = 0, None, False

    def request(self) -> None:
        """A guard request (RTR) heard: answer it unless the heartbeat runs; it also feeds life guarding."""
        heartbeat_ms, _, _ = self._times()
        with self._lock:
            if heartbeat_ms:
                return
            self._last = time.monotonic()
            data = bytes([self._toggle | (self._state() & 0x7F)])
            self._toggle ^= 0x80
            self.answered += 1
            was_lost, self._event = self._event, False
        self._send(self.cob_id, data)
        if was_lost:
            _logger.info("Life guarding: the master's guard requests are back")
            self._back()

    def tick(self, now: float) -> None:
        """Life guarding: called often (≥ 50 Hz)."""
        heartbeat_ms, guard_ms, factor = self._times()
        with self._lock:
            if heartbeat_ms or not guard_ms or not factor or self._last is None or self._event:
                return
            if now - self._last <= guard_ms * factor / 1000.0:
                return
            self._event = True
        _logger.warning("Life guarding event: no guard request for %d ms × %d", guard_ms, factor)
        self._lost()


class GuardListener(can.Listener):  # type: ignore[misc]
    """Remote frames on the guarding COB-ID, from the bus's notifier thread."""

    def __init__(self, guarding: Guarding) -> None:
        self.guarding = guarding

    def on_message_received(self, msg: can.Message) -> None:
        if msg.is_remote_frame and msg.arbitration_id == self.guarding.cob_id:
            self.guarding.request()

    def stop(self) -> None:
        """Nothing to release."""
