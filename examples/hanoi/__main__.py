"""``python -m examples.hanoi``: solve the Tower of Hanoi with five servo nodes on Cyphal/UDP and verify every move.

Exit codes: 0 solved and verified; 1 a check failed (the arm was stopped); 2 the task is impossible (nothing
moved) or bad options; 130 interrupted (Ctrl-C: the arm was stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .cell import Cell, Segment, TaskPlan, plan_task
from .joints import Bus, launched
from .kinematics import UnreachableError
from .tower import PLATFORMS

MAX_BOXES = 8
"""2^8 − 1 = 255 moves (about an hour); more is refused."""


FIXED_SUBJECTS = {7168, 7509, 7510, 8165, 8166, 8184}
"""Standard fixed subject-IDs (time synchronization, heartbeat, port list, plug-and-play, diagnostics): a setpoint,
start or dynamics subject on one of them would share it with those messages (a run on 7500.. put its start on the
heartbeat's 7509)."""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m examples.hanoi", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boxes", type=int, default=3, help="number of boxes, 1..%(default)s… [default 3]")
    ap.add_argument("--figure", default="hanoi.png", help="figure of the run (PNG/SVG; '' for none) [hanoi.png]")
    ap.add_argument("--csv", default="", help="also write the recorded dynamics as CSV (servo-node scope format)")
    ap.add_argument("--iface", default="127.0.0.1", help="UDP interface of the bus [127.0.0.1]")
    ap.add_argument("--node-id", type=int, default=61,
                    help="node-ID of the base; the other joints follow, the program's own nodes after them [61]")
    ap.add_argument("--subject", type=int, default=6100,
                    help="setpoint subject of the base (+k per joint); dynamics subjects start 10 above [6100]")
    ap.add_argument("--plant", choices=("joints", "arm"), default="joints",
                    help="joints: five independent embedded joints; arm: base, shoulder and elbow on the coupled arm "
                    "plant (sim-plant --arm, gravity and coupling) as UDRAL drives [joints]")
    ap.add_argument("--fk-tolerance", type=float, default=1.0, metavar="MM",
                    help="largest FK error of the grip point after a move [1 mm]")
    ap.add_argument("--clearance", type=float, default=40.0, metavar="MM",
                    help="height of a carried box over a full stack while travelling [40 mm]")
    ap.add_argument("--node-log", default="", help="append the nodes' output to this file")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def _describe(plan: TaskPlan) -> str:
    moves = " ".join(f"{PLATFORMS[s]}→{PLATFORMS[d]}" for s, d in plan.moves)
    return (f"{plan.boxes} boxes: {len(plan.moves)} moves ({moves}), {len(plan.segments)} coordinated segments; "
            f"all poses reachable, travel clearance ≥ {plan.min_travel_clearance * 1e3:.1f} mm, vertical wander "
            f"≤ {plan.max_vertical_wander * 1e3:.1f} mm")


def _dump_tasks() -> None:
    for task in asyncio.all_tasks():
        task.print_stack(limit=6, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: where is it stuck?
    if not 1 <= args.boxes <= MAX_BOXES:
        print(f"hanoi: --boxes must be 1..{MAX_BOXES} (2^N − 1 moves)", file=sys.stderr)
        return 2
    taken = sorted(set(range(args.subject, args.subject + 15)) & FIXED_SUBJECTS)
    if taken or not 0 <= args.subject <= 8191 - 14:
        print(f"hanoi: --subject {args.subject}: its subjects {args.subject}..{args.subject + 14} must lie in 0..8191 "
              f"and leave out the standard ones the nodes publish ({', '.join(map(str, taken)) or 'none'} taken)",
              file=sys.stderr)
        return 2
    cell = Cell(clearance=args.clearance * 1e-3)
    try:
        plan = plan_task(args.boxes, cell)
    except UnreachableError as ex:
        print(f"hanoi: {args.boxes} boxes cannot be done with this arm, nothing moved: {ex}", file=sys.stderr)
        return 2
    print(_describe(plan), flush=True)

    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    bus = Bus(iface=args.iface, node_id=args.node_id, subject=args.subject)
    with tempfile.TemporaryDirectory(prefix="hanoi-") as tmp:
        with launched(bus, plan.home, Path(tmp), cell.arm, Path(args.node_log) if args.node_log else None,
                      plant=args.plant):
            return asyncio.run(_run(args, bus, cell, plan))


async def _run(args: argparse.Namespace, bus: Bus, cell: Cell, plan: TaskPlan) -> int:
    from servo_node.scope import PlotUnavailableError, write_csv

    from .run import ArmRun, RunReport, VerificationError

    main_task = asyncio.current_task()
    assert main_task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, main_task.cancel)
    loop.add_signal_handler(signal.SIGUSR2, _dump_tasks)  # `kill -USR2 <pid>`: what is every task waiting for?

    def progress(seg: Segment, report: RunReport) -> None:
        if seg.kind == "place":
            print(f"move {seg.move + 1}/{len(plan.moves)}: box {seg.box} {PLATFORMS[seg.src]} → {PLATFORMS[seg.dst]} "
                  f"placed at level {seg.level}, FK error {report.placements[-1] * 1e3:.3f} mm", flush=True)

    code = 0
    run = ArmRun(bus, cell.arm, fk_tolerance=args.fk_tolerance * 1e-3)
    t_start = time.monotonic()
    try:
        async with run:
            await run.wait_for_nodes(180.0)
            await run.prepare()
            await run.wait_ready(60.0)
            print(f"five nodes up ({args.plant} plant) after {time.monotonic() - t_start:.1f} s", flush=True)
            report = await run.execute(plan, progress)
            print(report.summary(), flush=True)
    except VerificationError as ex:
        print(f"hanoi: STOPPED: {ex}", file=sys.stderr, flush=True)
        code = 1
    except asyncio.CancelledError:
        print("hanoi: interrupted; the joints stop on their own", file=sys.stderr, flush=True)
        code = 130
    if args.csv:
        write_csv(run.trace, args.csv)
        print(f"wrote {args.csv}", flush=True)
    if args.figure and run.trace.samples():
        from .figure import render

        title = (f"Tower of Hanoi, {plan.boxes} boxes: {len(plan.moves)} moves, {len(plan.segments)} coordinated "
                 f"segments over five servo-node processes, {args.plant} plant" + ("" if code == 0 else " (STOPPED)"))
        try:
            render(run.trace, cell, plan.boxes, args.figure, title)
            print(f"wrote {args.figure}", flush=True)
        except PlotUnavailableError as ex:
            print(f"hanoi: no figure: {ex}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
