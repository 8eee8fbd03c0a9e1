"""Coordinated moves of separate ``servo-node`` processes: arrival spread and straight line, over UDP or udpmc CAN.

Six servo nodes (``--nodes``; embedded simulated joints, random profile limits and inertias) run as processes; the
coordinator (``servo_node.coord.Coordinator``, in this process) moves 2, 3 or 6 of them to random
targets with ``phase``, ``time`` and ``none`` sync in turn. Per axis count and mode, over all moves:

* planned arrival spread: max − min over the moving axes of t0 + T, as the nodes report them (``sys.motion``; a
  node starts a setpoint's plan at its reception, or with ``--start`` at the instant one start message on the
  nodes' shared ``motion_start`` subject names, :mod:`servo_node.staging`);
* joint arrival spread: what the joints did, from their own ``dynamics`` samples and stamps
  (``servo_node.coord._joints``): max − min of each axis's last entry into ±0.1 % of its stroke;
* planned deviation: the straight-line deviation (max over time of the spread of normalised progress) of the
  nodes' own plans started at their reported t0 — what start skew alone does to the line;
* joint deviation: the same of the joints, from their samples (``servo.dynamics_rate`` below); moves where samples
  were lost (stretches not judged) are counted apart (``lost``), their judged figures kept;
* planning time per move (the coordinator's, float32 re-prediction included) and the burst time.

Each move takes a random subset of the six nodes (random limits and inertias each) in random order. The nodes run
the real (monotonic) loop clock; ``--realtime`` runs them under SCHED_FIFO (as a deployment runs motion processes:
``servo.loop_priority``; root only) and this process just below, so that the host's other work does not hold the
loops up. The load average is printed with the table.

Under ``time`` and ``none`` the deviation is not meant to be small (they are not straight lines); it is shown
for comparison. Run it in a network namespace of its own (multicast reaches every local listener). Usage:
``python bench/coord.py [--moves 50] [--seed 1] [--transport udp|udpmc] [--nodes 6] [--axes 2,3,6]
[--sync phase,time,none] [--start] [--realtime] [--logs DIR]`` (moves per mode and axis count). First, without
processes, the straight-line table: on random rest-to-rest moves with different limits, how often phase sync leaves
the straight line (ours: never from rest; Ruckig's: where the limiting axis's profile scaled onto another passes its
limits) and what the line costs over time sync (``--line-only``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NODE_IDS = [41, 42, 43, 44, 45, 46]
SETPOINT0, DYNAMICS0 = 5100, 5200
COORD_ID = 40
START = 5300
"""The nodes' shared ``motion_start`` subject (``--start``)."""
MOVE_TIMEOUT_S = 60.0
"""A move that has not finished by then is reported as hung (with where it waits) and counted."""
DYNAMICS_RATE_HZ = 250


def _bus(transport: str) -> dict[str, str]:
    """``UAVCAN__*`` of the bus: UDP on loopback, or CAN FD over a udpmc group (this project's CAN media)."""
    if transport == "udp":
        return {"UAVCAN__UDP__IFACE": "127.0.0.1"}
    return {"UAVCAN__CAN__IFACE": "udpmc:239.65.43.21:47011", "UAVCAN__CAN__MTU": "64"}


def _start_nodes(rng: random.Random, tmp: Path, bus: dict[str, str], start: bool,
                 nodes: int, logs: Path | None) -> list[subprocess.Popen[bytes]]:
    from tests.procs import BIN, base_env

    procs = []
    for k, node_id in enumerate(NODE_IDS[:nodes]):
        v, a, j = rng.uniform(1.0, 4.0), rng.uniform(3.0, 10.0), rng.uniform(30.0, 300.0)
        env = base_env(
            UAVCAN__NODE__ID=str(node_id), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT0 + k),
            UAVCAN__PUB__DYNAMICS__ID=str(DYNAMICS0 + k), SERVO__DYNAMICS_RATE=str(DYNAMICS_RATE_HZ),
            SERVO__PROFILE__VELOCITY=f"{-v:.4g} {v:.4g}",
            SERVO__PROFILE__ACCELERATION=f"{-a * rng.uniform(0.7, 1.3):.4g} {a:.4g}",
            SERVO__PROFILE__JERK=f"{j:.4g}", SIM__INERTIA=f"{rng.uniform(0.3, 3.0):.3g}", **bus,
        )
        if start:
            env["UAVCAN__SUB__MOTION_START__ID"] = str(START)
        if "UAVCAN__CAN__IFACE" in bus:
            env.pop("UAVCAN__UDP__IFACE", None)
        procs.append(subprocess.Popen([str(BIN / "servo-node"), *(["-v"] if logs else []), "run", "--registry",
                                      str(tmp / f"{node_id}.db")],
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=(logs / f"{node_id}.log").open("wb") if logs else subprocess.DEVNULL))
    return procs


def _realtime(pids: list[int]) -> None:
    """Every thread of the nodes ``pids`` under SCHED_FIFO 10 and this process under 5, as ``tests/procs.py`` runs a
    timing scenario. Call it once the nodes are up: a FIFO thread compiling would hold a core, and a thread started
    later would not be covered."""
    from tests.procs import realtime, scenario_realtime

    if not all([realtime(pid) for pid in pids]) or not scenario_realtime(True):
        print("SCHED_FIFO not permitted (root only): the nodes run at normal priority", file=sys.stderr)


def _stats(x: list[float], scale: float) -> str:
    a = np.asarray(x) * scale
    a = a[np.isfinite(a)]
    if not a.size:
        return f"{'-':>9} {'-':>9} {'-':>9}"
    return f"{np.percentile(a, 50):9.3f} {np.percentile(a, 99):9.3f} {a.max():9.3f}"


Rows = dict[str, list[float]]


def _new_row() -> Rows:
    keys = ("spread", "mspread", "ref", "meas", "plan", "burst", "fallback", "rejected", "stopped", "hung", "lost")
    return {k: [] for k in keys}


def _awaiting(task: asyncio.Task[Any]) -> str:
    """Where a task waits: the chain of coroutine frames."""
    where: list[str] = []
    c: Any = task.get_coro()
    while c is not None:
        frame = getattr(c, "cr_frame", None) or getattr(c, "gi_frame", None)
        if frame is not None:
            where.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        c = getattr(c, "cr_await", None) or getattr(c, "gi_yieldfrom", None)
    return " → ".join(where)


async def wait_ready(coord: Any, n: int, timeout: float = 180.0) -> None:
    """Until every node answers a register read (a loaded host starts six nodes slowly)."""
    from servo_node.coord._axes import CoordError

    deadline = time.monotonic() + timeout
    while True:
        try:
            await asyncio.gather(*(coord.limits(i) for i in range(n)))
            return
        except CoordError:
            if time.monotonic() > deadline:
                raise


async def _run(
    moves: int, seed: int, counts: list[int], bus: dict[str, str], start: bool, syncs: list[str],
    realtime_pids: list[int], nodes: int,
) -> dict[tuple[int, str], Rows]:
    from servo_node.coord import Sync
    from servo_node.coord._axes import Axis, CoordError
    from servo_node.coord._session import Coordinator

    rng = random.Random(seed)
    axes = [Axis(n, SETPOINT0 + k, DYNAMICS0 + k) for k, n in enumerate(NODE_IDS[:nodes])]
    env = {k: v for k, v in os.environ.items() if not k.startswith("UAVCAN__")}
    env.update(bus, UAVCAN__NODE__ID=str(COORD_ID))
    rows = {(n, s): _new_row() for n in counts for s in syncs}
    position = [0.0] * nodes
    ready = Coordinator(axes, env, start_subject=START if start else None)
    await ready.start()
    await wait_ready(ready, len(axes))  # Every node up (and its kernels loaded) before any goes real-time.
    ready.close()
    if realtime_pids:
        _realtime(realtime_pids)
    # One coordinator node on the bus at a time (they share the node-ID).
    for n in counts:
        for k in range(moves):
            chosen = rng.sample(range(len(axes)), n)  # A random subset, in random order: other limits and inertias.
            coord = Coordinator([axes[i] for i in chosen], env, start_subject=START if start else None)
            await coord.start()
            await wait_ready(coord, n)
            for sync in map(Sync, syncs):
                targets = [position[i] + rng.choice((-1, 1)) * rng.uniform(0.3, 2.0) for i in chosen]
                task = asyncio.create_task(coord.move(targets, sync, hold_s=0.0, record=True))
                await asyncio.wait({task}, timeout=MOVE_TIMEOUT_S)
                if not task.done():
                    print(f"move to {targets} ({sync.value}) hung: {_awaiting(task)}", file=sys.stderr)
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    rows[n, sync.value]["hung"].append(1.0)
                    continue
                try:
                    r = task.result()
                except CoordError as ex:
                    print(f"move failed: {ex}", file=sys.stderr)
                    continue
                # A phase move that fell back to time sync is no straight line: it gets a row of its own.
                row = rows.setdefault((n, "p>time"), _new_row()) if r.plan.fallback else rows[n, sync.value]
                for i, a in zip(chosen, r.axes, strict=True):
                    position[i] = a.final
                if r.rejected or r.stopped:
                    row["rejected" if r.rejected else "stopped"].append(1.0)
                    print(r.table(), file=sys.stderr)
                    await _print_node_views(coord, n)
                    continue
                row["spread"].append(r.spread)
                row["mspread"].append(r.measured_spread)
                row["ref"].append(r.reference_deviation)
                row["meas"].append(r.deviation)
                row["plan"].append(r.planning_s)
                row["burst"].append(r.burst_s)
                row["fallback"].append(1.0 if r.plan.fallback else 0.0)
                if r.joints is not None and r.joints.lost:
                    row["lost"].append(1.0)
            coord.close()
            print(f"{n} axes: {k + 1}/{moves} moves per mode", end="\r", file=sys.stderr, flush=True)
        await asyncio.sleep(0.5)
    print(file=sys.stderr)
    if start:
        print(await _path_row(rng, axes[:3], env), flush=True)
    return rows


async def _print_node_views(coord: Any, n: int) -> None:
    """What each node of a move that went wrong says of itself: its motion (the last stop among it), counters,
    events and timing."""
    from servo_node.coord._axes import CoordError

    for i in range(n):
        try:
            views = [await coord.read_register(i, f"sys.{name}") for name in ("motion", "counters", "events", "timing")]
        except CoordError as ex:
            views = [str(ex)]
        print(f"{coord.axes[i].label}: " + " ".join(views), file=sys.stderr)


async def _path_row(rng: random.Random, axes: list[Any], env: dict[str, str], waypoints: int = 6) -> str:
    """A path of random waypoints over three axes (servo-coord path): every segment on one start message, the next
    staged while the current runs; planned against taken time, spreads and line deviations."""
    from servo_node.coord._path import PathRunner, Waypoint
    from servo_node.coord._session import Coordinator

    points = [Waypoint(tuple(rng.uniform(-2.0, 2.0) for _ in axes)) for _ in range(waypoints)]
    async with Coordinator(axes, env, start_subject=START) as coord:
        t0 = time.perf_counter()
        results = await PathRunner(coord, points).run()
        took = time.perf_counter() - t0
    planned = sum(r.segment.duration for r in results)
    spreads = [r.spread * 1e3 for r in results]
    devs = [r.deviation * 100 for r in results]
    return (f"path ({len(axes)} axes, {waypoints} random waypoints, start message each): planned {planned:.3f} s, "
            f"taken {took:.3f} s (+{took - planned:.3f} s: the first start's lead, the last settle, the runner's "
            f"set-up); spread max {max(spreads):.3f} ms; line deviation max {max(devs):.3f} %; waited "
            f"{sum(r.waited_s for r in results) * 1e3:.0f} ms")


def _table(rows: dict[tuple[int, str], Rows], title: str) -> str:
    lines = [title, f"{'axes':<4} {'sync':<6} {'n':>3} {'planned spread ms p50/p99/max':>29} "
             f"{'joint spread ms p50/p99/max':>29} {'planned dev % p50/p99/max':>29} "
             f"{'joint dev % p50/p99/max':>29} {'plan ms p50/p99/max':>29} "
             f"{'burst ms p50/p99/max':>29} {'fell back':>9} {'lost':>5} {'rej/stop/hung':>13}",
             "(p>time: phase asked, infeasible, time sync used instead)"]
    groups: dict[tuple[str, str], Rows] = {}
    for (n, sync), row in rows.items():
        groups[str(n), sync] = row
    for sync in dict.fromkeys(s for _, s in rows):
        total = _new_row()
        for (_, s), row in rows.items():
            if s == sync:
                for key, values in row.items():
                    total[key] += values
        groups["all", sync] = total
    for (n_label, sync), row in groups.items():
        if not row["spread"]:
            continue
        fb = f"{len(row['fallback'])}" if sync == "p>time" else "-"
        lines.append(f"{n_label:<4} {sync:<6} {len(row['spread']):>3} {_stats(row['spread'], 1e3)} "
                     f"{_stats(row['mspread'], 1e3)} {_stats(row['ref'], 100)} {_stats(row['meas'], 100)} "
                     f"{_stats(row['plan'], 1e3)} {_stats(row['burst'], 1e3)} {fb:>9} {len(row['lost']):>5} "
                     f"{len(row['rejected']):>5}/{len(row['stopped'])}/{len(row['hung'])}")
    return "\n".join(lines)


def line_table(seed: int, moves: int) -> str:
    """Phase sync on random rest-to-rest moves of 2–6 axes with different limits, ours against Ruckig's on the
    same moves: how often each leaves the straight line, and what the straight line costs over time sync."""
    import ruckig

    from servo_node.coord import AxisMotion, Sync, normalised_progress, synchronize
    from servo_node.setpoint import ProfileLimits

    rng = random.Random(seed)
    curved = ours_fallback = 0
    stretch = []
    for _ in range(moves):
        n = rng.choice((2, 3, 4, 6))
        axes = []
        for _ in range(n):
            v, a, j = rng.uniform(0.5, 20.0), rng.uniform(1.0, 100.0), rng.uniform(5.0, 2000.0)
            p0, d = rng.uniform(-5.0, 5.0), rng.choice((-1.0, 1.0)) * 10 ** rng.uniform(-1.0, 1.3)
            axes.append(AxisMotion(p0, 0.0, 0.0, p0 + d, ProfileLimits(-v, v, -a, a, j)))
        sp = synchronize(axes, Sync.PHASE)
        ours_fallback += sp.used is not Sync.PHASE
        stretch.append(sp.stretch)
        otg, inp, traj = ruckig.Ruckig(n), ruckig.InputParameter(n), ruckig.Trajectory(n)
        inp.current_position, inp.target_position = [ax.p0 for ax in axes], [ax.target for ax in axes]
        inp.max_velocity = [ax.limits.v_max for ax in axes]
        inp.max_acceleration = [ax.limits.a_max for ax in axes]
        inp.max_jerk = [ax.limits.j_max for ax in axes]
        inp.synchronization = ruckig.Synchronization.Phase
        otg.calculate(inp, traj)
        worst = 0.0
        for t in np.linspace(0.0, traj.duration, 101):
            pos = traj.at_time(t)[0]
            s = [normalised_progress(pos[i], ax.p0, ax.target) for i, ax in enumerate(axes)]
            worst = max(worst, max(s) - min(s))
        curved += worst > 1e-7
    st = np.array(stretch)
    return (f"straight line ({moves} random rest-to-rest moves of 2-6 axes, different limits, seed {seed}): phase "
            f"sync left the line in {ours_fallback} (ours) vs {curved} (Ruckig's phase sync); "
            f"line duration over time sync p50 {np.percentile(st, 50):.3f}x, p99 {np.percentile(st, 99):.3f}x, "
            f"max {st.max():.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--moves", type=int, default=50, help="moves per mode and axis count")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--transport", choices=("udp", "udpmc"), default="udp",
                    help="UDP on 127.0.0.1, or CAN FD over a udpmc group")
    ap.add_argument("--axes", default="2,3,6", help="axis counts to run (comma-separated, each ≤ --nodes)")
    ap.add_argument("--nodes", type=int, default=len(NODE_IDS), choices=range(2, len(NODE_IDS) + 1),
                    help="servo nodes on the bus, each publishing its dynamics (a move takes a random subset)")
    ap.add_argument("--start", action="store_true", help="start every move on one start message (motion_start)")
    ap.add_argument("--sync", default="phase,time,none", help="sync modes to run (comma-separated)")
    ap.add_argument("--logs", type=Path, help="a directory for the nodes' logs at INFO (<node-ID>.log; default: none)")
    ap.add_argument("--realtime", action="store_true",
                    help="the nodes under SCHED_FIFO 10, this process under 5 (as a deployment; root only)")
    ap.add_argument("--line-moves", type=int, default=500, help="random moves of the straight-line table")
    ap.add_argument("--line-only", action="store_true", help="only the straight-line table (no processes)")
    args = ap.parse_args()
    print(line_table(args.seed, args.line_moves), flush=True)
    if args.line_only:
        return
    counts = [int(x) for x in args.axes.split(",")]
    if max(counts) > args.nodes:
        ap.error(f"--axes {args.axes}: more axes than --nodes {args.nodes}")
    from servo_node._kernel_cache import invalidate_if_sources_changed
    from servo_node.coord._session import START_LEAD_S

    invalidate_if_sources_changed()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    rng = random.Random(args.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # Through the finally below: the nodes end too.
    with tempfile.TemporaryDirectory() as tmp:
        bus = _bus(args.transport)
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
        procs = _start_nodes(rng, Path(tmp), bus, args.start, args.nodes, args.logs)
        try:
            load_before = os.getloadavg()
            rows = asyncio.run(_run(args.moves, args.seed, counts, bus, args.start, args.sync.split(","),
                                    [p.pid for p in procs] if args.realtime else [], args.nodes))
            how = f"one start message, lead {START_LEAD_S * 1e3:g} ms" if args.start else "each at its setpoint"
            rt = "nodes SCHED_FIFO" if args.realtime else "nodes at normal priority"
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(_table(rows, f"{args.moves} moves per mode and axis count ({args.transport}, {args.nodes} nodes, "
                               f"{how}, {rt}, dynamics "
                               f"at {DYNAMICS_RATE_HZ} Hz, {os.cpu_count()} cores, load average {load} at the end, "
                               f"{load_before[0]:.1f} at the start); spreads: t0 + T as reported, and the joints' "
                               f"(from their samples)"))
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)


if __name__ == "__main__":
    main()
