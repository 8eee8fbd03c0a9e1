"""The cyclic garbage collector in a process with deadlines: what start-up made, out of its reach.

A running node, emulated drive or coordinator holds 100,000–170,000 objects from its start (modules, numba
dispatchers, pycyphal, the DSDL types). Each full collection scans them all holding the GIL: 105 ms in an idle servo
node, 0.2–0.5 s in a coordinator beside SCHED_FIFO nodes on two cores. Meanwhile nothing of the process's Python
runs: a coordinator's setpoint repetitions pause, and a node's deadman (0.5 s) stops a move that was never meant to
stop. Frozen, they are never scanned again; what the process makes later is collected as before.

The one full collection a process still makes, of the garbage there is, runs where nothing has a deadline yet
(before its threads start, or before a node says it is OPERATIONAL); the freeze, once up, is O(1).
"""

from __future__ import annotations

import gc


def collect_all() -> None:
    """Collect every garbage object, frozen ones included (a restarted node's old objects): one full collection,
    holding the GIL for as long, so where nothing has a deadline."""
    gc.unfreeze()
    gc.collect()


def freeze_alive() -> None:
    """Every object alive now out of the collector's reach (O(1)): call it once up."""
    gc.freeze()


def freeze_start_up_objects() -> None:
    """:func:`collect_all`, then :func:`freeze_alive`: for a process up with nothing yet to keep in time."""
    collect_all()
    freeze_alive()
