"""Transfer-IDs that survive a restart: a short-lived publisher or client (a coordinator run again at once) starts
where its former self cannot have reached, so receivers do not drop its first transfers as repeats."""

from __future__ import annotations

import time
from typing import Any


def continue_after_restart(port: Any) -> None:
    """Start the transfer-IDs of ``port`` (a publisher, or a service client's requests) at the microseconds since the
    epoch.

    A receiver drops a transfer whose transfer-ID is not above the last one it saw from that source within its
    transfer-ID timeout (pycyphal: 2 s); a process restarted within that time starts again at 0, and its first
    seconds of transfers are lost (a coordinator's setpoint to a servo: a move silently not taken; its request to a
    server: never answered). The former process sent fewer transfers than microseconds passed since it started, so
    the clock is always ahead of it on UDP (64-bit transfer-IDs); on CAN (modulo 32) the value only spreads the
    start, and CAN's reassembler drops only the last transfer-ID it saw and the one before it.
    """
    port.transfer_id_counter.override(time.time_ns() // 1000)
