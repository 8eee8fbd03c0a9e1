"""Long variant of the fuzzing campaign: ≥ 10⁶ hostile inputs at a real ``servo-node`` (see tests/fuzz/campaign.py).

Usage (inside a private network namespace, at low priority)::

    nice -n 19 python bench/fuzz.py --inputs 1000000 [--rate 3000] [--batch 20] [--workdir DIR]

Prints a JSON progress line every ``--every`` inputs and a final one: inputs, seconds, inputs/s, the largest
heartbeat gap, RSS at start and its maximum, and the node's ``sys.counters``. Exits 1 with the invariant that broke
and the last 50 batches sent before it (``failure-batches.json`` in the work directory; send them again with
``tests.fuzz.campaign.replay``) if one does. The heartbeat-gap message says how much CPU the node used meanwhile:
a stalled node burns CPU, one starved by the machine (nice 19 on shared cores) does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    """Compile the DSDL, then run the campaign (its modules import generated types)."""
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    from tests.fuzz.long_run import main as run

    return run()


if __name__ == "__main__":
    raise SystemExit(main())
