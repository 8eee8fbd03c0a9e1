"""The long fuzzing campaign behind ``bench/fuzz.py`` (imported after the DSDL is compiled)."""


from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings

from tests.fuzz.campaign import NODE, Campaign, batches, campaign, dump
from tests.procs import RegisterClient, base_env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=1_000_000, help="datagrams to send (approximately)")
    ap.add_argument("--rate", type=float, default=3000.0, help="at most this many datagrams per second")
    ap.add_argument("--batch", type=int, default=20, help="transfers per hypothesis example")
    ap.add_argument("--every", type=int, default=50_000, help="progress line every N inputs")
    ap.add_argument("--rss-limit-mib", type=int, default=64, help="allowed RSS growth over the run")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument(
        "--strict-heartbeat",
        action="store_true",
        help="fail on any heartbeat gap > 1.5 s, also when the machine starved the node (< half a core meanwhile)",
    )
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="servo-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tolerate = not args.strict_heartbeat
    with campaign(workdir, args.rss_limit_mib * 1024, args.rate, tolerate_starvation=tolerate) as c:
        next_report = args.every
        t0 = time.monotonic()

        @settings(
            max_examples=10**9,
            deadline=None,
            database=None,
            phases=[Phase.generate],  # No shrinking: the node keeps state, replays prove nothing.
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )
        @given(batches(args.batch))
        def fuzz(batch: list[list[tuple[str, bytes]]]) -> None:
            nonlocal next_report
            if c.inputs >= args.inputs:
                return
            c.send(batch)
            c.check()
            if c.inputs >= next_report:
                next_report += args.every
                print(json.dumps(c.report()), flush=True)

        status = 0
        try:
            while c.inputs < args.inputs:  # hypothesis stops a run after its own limits; start another.
                fuzz()
        except AssertionError as ex:
            print(f"INVARIANT BROKEN after {c.inputs} inputs: {ex}", flush=True)
            dump(c.recent, workdir / "failure-batches.json")
            print(f"the last {len(c.recent)} batches: {workdir / 'failure-batches.json'}", flush=True)
            status = 1
        time.sleep(1.6)
        try:
            c.check()
        except AssertionError as ex:
            print(f"INVARIANT BROKEN at the end: {ex}", flush=True)
            status = 1
        final = c.report()
        final["wall_s"] = round(time.monotonic() - t0, 1)
        final["node_counters"] = _counters(c)
        final["log"] = str(c.node.log)
        print(json.dumps(final), flush=True)
        return status


def _counters(c: Campaign) -> object:
    """The node's own ``sys.counters`` at the end (accepted / rejected / ignored setpoints, refused writes…)."""
    try:
        reader = RegisterClient(base_env(), NODE, 2989)
        try:
            return reader.json("sys.counters")
        finally:
            reader.close()
    except Exception as ex:  # Reported, not fatal: the invariants above are the verdict.
        return f"unavailable: {ex}"


if __name__ == "__main__":  # pragma: no cover - run through bench/fuzz.py
    sys.exit(main())
