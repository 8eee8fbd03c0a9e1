"""The ``servo-coord`` command line: options only; the work is in :mod:`._session` and :mod:`._path`.

Examples (the bus comes from the standard environment, as for yakut)::

    export UAVCAN__UDP__IFACE=127.0.0.1 UAVCAN__NODE__ID=120
    servo-coord move --axis 21:1021:1031 --axis 22:1022:1032 --to 1.5,-0.8 --hold 2
    servo-coord move --axes arm.toml --to 0.3,0.2,-1 --sync time
    servo-coord path --axes arm.toml --file path.csv
    servo-coord move --axes arm.toml --to 0.3,0.2,-1 --hold 0 --check-line 1   # exit 3 if the joints left the line

Every move is judged on the joints: their arrival spread and straight-line deviation from their own ``dynamics``
samples, beside the planned figures. Exit status: 0, or 100 (a move could not be made), 2 (bad arguments); with
``--check-line PCT``, 3 if a move's measured deviation exceeded PCT % of the stroke, 4 if it could not be judged
everywhere (samples lost: the output says where).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ._sync import Sync

EXIT_CODE_UNSUCCESSFUL = 100
"""Exit code of a move that could not be made (as yakut's)."""
EXIT_CODE_LINE = 3
"""``--check-line``: a move's (or segment's) measured straight-line deviation exceeded the threshold."""
EXIT_CODE_UNJUDGED = 4
"""``--check-line``: no deviation above the threshold was seen, but part of a move could not be judged (lost
samples)."""
VERDICT_CODES = {"ok": 0, "above": EXIT_CODE_LINE, "unjudged": EXIT_CODE_UNJUDGED}
FAILED = "failed"
"""The verdict of a move an axis did not make (REJECTED, STOPPED): exit :data:`EXIT_CODE_UNSUCCESSFUL`."""


def _parser() -> argparse.ArgumentParser:
    from ._session import START_LEAD_S
    from ._start import START_AUTO

    ap = argparse.ArgumentParser(prog="servo-coord", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    mv = sub.add_parser("move", help="move several servo nodes to their targets together")
    mv.add_argument("--axis", action="append", default=[], metavar="NODE_ID:SETPOINT_SUBJECT:DYNAMICS_SUBJECT",
                    help="one servo (repeatable, in the order of --to)")
    mv.add_argument("--axes", metavar="FILE", help="TOML file of [[axis]] name, node_id, setpoint, dynamics")
    mv.add_argument("--to", required=True, metavar="P1,P2,…", help="target positions, one per axis")
    mv.add_argument("--sync", choices=[s.value for s in Sync], default=Sync.PHASE.value,
                    help="phase: straight line in joint space (default); time: arrive together; none: each optimal")
    mv.add_argument("--hold", type=float, default=None, metavar="SECONDS",
                    help="keep publishing the final setpoints this long after the planned end (default: until Ctrl-C)")
    start = mv.add_mutually_exclusive_group()
    start.add_argument("--start", type=lambda x: x if x == START_AUTO else int(x), default=START_AUTO,
                       metavar="SUBJECT",
                       help="the servos' shared motion_start subject: every axis starts on one start message "
                            "(default: the subject every axis has in uavcan.sub.motion_start.id, if they share one)")
    start.add_argument("--no-start", dest="start", action="store_const", const=None,
                       help="no start message: each axis starts its plan at its setpoint's reception")
    mv.add_argument("--start-lead", type=float, default=START_LEAD_S, metavar="SECONDS",
                    help=f"how far ahead the start message names the start (default {START_LEAD_S:g})")
    _check_line(mv)
    mv.add_argument("-v", "--verbose", action="store_true")
    pa = sub.add_parser("path", help="move several servo nodes through waypoints, each segment a coordinated move")
    pa.add_argument("--axis", action="append", default=[], metavar="NODE_ID:SETPOINT_SUBJECT:DYNAMICS_SUBJECT",
                    help="one servo (repeatable, in the order of the path's columns)")
    pa.add_argument("--axes", metavar="FILE", help="TOML file of [[axis]] name, node_id, setpoint, dynamics")
    pa.add_argument("--file", required=True, metavar="CSV",
                    help="the path: a header (one column per axis, then any of dwell, sync, speed), a row per waypoint")
    pa.add_argument("--start", type=lambda x: x if x == START_AUTO else int(x), default=START_AUTO,
                    metavar="SUBJECT", help="the servos' shared motion_start subject (default: read from the axes)")
    pa.add_argument("--start-lead", type=float, default=START_LEAD_S, metavar="SECONDS",
                    help=f"how far ahead the first start message names the start (default {START_LEAD_S:g})")
    _check_line(pa)
    pa.add_argument("-v", "--verbose", action="store_true")
    return ap


def _check_line(parser: argparse.ArgumentParser) -> None:
    from ._joints import LINE_WARN

    parser.add_argument("--check-line", type=float, default=None, metavar="PCT",
                        help=f"exit {EXIT_CODE_LINE} if the joints' measured straight-line deviation exceeds PCT %% of "
                             f"the stroke (a warning above {LINE_WARN * 100:g} %% either way), {EXIT_CODE_UNJUDGED} if "
                             f"samples were lost where it would be judged")


def _percent(text: str | None) -> float | None:
    """``--check-line``'s PCT as a fraction (None: not given)."""
    if text is None:
        return None
    x = float(text)
    if not 0.0 < x < 100.0:
        raise ValueError(f"--check-line {text}: a percentage in (0, 100)")
    return x / 100.0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``servo-coord``."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    from cyphal_common.tasks import cancel_and_wait

    from ._axes import Axis, CoordError, load_axes, parse_axis
    from ._joints import LINE_WARN
    from ._session import Coordinator

    verdicts: list[str] = []  # One per move or segment: ok, above, unjudged (MoveResult.line_verdict).
    try:
        axes: list[Axis] = (load_axes(args.axes) if args.axes else []) + [parse_axis(a) for a in args.axis]
        check = _percent(args.check_line)
        work = _move(args, axes, verdicts) if args.command == "move" else _path(args, axes, verdicts)
    except (ValueError, OSError) as ex:
        print(f"servo-coord: {ex}", file=sys.stderr)
        return 2

    async def run() -> int:
        # SIGINT (Ctrl-C) and SIGTERM (`docker stop`) end the move or its hold: no more setpoints (every servo then
        # stops on its deadman), the node closed, exit 0. Handled here rather than by Python's KeyboardInterrupt:
        # started in a shell's background (`&`), a program inherits SIGINT ignored and would never end on it. The
        # work runs as a task of its own, ended by cancel_and_wait, which cancels again until it ends: a single
        # cancel can be lost on Python 3.11 (asyncio.wait_for inside a publication swallows one that meets its
        # completion), and a signal must not be.
        received: list[str] = []
        stop = asyncio.Event()

        def on_signal(signum: signal.Signals) -> None:
            received.append(signum.name)
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(signum, on_signal, signum)

        async def session() -> None:
            async with Coordinator(axes, start_subject=args.start, start_lead_s=args.start_lead,
                                   line_threshold=LINE_WARN if check is None else check) as coord:
                print(f"start: {coord.start_path}", flush=True)
                await work(coord)

        job = asyncio.create_task(session(), name="servo-coord")
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({job, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait([job, stopped])
        if stop.is_set():
            print(f"servo-coord: {received[0]}: stopped feeding the servos", file=sys.stderr)
            return _checked(check, verdicts)
        job.result()  # The work's own failure (CoordError) ends the program with it.
        return _checked(check, verdicts)

    try:
        return asyncio.run(run())
    except KeyboardInterrupt:  # Ctrl-C before the handlers above were installed.
        return 0
    except CoordError as ex:
        print(f"servo-coord: {ex}", file=sys.stderr)
        return EXIT_CODE_UNSUCCESSFUL


def _checked(check: float | None, verdicts: Sequence[str]) -> int:
    """The exit status: 100 if an axis did not make the move (rejected, stopped), else that of ``--check-line`` (0
    without it), the worst of the moves' verdicts."""
    if FAILED in verdicts:
        print("servo-coord: the move was not made: an axis rejected it or was stopped (above)", file=sys.stderr)
        return EXIT_CODE_UNSUCCESSFUL
    if check is None:
        return 0
    if "above" in verdicts:
        print(f"servo-coord: the joints left the straight line by more than {check * 100:g} % of the stroke",
              file=sys.stderr)
        return EXIT_CODE_LINE
    if "unjudged" in verdicts:
        print("servo-coord: the straight line could not be judged everywhere (samples lost)", file=sys.stderr)
        return EXIT_CODE_UNJUDGED
    return 0


def _move(args: argparse.Namespace, axes: Sequence[Any],
          verdicts: list[str]) -> Callable[[Any], Coroutine[Any, Any, Any]]:
    """``servo-coord move``: one coordinated move, its table, then the hold."""
    targets = [float(x) for x in args.to.split(",")]
    if not axes or len(targets) != len(axes):
        raise ValueError(f"{len(axes)} axes, {len(targets)} targets: give one target per axis")

    def sent(plan: Any) -> None:
        if plan.fallback:
            print(f"phase sync infeasible, using time sync: {plan.fallback}", flush=True)
        print(f"sent: {plan.summary}", flush=True)

    def result(r: Any) -> None:
        verdicts.append(FAILED if r.rejected or r.stopped else r.line_verdict)
        print(r.table(), flush=True)

    async def work(coord: Any) -> None:
        await coord.move(targets, args.sync, args.hold, on_sent=sent, on_result=result, record=True)

    return work


def _path(args: argparse.Namespace, axes: Sequence[Any],
          verdicts: list[str]) -> Callable[[Any], Coroutine[Any, Any, Any]]:
    """``servo-coord path``: the waypoints one segment after the other; a progress line on a terminal, a line per
    segment otherwise; a line per segment and the total at the end."""
    from ._path import load_path, run_path

    if not axes:
        raise ValueError("no axes: give --axes or --axis")
    waypoints = load_path(args.file, len(axes))
    tty = sys.stdout.isatty()
    shown = [0]

    def progress(k: int, elapsed: float, remaining: float) -> None:
        if tty:
            print(f"\rwaypoint {k} of {len(waypoints)}, {elapsed:6.2f} s elapsed, {remaining:6.2f} s left ", end="",
                  flush=True)
        elif k != shown[0]:
            shown[0] = k
            print(f"waypoint {k} of {len(waypoints)}: started {elapsed:.3f} s in", flush=True)

    async def work(coord: Any) -> None:
        t0 = time.perf_counter()
        results = await run_path(coord, waypoints, progress)
        took = time.perf_counter() - t0
        if tty:
            print()
        for r in results:
            print(r.line([ax.label for ax in coord.axes]), flush=True)
            verdicts.append(r.line_verdict)
        planned = sum(r.segment.duration + w.dwell_s for r, w in zip(results, waypoints, strict=True))
        print(f"path: {len(results)} waypoints reached in {took:.3f} s; planned segments and dwells {planned:.3f} s",
              flush=True)

    return work
