"""The cyclic garbage collector in a process with deadlines: what start-up made, out of its reach.

A running node, emulated drive or coordinator holds 100,000–170,000 objects from its start (modules, numba
dispatchers, pycyphal, the DSDL types). Each full collection scans them all holding the GIL: 105 ms in an idle servo
node, 0.2–0.5 s in a coordinator beside SCHED_FIFO nodes on two cores. Meanwhile nothing of the process's Python
runs: a coordinator's setpoint repetitions pause, and a node's deadman (0.5 s) stops a move that was never meant to
stop. Frozen, they are never scanned again; what the process makes later is collected as before.
"""

from __future__ import annotations

import gc


def freeze_start_up_objects() -> None:
    """Collect the garbage there is, then freeze every object alive (O(1)); call it once up, and again after a
    restart: what an earlier call froze is unfrozen first, so a restarted node's old objects are collected, not
    kept for good. The collection holds the GIL once, at start (about as long as one full collection did)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
