"""Short variant of the fuzzing campaign (300 batches; 2–5 min on a 2-core machine beside the rest of the suite, over
5 min on a slower day: its guard is :data:`GUARD_S`):
hypothesis batches of hostile datagrams at a real ``servo-node``.

See :mod:`tests.fuzz.campaign` for the inputs, the invariants and why hypothesis. The long variant (≥ 10⁶ inputs)
is ``bench/fuzz.py``. Inputs per second are printed (``pytest -s``) and asserted on nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.fuzz.campaign import Campaign, batches, campaign, dump

BATCH = 20
EXAMPLES = 300  # ≈ 6000 transfers, ≈ 7000 datagrams.
GUARD_S = 1200
"""pytest's timeout for the campaign: a guard against a hang, not a verdict on speed (ci37, two CPU hogs and a slower
host: the suite's default 300 s ended it mid-campaign)."""


pytestmark = pytest.mark.timeout(GUARD_S)


def test_fuzz_short(tmp_path: Path) -> None:
    # A node the host did not run for a while (this stream is not real-time: tests/conftest.py) is told from one
    # the input stalled by its CPU meanwhile (Campaign._check_heartbeats): only a stall fails.
    with campaign(tmp_path, tolerate_starvation=True) as c:
        try:
            run(c)
        except AssertionError:
            dump(c.recent, tmp_path / "failure-batches.json")  # Replay with tests.fuzz.campaign.replay().
            raise
        time.sleep(1.6)  # One more heartbeat window after the last input.
        c.check()
        print(json.dumps(c.report()))


def run(c: Campaign) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # No shrinking: the node keeps state, replays prove nothing.
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(batches(BATCH))
    def fuzz(batch: list[list[tuple[str, bytes]]]) -> None:
        c.send(batch)
        c.check()

    fuzz()
