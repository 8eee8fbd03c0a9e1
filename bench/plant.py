"""Speed of the simulated plant: steps per second and real-time factor at 1 kHz, plus compile/import times.

Run: ``.venv/bin/python bench/plant.py``.  Goals: one joint stepped from Python ≥ 500x real time, 1 000 joints
stepped together ≥ 50x real time, the coupled 3-DOF arm (``sim_plant.arm``, RK4: four evaluations of A, C, g per
step) stepped from Python ≥ 500x real time like the one joint it replaces three of.  The 1 000-joint cases are
shown serial (``step_joints``, what ``JointArray.step`` uses below ``PARALLEL_MIN_JOINTS``) and parallel
(``step_joints_parallel``, numba threads); on a shared machine run it several times.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numba
import numpy as np
from numba import njit

from sim_plant import Joint, JointArray, JointParams, arm
from sim_plant import _kernels as k
from sim_plant._joint import PARALLEL_MIN_JOINTS

DT_S = 1e-3  # control period of the real-time factor [s]

_FIRST_CALL = (
    "import time; t0 = time.perf_counter(); "
    "from sim_plant import Joint, JointParams; t1 = time.perf_counter(); "
    "Joint(JointParams()).step(1e-3); t2 = time.perf_counter(); print(t1 - t0, t2 - t1)"
)


def first_call_times(cache_dir: str) -> tuple[float, float]:
    """(import time, first Joint + step time) [s] in a fresh interpreter using the given numba cache directory."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True, check=True)
    a, b = out.stdout.split()
    return float(a), float(b)


def rate(step: Callable[[], None], min_seconds: float = 1.0, windows: int = 20) -> float:
    """Calls of step per second: the best of ``windows`` runs of ≥ min_seconds/windows each.

    Short windows, best taken: on a shared machine a window in which another process held the core says nothing
    about the code, and with twenty windows at least one usually runs undisturbed.
    """
    best = 0.0
    for _ in range(windows):
        n = 0
        batch = 10
        t0 = time.perf_counter()
        while True:
            for _ in range(batch):
                step()
            n += batch
            elapsed = time.perf_counter() - t0
            if elapsed >= min_seconds / windows:
                break
            batch *= 2
        best = max(best, n / elapsed)
    return best


@njit(nogil=True)
def _numba_loop(params: np.ndarray, state: np.ndarray, ticks: int) -> None:
    """What the servo node's control thread does each tick: command every joint, then step them all."""
    for n in range(ticks):
        for i in range(params.shape[0]):
            k.command_velocity(params, state, i, 1.0 if (n // 500) % 2 == 0 else -1.0)
        k.step_joints(params, state, DT_S)


def main() -> None:
    """Measure and print the table."""
    with tempfile.TemporaryDirectory() as cold:
        cold_import, cold_first = first_call_times(cold)
    warm_dir = os.environ.get("NUMBA_CACHE_DIR", "")
    warm_import, warm_first = first_call_times(warm_dir) if warm_dir else (0.0, 0.0)
    if not warm_dir:
        first_call_times(tempfile.gettempdir() + "/sim_plant_bench_cache")  # populate
        warm_import, warm_first = first_call_times(tempfile.gettempdir() + "/sim_plant_bench_cache")

    params = JointParams(spring_constant=5.0, damping_constant=0.2, static_friction=0.1, acceleration=50.0)
    one = Joint(params)
    one.set_position(1.0)
    one_rate = rate(lambda: one.step(DT_S))

    many = JointArray([params] * 1000)
    for i in range(1000):
        many.set_position(i, (i % 7) * 0.3 - 1.0)
    many_rate = rate(lambda: many.step(DT_S))  # serial lean loop (JointArray's choice below PARALLEL_MIN_JOINTS)

    par = JointArray([params] * 1000)
    for i in range(1000):
        par.set_position(i, (i % 7) * 0.3 - 1.0)
    par_rate = rate(lambda: k.step_joints_parallel(par.params, par.state, DT_S))

    loop = JointArray([params] * 1000)
    _numba_loop(loop.params, loop.state, 1)
    ticks = 1000  # the loop reverses the velocity every 500 ticks
    loop_rate = rate(lambda: _numba_loop(loop.params, loop.state, ticks)) * ticks

    def chains() -> JointArray:
        return JointArray(
            [params, JointParams(inertia=0.2, max_force=0.0, spring_constant=200.0, damping_constant=2.0)] * 500,
            parents=[-1 if i % 2 == 0 else i - 1 for i in range(1000)],
        )

    pairs = chains()
    pairs_rate = rate(lambda: pairs.step(DT_S))
    pairs_par = chains()
    pairs_par_rate = rate(lambda: k.step_joints_parallel(pairs_par.params, pairs_par.state, DT_S))

    arm_k = arm._constants(arm.ArmParams())
    arm_x = np.array([0.0, 0.5, 1.0, 0.5, 0.0, 0.0])
    arm_hold = np.array([0.2, -3.0, -1.0])  # a held torque (the drive's torque mode)
    arm_qd = np.zeros(3)
    arm._rk4_step(arm_k, arm_x, DT_S, -1, 0.0, 0.0, arm_qd, arm_hold)
    arm_rate = rate(lambda: arm._rk4_step(arm_k, arm_x, DT_S, -1, 0.0, 0.0, arm_qd, arm_hold))
    arm_n = 10_000  # simulate(): the computed-torque law evaluated at every RK4 stage, all in numba
    arm.simulate(arm.ArmParams(), "ct", [0.0] * 3, [0.0] * 3, [1.0] * 3, 0.01, DT_S)
    arm_loop_rate = rate(
        lambda: arm.simulate(arm.ArmParams(), "ct", [0.0] * 3, [0.0] * 3, [1.0] * 3, arm_n * DT_S, DT_S),
        windows=5,
    ) * arm_n

    threads = f"{numba.threading_layer()}, {numba.get_num_threads()} threads"
    rows = [
        ("1 joint, Joint.step(1 ms) from Python", one_rate, 1, 500.0),
        ("1000 joints, JointArray.step(1 ms) from Python (serial)", many_rate, 1000, 50.0),
        ("1000 joints, step_joints_parallel from Python", par_rate, 1000, 50.0),
        ("1000 joints, command+step_joints in a numba loop", loop_rate, 1000, 50.0),
        ("500 motor joints carrying 500 spring-dampers (serial)", pairs_rate, 1000, 50.0),
        ("500 motor joints + 500 spring-dampers, parallel", pairs_par_rate, 1000, 50.0),
        ("coupled 3-DOF arm, one RK4 step (1 ms) from Python", arm_rate, 3, 500.0),
        ("coupled 3-DOF arm, simulate() under computed torque", arm_loop_rate, 3, 500.0),
    ]
    print(f"{'case':<56} {'steps/s':>12} {'joint-steps/s':>14} {'x real time':>12} {'goal':>6}")
    for name, r, n, goal in rows:
        ok = "ok" if r * DT_S >= goal else "MISS"
        print(f"{name:<56} {r:>12,.0f} {r * n:>14,.0f} {r * DT_S:>12,.1f} {goal:>5.0f}x {ok}")
    print(f"parallel rows: numba {threads}; JointArray.step goes parallel from {PARALLEL_MIN_JOINTS} joints")
    print(f"coupled arm against one joint, both stepped from Python: {arm_rate / one_rate:.2f}x the steps per second")
    print()
    print(f"cold numba cache: import {cold_import:.2f} s, first Joint+step (compile) {cold_first:.2f} s")
    print(f"warm numba cache: import {warm_import:.2f} s, first Joint+step {warm_first:.3f} s")


if __name__ == "__main__":
    main()
