"""The machine's own timing floor: how late a loop that does nothing but sleep wakes up, at both priorities.

A numba loop sleeps to absolute 1 ms deadlines with the control loop's own clock (``control._clock``:
``clock_nanosleep`` on CLOCK_MONOTONIC, no GIL) and records each wake-up's lateness; nothing else runs in it. Its
figures bound what any loop on this machine can show: the node's tick lateness (``bench/scale.py``,
``bench/loop.py``) can be judged against them. Run it on an idle machine; SCHED_FIFO needs root (or
CAP_SYS_NICE), else that row says so.

Usage: ``python bench/floor.py [--seconds 60] [--priority 50]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PERIOD_NS = 1_000_000
"""The control loop's default period (1 kHz)."""


def _sleeper() -> Callable[[int, np.ndarray, np.ndarray], None]:
    """The compiled loop (made at the first call: no work at import)."""
    from numba import njit

    from servo_node.control._clock import monotonic_ns, sleep_until_ns

    @njit(nogil=True)
    def run(period_ns: int, timespec: np.ndarray, late: np.ndarray) -> None:
        t = monotonic_ns(timespec) + period_ns
        for i in range(late.size):
            sleep_until_ns(t, timespec)
            late[i] = monotonic_ns(timespec) - t
            t += period_ns

    return run


def measure(seconds: float, priority: int) -> dict[str, float] | str:
    """Wake-up lateness over ``seconds`` at SCHED_FIFO ``priority`` (0: the standard policy); or why not."""
    if priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except PermissionError:
            return "SCHED_FIFO not permitted"
    else:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    run = _sleeper()
    timespec = np.zeros(2, np.int64)
    run(PERIOD_NS, timespec, np.zeros(10, np.int64))  # Compiled and warm before the window.
    late = np.zeros(int(seconds * 1e9 / PERIOD_NS), np.int64)
    run(PERIOD_NS, timespec, late)
    us = late / 1000.0
    return {
        "p50": float(np.percentile(us, 50)),
        "p99": float(np.percentile(us, 99)),
        "max": float(us.max()),
        "over_1ms": float((us > 1000.0).sum()),
        "over_2ms": float((us > 2000.0).sum()),
        "lost": float((late // PERIOD_NS).sum()),  # Whole periods overslept: the ticks a 1 kHz loop loses.
        "n": float(us.size),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--priority", type=int, default=50, help="SCHED_FIFO priority of the second row")
    args = ap.parse_args()
    print(f"bare 1 kHz sleep loop, {args.seconds:.0f} s per row; load {os.getloadavg()[0]:.2f}")
    print(f"{'policy':>10} {'p50 µs':>8} {'p99 µs':>8} {'max µs':>8} {'>1 ms':>6} {'>2 ms':>6} {'lost':>6}")
    for priority in (0, args.priority):
        name = "standard" if priority == 0 else f"FIFO {priority}"
        r = measure(args.seconds, priority)
        if isinstance(r, str):
            print(f"{name:>10} {r}")
            continue
        print(f"{name:>10} {r['p50']:>8.0f} {r['p99']:>8.0f} {r['max']:>8.0f} {r['over_1ms']:>6.0f} "
              f"{r['over_2ms']:>6.0f} {r['lost']:>6.0f}")


if __name__ == "__main__":
    main()
