"""Lockstep by UDRAL group mode against one start message: the arrival spread of the same three-node move.

Three ``servo-node`` processes (embedded joints, the same limits) move by the same distance, over and over:

* **group**: every node subscribes to one ``reg.udral.service.actuator.common.sp.Vector31`` subject with its own
  index; one ``sp.Vector3`` message (and ENGAGED readiness) commands all three, each plans at its reception;
* **start**: the nodes share a ``motion_start`` subject; ``servo-coord``'s coordinator sends the three setpoints and
  one start message naming the instant every plan starts.

Per move the spread of t0 + T as the nodes report it (``sys.motion``); the same distance and limits make T equal, so
the spread is the start skew. Run it in a network namespace of its own. Usage: ``python bench/group.py [--moves 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NODES = (61, 62, 63)
GROUP, READINESS, START, COORD = 6100, 6101, 6102, 60
STEP = 0.5


def _env(k: int, mode: str) -> dict[str, str]:
    from tests.procs import base_env

    ports = ({"UAVCAN__SUB__SERVO__GROUP_SETPOINT__ID": str(GROUP), "UAVCAN__SUB__SERVO__READINESS__ID": str(READINESS),
              "SERVO__UDRAL__GROUP_INDEX": str(k)} if mode == "group" else
             {"UAVCAN__SUB__SETPOINT_SERVO__ID": str(6110 + k), "UAVCAN__SUB__MOTION_START__ID": str(START),
              "UAVCAN__PUB__DYNAMICS__ID": str(6120 + k), "SERVO__DYNAMICS_RATE": "100"})
    return base_env(UAVCAN__NODE__ID=str(NODES[k]), SERVO__DEADMAN_TIMEOUT="2", **ports)


def _spread(readers: list[Any]) -> float:
    plans = [json.loads(r.read("sys.motion"))["plan"] for r in readers]
    arrivals = [p["t0"] + p["T"] for p in plans]
    return max(arrivals) - min(arrivals)


async def _group_moves(moves: int, readers: list[Any]) -> list[float]:
    import pycyphal.application
    import reg.udral.service.actuator.common.sp as sp
    import reg.udral.service.common as common

    reg = pycyphal.application.make_registry(None, {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(COORD)})
    node = pycyphal.application.make_node(pycyphal.application.NodeInfo(name="bench.group"), reg)
    node.start()
    setpoints = node.make_publisher(sp.Vector3_0_1, GROUP)
    readiness = node.make_publisher(common.Readiness_0_1, READINESS)
    out = []
    try:
        target = 0.0
        for _ in range(moves):
            target = STEP - target  # 0.5, 0, 0.5, …: the same distance every move (float16-exact).
            for _ in range(int(0.9 / 0.05)):  # Hold it ~0.9 s: the move lasts ~0.4 s.
                await readiness.publish(common.Readiness_0_1(common.Readiness_0_1.ENGAGED))
                await setpoints.publish(sp.Vector3_0_1([target] * 3))
                await asyncio.sleep(0.05)
            out.append(_spread(readers))
    finally:
        node.close()
    return out


async def _start_moves(moves: int, readers: list[Any]) -> list[float]:
    from servo_node.coord._axes import Axis
    from servo_node.coord._session import Coordinator

    axes = [Axis(n, 6110 + k, 6120 + k, f"n{n}") for k, n in enumerate(NODES)]
    env = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(COORD)}
    out = []
    async with Coordinator(axes, env) as coord:
        target = 0.0
        for _ in range(moves):
            target = STEP - target
            await coord.move([target] * 3, "phase", hold_s=0.3)
            out.append(_spread(readers))
    return out


def _run(mode: str, moves: int, tmp: Path) -> list[float]:
    from tests.procs import RegisterClient, base_env, servo_node

    with ExitStack() as stack:
        for k, n in enumerate(NODES):
            stack.enter_context(servo_node(_env(k, mode), tmp / f"{mode}{n}.db", n))
        readers = [RegisterClient(base_env(), n, client_node_id=70 + k) for k, n in enumerate(NODES)]
        stack.callback(lambda: [r.close() for r in readers])
        return asyncio.run(_group_moves(moves, readers) if mode == "group" else _start_moves(moves, readers))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moves", type=int, default=30)
    args = ap.parse_args()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    print("| path | moves | arrival spread ms p50 / p99 / max |\n|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("group", "start"):
            ms = sorted(x * 1e3 for x in _run(mode, args.moves, Path(tmp)))
            p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
            print(f"| {mode} | {len(ms)} | {statistics.median(ms):.3f} / {p99:.3f} / {ms[-1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
