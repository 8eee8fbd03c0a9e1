"""The test run's timeline from its JUnit XML (``make test`` writes .venv/pytest.xml): per worker, when it started
and ended its tests and what it spent them on; the run's wall time is the latest end.

    .venv/bin/python -m tests.timeline [.venv/pytest.xml]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def main(path: str = ".venv/pytest.xml") -> None:
    """Print one line per worker and per xdist group (or module, for tests without a group)."""
    spans: dict[tuple[str, str], list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0])
    for case in ET.parse(path).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "started" not in props:
            continue
        start, took = float(props["started"] or 0), float(case.get("time") or 0)
        name = case.get("name") or ""
        part = "@" + name.rsplit("@", 1)[1] if "@" in name else case.get("classname") or ""
        for key in ((props.get("worker") or "-", "(all)"), (props.get("worker") or "-", part)):
            span = spans[key]
            span[0], span[1], span[2] = min(span[0], start), max(span[1], start + took), span[2] + took
    t0 = min(s[0] for s in spans.values())
    print(f"{'worker':8} {'from':>6} {'to':>6} {'tests':>7}  part")
    for (worker, part), (a, b, took) in sorted(spans.items(), key=lambda kv: (kv[0][0], kv[1][0])):
        if part == "(all)" or took >= 5:
            print(f"{worker:8} {a - t0:6.0f} {b - t0:6.0f} {took:7.1f}  {part}")


if __name__ == "__main__":
    main(*sys.argv[1:])
