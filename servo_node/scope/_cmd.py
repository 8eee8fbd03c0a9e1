"""Record servo nodes' motion (their dynamics, limits and reference) to a CSV file and a figure.

Examples (the bus comes from the standard environment, as for yakut; a node-ID lets the scope read each node's
limits and reference)::

    export UAVCAN__UDP__IFACE=127.0.0.1 UAVCAN__NODE__ID=121
    servo-node scope --subject 30 --window 5 -o move.csv --plot move.png
    servo-node scope --subject 3401:shoulder --subject 3402:elbow -o arm.csv --plot arm.svg   # until Ctrl-C

(Options only here: the recording is :mod:`._record`, the files :mod:`._trace` and :mod:`._plot`.)
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

EXIT_NOTHING_RECORDED = 3


def _subject(text: str) -> tuple[int, str]:
    sid, _, label = text.partition(":")
    if not sid.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not SUBJECT_ID[:LABEL]")
    return int(sid), label


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="servo-node scope", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subject", type=_subject, action="append", required=True, metavar="SUBJECT_ID[:LABEL]",
                    help="a dynamics subject to record (repeatable)")
    ap.add_argument("--window", type=float, default=None, metavar="SECONDS",
                    help="record this long of the nodes' own time, as their samples are stamped "
                         "(default: until Ctrl-C)")
    ap.add_argument("-o", "--output", default="scope.csv", help="CSV file [default scope.csv]")
    ap.add_argument("--plot", default=None, metavar="FILE.png|FILE.svg",
                    help="also draw the figure (needs matplotlib: the 'plot' extra)")
    ap.add_argument("--poll-rate", type=float, default=10.0, metavar="HZ",
                    help="reads of sys.motion (reference) and sys.status (active limits) per node and second; 0: off")
    ap.add_argument("--title", default="", help="figure title")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Record, write the CSV (and the figure); exit 0, or 2 on bad options, 3 if nothing arrived."""
    args = _parser().parse_args(argv)
    if args.window is not None and not args.window > 0.0:
        print("servo-node scope: --window must be > 0", file=sys.stderr)
        return 2
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    from ._plot import PlotUnavailableError, render
    from ._record import ScopeError, ScopeRecorder
    from ._trace import write_csv

    async def run() -> ScopeRecorder:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with ScopeRecorder(args.subject, poll_hz=args.poll_rate) as rec:
            if rec.anonymous:
                print("servo-node scope: no UAVCAN__NODE__ID: recording dynamics only (no limits, no reference)",
                      file=sys.stderr)
            print(f"recording {', '.join(str(s) for s, _ in args.subject)}"
                  + (f" for {args.window:g} s" if args.window else " until Ctrl-C"), flush=True)
            await rec.record(args.window, stop)
        return rec

    try:
        rec = asyncio.run(run())
    except ScopeError as ex:
        print(f"servo-node scope: {ex}", file=sys.stderr)
        return 2
    trace = rec.trace
    rows = write_csv(trace, args.output)
    print(f"wrote {args.output}: {rows} rows, {trace.samples()} dynamics samples of {len(trace.axes)} axes "
          f"({', '.join(trace.axes)})", flush=True)
    if not trace.samples():
        print("servo-node scope: no dynamics arrived: are the subject-IDs and servo.dynamics_rate set?",
              file=sys.stderr)
        return EXIT_NOTHING_RECORDED
    if args.plot:
        try:
            panels = render(trace, args.plot, args.title)
        except PlotUnavailableError as ex:
            print(f"servo-node scope: {ex}", file=sys.stderr)
            return 0
        print(f"wrote {args.plot}: {len(panels)} panels ({', '.join(panels)})", flush=True)
    return 0
