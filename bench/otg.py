"""Speed of our OTG against Ruckig on the same random problem set (one process), plus compile/start times.

Prints per-call p50/p99 (µs) from Python for both (ours through the reusable ``Planner`` object against
Ruckig's ``calculate()``, through the bare ``fast_plan_into()`` entry point, and for reference through the
``plan_into`` dispatcher and the convenience ``plan()``), the per-call cost inside
numba (symmetric and asymmetric problems), batch throughput (problems/s) against Ruckig in a Python loop,
and numba compile / warm-cache start times (also without scipy: numba imports scipy.linalg for its BLAS
check when scipy is installed, and scipy is not a dependency of this project).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from numba import njit

from servo_node._kernel_cache import invalidate_if_sources_changed

if __name__ == "__main__":
    invalidate_if_sources_changed()  # before the kernel modules below load their numba caches

from servo_node.otg import PROFILE_SIZE, Planner, fast_plan_into, plan, plan_batch, plan_into

N = 20_000


def problems(seed: int, n: int) -> np.ndarray:
    """Random symmetric-limit problems with starts inside the limits, columns in plan() argument order."""
    rng = np.random.default_rng(seed)
    lg = lambda lo, hi: 10.0 ** rng.uniform(np.log10(lo), np.log10(hi), n)  # noqa: E731
    v_max, a_max, j_max = lg(1e-2, 1e3), lg(1e-2, 1e3), lg(1e-2, 1e3)
    v_min = -v_max
    p0 = rng.uniform(-1, 1, n) * lg(1e-3, 1e3)
    pt = p0 + rng.uniform(-1, 1, n) * lg(1e-3, 1e3)
    v0 = rng.uniform(-1, 1, n) * v_max * (rng.random(n) < 0.7)
    a0 = rng.uniform(-1, 1, n) * a_max * (rng.random(n) < 0.7)
    a0 = np.clip(a0, -np.sqrt(2 * j_max * (v0 - v_min)), np.sqrt(2 * j_max * (v_max - v0)))
    vt = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0, 1, n) * v_max) * np.sign(pt - p0)
    return np.stack([p0, v0, a0, pt, vt, v_min, v_max, -a_max, a_max, j_max], axis=1)


def ruckig_inputs(rows: np.ndarray) -> list[object]:
    """One prepared Ruckig InputParameter per problem."""
    from ruckig import InputParameter

    out = []
    for r in rows:
        inp = InputParameter(1)
        inp.current_position, inp.current_velocity, inp.current_acceleration = [r[0]], [r[1]], [r[2]]
        inp.target_position, inp.target_velocity, inp.target_acceleration = [r[3]], [r[4]], [0.0]
        inp.min_velocity, inp.max_velocity = [r[5]], [r[6]]
        inp.min_acceleration, inp.max_acceleration, inp.max_jerk = [r[7]], [r[8]], [r[9]]
        out.append(inp)
    return out


@njit(cache=False, nogil=True)
def _plan_all(rows, profile) -> float:  # type: ignore[no-untyped-def]
    """Plan every row inside numba (the control loop's view of the per-call cost); not cached: numba checks only
    this file, so a cached copy would keep running the planner it was compiled with after an edit of ``otg``."""
    acc = 0.0
    for i in range(rows.shape[0]):
        r = rows[i]
        plan_into(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], profile)
        acc += profile[3]
    return acc


def per_call_ours(rows: np.ndarray, fast: bool = True) -> np.ndarray:
    """Wall time of each plan from Python into a caller-owned profile: fast_plan_into() or the dispatcher."""
    prof = np.zeros(PROFILE_SIZE)
    lst = rows.tolist()
    times = np.empty(len(lst))
    clock = time.perf_counter_ns
    f = fast_plan_into() if fast else plan_into
    for i, r in enumerate(lst):
        t0 = clock()
        f(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], prof)
        times[i] = clock() - t0
    return times / 1e3


def per_call_planner(rows: np.ndarray) -> np.ndarray:
    """Wall time of each ``Planner.plan`` call (the reusable planner object, Ruckig's calculate() counterpart)."""
    planner = Planner()
    lst = rows.tolist()
    times = np.empty(len(lst))
    clock = time.perf_counter_ns
    plan = planner.plan
    for i, r in enumerate(lst):
        t0 = clock()
        plan(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9])
        times[i] = clock() - t0
    return times / 1e3


def per_call_plan(rows: np.ndarray) -> np.ndarray:
    """Wall time of each convenience ``plan()`` call (allocates a profile and a Trajectory per call)."""
    lst = rows.tolist()
    times = np.empty(len(lst))
    clock = time.perf_counter_ns
    for i, r in enumerate(lst):
        t0 = clock()
        plan(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9])
        times[i] = clock() - t0
    return times / 1e3


def per_call_ruckig(inputs: list[object]) -> np.ndarray:
    """Wall time of each Ruckig calculate() call (inputs prepared beforehand)."""
    from ruckig import Ruckig, Trajectory

    otg = Ruckig(1)
    traj = Trajectory(1)
    times = np.empty(len(inputs))
    clock = time.perf_counter_ns
    for i, inp in enumerate(inputs):
        t0 = clock()
        try:
            otg.calculate(inp, traj)
        except Exception:
            pass
        times[i] = clock() - t0
    return times / 1e3


def ruckig_loop_throughput(rows: np.ndarray) -> float:
    """Problems/s for Ruckig solving the set in a Python loop (filling inputs and calculating)."""
    from ruckig import InputParameter, Ruckig, Trajectory

    otg = Ruckig(1)
    traj = Trajectory(1)
    inp = InputParameter(1)
    t0 = time.perf_counter()
    for r in rows.tolist():
        inp.current_position, inp.current_velocity, inp.current_acceleration = [r[0]], [r[1]], [r[2]]
        inp.target_position, inp.target_velocity, inp.target_acceleration = [r[3]], [r[4]], [0.0]
        inp.min_velocity, inp.max_velocity = [r[5]], [r[6]]
        inp.min_acceleration, inp.max_acceleration, inp.max_jerk = [r[7]], [r[8]], [r[9]]
        try:
            otg.calculate(inp, traj)
        except Exception:
            pass
    return rows.shape[0] / (time.perf_counter() - t0)


_NO_SCIPY = ("import sys, importlib.abc\n"
             "class _B(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path, target=None):\n"
             "        if name == 'scipy' or name.startswith('scipy.'): raise ImportError(name)\n"
             "sys.meta_path.insert(0, _B())\n")


def start_time(cache_dir: str, no_scipy: bool = False) -> float:
    """Seconds for a fresh process to import the package and plan once, with the given numba cache dir."""
    code = ((_NO_SCIPY if no_scipy else "")
            + "import time; t=time.perf_counter(); from servo_node.otg import plan; plan(0,0,0,1,0,-1,1,-1,1,1); "
            "print(time.perf_counter()-t)")
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    """Run every measurement and print the table."""
    rows = problems(1, N)
    inputs = ruckig_inputs(rows)
    per_call_ours(rows[:200])
    _plan_all(rows[:10], np.zeros(PROFILE_SIZE))
    # interleaved in chunks so that load from other processes on a shared machine hits all three alike
    per_call_planner(rows[:200])
    per_call_plan(rows[:200])
    parts: tuple[list[np.ndarray], ...] = ([], [], [], [], [])
    for k in range(0, N, N // 40):
        sl = slice(k, k + N // 40)
        parts[0].append(per_call_ours(rows[sl]))
        parts[1].append(per_call_ruckig(inputs[sl]))
        parts[2].append(per_call_ours(rows[sl], fast=False))
        parts[3].append(per_call_planner(rows[sl]))
        parts[4].append(per_call_plan(rows[sl]))
    ours, theirs, ours_dispatch, ours_planner, ours_plan = (np.concatenate(x) for x in parts)
    prof = np.zeros(PROFILE_SIZE)
    t0 = time.perf_counter()
    _plan_all(rows, prof)
    in_numba = (time.perf_counter() - t0) / N * 1e6
    asym = rows.copy()
    asym[:, 7] *= 10.0 ** np.random.default_rng(2).uniform(-0.7, 0.7, N)  # |a_min| != a_max
    asym[:, 2] = np.clip(asym[:, 2], asym[:, 7], asym[:, 8]) * 0.5
    t0 = time.perf_counter()
    _plan_all(asym, prof)
    in_numba_asym = (time.perf_counter() - t0) / N * 1e6
    cols = [np.ascontiguousarray(rows[:, k]) for k in range(10)]
    plan_batch(*(c[:100] for c in cols))
    reused = plan_batch(*cols)
    t_batch = t_reused = 0.0
    loop_rates = []
    for r in range(5):  # interleaved with Ruckig's loop (a fifth of the set each round), as above
        t0 = time.perf_counter()
        plan_batch(*cols)
        t_batch += time.perf_counter() - t0
        t0 = time.perf_counter()
        plan_batch(*cols, out=reused)
        t_reused += time.perf_counter() - t0
        loop_rates.append(ruckig_loop_throughput(rows[r * N // 5:(r + 1) * N // 5]))
    batch, batch_reused = 5 * N / t_batch, 5 * N / t_reused
    loop = N / sum(N / 5 / x for x in loop_rates)
    with tempfile.TemporaryDirectory() as cold:
        compile_s = start_time(cold)
        warm_s = start_time(cold)
        warm_ns = start_time(cold, no_scipy=True)
    p50o, p99o = np.percentile(ours, [50, 99])
    p50r, p99r = np.percentile(theirs, [50, 99])
    print(f"OTG bench: {N} random symmetric problems (inside starts), {os.cpu_count()} CPUs, numba batch in parallel")
    print(f"{'metric':44s} {'ours':>12s} {'ruckig':>12s} {'ours/ruckig':>12s}")
    p50d = float(np.percentile(ours_dispatch, 50))
    p50p, p99p = np.percentile(ours_planner, [50, 99])
    print(f"{'Planner.plan vs calculate() p50 [us]':44s} {p50p:12.2f} {p50r:12.2f} {p50p / p50r:12.2f}")
    print(f"{'Planner.plan vs calculate() p99 [us]':44s} {p99p:12.2f} {p99r:12.2f} {p99p / p99r:12.2f}")
    print(f"{'per call p50 from Python, fast_plan_into [us]':44s} {p50o:12.2f} {p50r:12.2f} {p50o / p50r:12.2f}")
    print(f"{'per call p99 from Python, fast_plan_into [us]':44s} {p99o:12.2f} {p99r:12.2f} {p99o / p99r:12.2f}")
    print(f"{'  (p50 via the plan_into dispatcher) [us]':44s} {p50d:12.2f} {p50r:12.2f} {p50d / p50r:12.2f}")
    p50c = float(np.percentile(ours_plan, 50))
    print(f"{'  (p50 of the convenience plan()) [us]':44s} {p50c:12.2f} {p50r:12.2f} {p50c / p50r:12.2f}")
    print(f"{'per call mean inside numba [us]':44s} {in_numba:12.2f} {'-':>12s} {'-':>12s}")
    print(f"{'  asymmetric limits (rule-aware plan) [us]':44s} {in_numba_asym:12.2f} {'-':>12s} {'-':>12s}")
    print(f"{'batch throughput, arrays reused [problems/s]':44s} {batch_reused:12.0f} {loop:12.0f} "
          f"{batch_reused / loop:12.1f}")
    print(f"{'  (into new arrays every call) [problems/s]':44s} {batch:12.0f} {loop:12.0f} {batch / loop:12.1f}")
    print(f"{'numba compile (cold cache) + first plan [s]':44s} {compile_s:12.2f}")
    print(f"{'warm-cache start: import + first plan [s]':44s} {warm_s:12.2f}")
    print(f"{'  same without scipy installed [s]':44s} {warm_ns:12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
