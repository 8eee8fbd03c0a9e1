"""The trace: every measured sample at the ``dynamics`` rate, in loop time, kept for the node to publish.

The node's event loop publishes ``dynamics``; sampling the loop's latest output when it gets round to it, a node
whose event loop was late (a busy host, a burst of work) left out every sample of the stall, and on a stepped clock
(which catches up in bursts) whole stretches of the motion. The tick instead writes a sample into a ring whenever
one is due in loop time (:func:`record`); the node publishes every entry it has not published yet, each stamped
with its own time (:func:`read_since`), so the ``dynamics`` stream is the joint's motion at its rate, late at
worst, and a gap in it is a gap in the loop's own ticks (or more than :data:`~._layout.TRACE_N` samples behind).

One writer (the loop), lock-free readers: an entry is written before the count that includes it (a release fence),
and a reader keeps only the entries the count says were not overwritten while it copied them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import tick_jit
from .._seqlock import _fence
from . import _layout as L
from ._layout import LoopArrays


@tick_jit
def record(now: float, A: LoopArrays) -> None:
    """Append this tick's measured sample to the trace if one is due (every ``K_TRACE_PERIOD`` of loop time)."""
    period = A.cfg[L.K_TRACE_PERIOD]
    st = A.st
    if not period > 0.0 or now < st[L.ST_TRACE_NEXT] - 0.5 * A.cfg[L.K_PERIOD]:
        return
    due = st[L.ST_TRACE_NEXT] + period
    st[L.ST_TRACE_NEXT] = due if due > now else now + period  # After a stall: due again a period from now.
    out = A.out
    if out[L.O_MEASURED] != 1.0:
        return  # No fresh, trusted measurement: nothing to say (dynamics carries measurements only).
    tr = A.trace
    n = int(tr[L.TRACE_COUNT])
    k = L.TRACE_HEAD + (n % L.TRACE_N) * L.TR_N
    tr[k + L.TR_T] = now
    tr[k + L.TR_P] = out[L.O_P]
    tr[k + L.TR_V] = out[L.O_V]
    tr[k + L.TR_A] = out[L.O_A]
    tr[k + L.TR_F] = out[L.O_F]
    _fence("release")
    tr[L.TRACE_COUNT] = n + 1


@njit(cache=True, nogil=True)
def read_since(trace: np.ndarray, since: int, dst: np.ndarray) -> tuple[int, int]:
    """Copy the entries from ``since`` on into ``dst`` (float64[TRACE_N, TR_N], oldest first).

    :returns: (index of the first entry copied, number copied): the first is later than ``since`` when the loop
        overwrote entries before they were read (lost), the count at most ``dst``'s rows.
    """
    n = int(trace[L.TRACE_COUNT])
    _fence("acquire")
    first = max(since, n - L.TRACE_N)
    count = min(n - first, dst.shape[0])
    for i in range(count):
        k = L.TRACE_HEAD + ((first + i) % L.TRACE_N) * L.TR_N
        for f in range(L.TR_N):
            dst[i, f] = trace[k + f]
    _fence("acquire")
    valid_from = int(trace[L.TRACE_COUNT]) - L.TRACE_N  # Entries before this were overwritten while copied.
    if valid_from > first:
        drop = min(valid_from - first, count)
        for i in range(count - drop):
            for f in range(L.TR_N):
                dst[i, f] = dst[i + drop, f]
        first += drop
        count -= drop
    return first, count
