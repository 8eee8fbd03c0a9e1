"""Coordinated moves of separate ``servo-node`` processes (UDP on 127.0.0.1): arrival spread and straight line.

Six servo nodes (embedded simulated joints, random profile limits and inertias) run as processes; the
coordinator (``servo_node.coord.Coordinator``, in this process) moves the first 2, 3 or 6 of them to random
targets with ``phase``, ``time`` and ``none`` sync in turn. Per mode, over all moves:

* arrival spread: max − min over the moving axes of t0 + T, as the nodes report them (``sys.motion``);
* reference deviation: the straight-line deviation (max over time of the spread of normalised progress) of the
  nodes' own plans started at their reported t0 — what start skew alone does to the line;
* measured deviation: the same from the ``dynamics`` the coordinator records (``servo.dynamics_rate`` below);
* planning time per move (the coordinator's, float32 re-prediction included) and the burst time.

Under ``time`` and ``none`` the deviation is not meant to be small (they are not straight lines); it is shown
for comparison. Usage: ``python bench/coord.py [--moves 50] [--seed 1]`` (moves per mode).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NODE_IDS = [41, 42, 43, 44, 45, 46]
SETPOINT0, DYNAMICS0 = 5100, 5200
COORD_ID = 40
DYNAMICS_RATE_HZ = 250


def _start_nodes(rng: random.Random, tmp: Path) -> list[subprocess.Popen[bytes]]:
    from tests.procs import BIN, base_env

    procs = []
    for k, node_id in enumerate(NODE_IDS):
        v, a, j = rng.uniform(1.0, 4.0), rng.uniform(3.0, 10.0), rng.uniform(30.0, 300.0)
        env = base_env(
            UAVCAN__NODE__ID=str(node_id), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT0 + k),
            UAVCAN__PUB__DYNAMICS__ID=str(DYNAMICS0 + k), SERVO__DYNAMICS_RATE=str(DYNAMICS_RATE_HZ),
            SERVO__PROFILE__VELOCITY=f"{-v:.4g} {v:.4g}",
            SERVO__PROFILE__ACCELERATION=f"{-a * rng.uniform(0.7, 1.3):.4g} {a:.4g}",
            SERVO__PROFILE__JERK=f"{j:.4g}", SIM__INERTIA=f"{rng.uniform(0.3, 3.0):.3g}",
        )
        procs.append(subprocess.Popen([str(BIN / "servo-node"), "run", "--registry", str(tmp / f"{node_id}.db")],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def _stats(x: list[float], scale: float) -> str:
    a = np.asarray(x) * scale
    return f"{np.percentile(a, 50):9.3f} {np.percentile(a, 99):9.3f} {a.max():9.3f}"


async def _run(moves: int, seed: int) -> None:
    from servo_node.coord import Sync
    from servo_node.coord._logic import Axis, CoordError, Coordinator

    rng = random.Random(seed)
    axes = [Axis(n, SETPOINT0 + k, DYNAMICS0 + k) for k, n in enumerate(NODE_IDS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("UAVCAN__")}
    env.update(UAVCAN__UDP__IFACE="127.0.0.1", UAVCAN__NODE__ID=str(COORD_ID))
    coords = {n: Coordinator(axes[:n], env) for n in (2, 3, 6)}
    rows: dict[str, dict[str, list[float]]] = {s.value: {"spread": [], "ref": [], "meas": [], "plan": [],
                                                         "burst": [], "fallback": [], "rejected": []} for s in Sync}
    position = [0.0] * 6
    # One coordinator node on the bus at a time (they share the node-ID).
    for n, coord in coords.items():
        await coord.start()
        for k in range(moves):
            for sync in Sync:
                targets = [position[i] + rng.choice((-1, 1)) * rng.uniform(0.3, 2.0) for i in range(n)]
                try:
                    r = await coord.move(targets, sync, hold_s=0.0, record=True)
                except CoordError as ex:
                    print(f"move failed: {ex}")
                    continue
                row = rows[sync.value]
                if r.rejected:
                    row["rejected"].append(1.0)
                    continue
                position[:n] = targets
                row["spread"].append(r.spread)
                row["ref"].append(r.reference_deviation)
                row["meas"].append(r.deviation)
                row["plan"].append(r.planning_s)
                row["burst"].append(r.burst_s)
                row["fallback"].append(1.0 if r.plan.fallback else 0.0)
            print(f"{n} axes: {k + 1}/{moves} moves per mode", end="\r", flush=True)
        coord.close()
        await asyncio.sleep(0.5)
    print()
    print(f"{moves} moves per mode for each of 2, 3, 6 axes (UDP loopback, dynamics at {DYNAMICS_RATE_HZ} Hz)")
    print(f"{'sync':<6} {'spread ms p50/p99/max':>29} {'ref dev % p50/p99/max':>29} {'meas dev % p50/p99/max':>29} "
          f"{'plan ms p50/p99/max':>29} {'burst ms p50/p99/max':>29} {'phase fell back':>15} rejected")
    for name, row in rows.items():
        if not row["spread"]:
            continue
        fb = f"{100 * np.mean(row['fallback']):.0f} %" if name == "phase" else "-"
        print(f"{name:<6} {_stats(row['spread'], 1e3)} {_stats(row['ref'], 100)} {_stats(row['meas'], 100)} "
              f"{_stats(row['plan'], 1e3)} {_stats(row['burst'], 1e3)} {fb:>15} {len(row['rejected'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--moves", type=int, default=50, help="moves per mode and axis count")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        procs = _start_nodes(rng, Path(tmp))
        try:
            time.sleep(8.0)  # Nodes load their kernels; the first move waits for their dynamics anyway.
            asyncio.run(_run(args.moves, args.seed))
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)


if __name__ == "__main__":
    main()
