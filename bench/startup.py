"""Start-up time of ``servo-node run``: first heartbeat (INITIALIZATION) and first OPERATIONAL heartbeat.

Starts the real command several times (warm DSDL and numba caches after the first) and listens on UDP loopback.
Usage: ``python bench/startup.py [--runs 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BIN = Path(sys.executable).parent


async def _main(runs: int) -> None:
    import pycyphal.application
    import uavcan.node

    env0 = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": "100"}
    node = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name="bench.startup"), pycyphal.application.make_registry(None, env0)
    )
    sub = node.make_subscriber(uavcan.node.Heartbeat_1_0)
    node.start()
    print(f"{'run':>4} {'first heartbeat s':>18} {'operational s':>14}")
    try:
        for i in range(runs):
            nid = 101 + i  # A fresh node-ID per run: the receiver would drop a restarted node's repeated transfer-IDs.
            env = {k: v for k, v in os.environ.items() if not k.startswith("UAVCAN__")}
            env.update(UAVCAN__UDP__IFACE="127.0.0.1", UAVCAN__NODE__ID=str(nid))
            t0 = time.monotonic()
            proc = subprocess.Popen([str(BIN / "servo-node"), "run", "--registry", ":memory:"], env=env)
            first = operational = float("nan")
            while time.monotonic() - t0 < 60 and operational != operational:
                got = await sub.receive_for(1.0)
                if got is not None and got[1].source_node_id == nid:
                    now = time.monotonic() - t0
                    first = now if first != first else first
                    if got[0].mode.value == uavcan.node.Mode_1_0.OPERATIONAL:
                        operational = now
            proc.terminate()
            proc.wait()
            print(f"{i + 1:>4} {first:>18.2f} {operational:>14.2f}")
    finally:
        node.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()  # pycyphal.application imports the uavcan namespace.
    asyncio.run(_main(args.runs))


if __name__ == "__main__":
    main()
