"""The system clock against the monotonic clock, read so that a preemption cannot skew the pair.

Loop times are ``time.monotonic``; timestamps on the bus are the system clock (plus the Cyphal synchronized time
offset). ``time.time() - time.monotonic()`` is off by however long the process was preempted between the two
reads — milliseconds on a loaded host, which is the whole arrival spread of a coordinated start. Reading the system
clock between two monotonic reads, and keeping the tightest of a few tries, bounds that error by the bracket.
"""

from __future__ import annotations

import time

_TIGHT_S = 20e-6
"""A bracket this narrow is taken at once [second]."""

_TRIES = 5


def system_minus_monotonic_s() -> float:
    """``time.time() − time.monotonic()`` [second], within the narrowest of a few monotonic brackets."""
    best_width, best = float("inf"), 0.0
    for _ in range(_TRIES):
        m0 = time.monotonic()
        wall = time.time()
        m1 = time.monotonic()
        if m1 - m0 < best_width:
            best_width, best = m1 - m0, wall - 0.5 * (m0 + m1)
        if best_width < _TIGHT_S:
            break
    return best
