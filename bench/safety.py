"""Safety figures: the stop after a publisher dies mid-move, and the deadman under a setpoint flood.

1. **Publisher dies mid-move** (simulated loop clock, in-process, deterministic): random drives (force, inertia,
   friction, velocity or torque law) and random profiles (including ones beyond what the drive can do, clipped into
   the envelope); a publisher repeats its setpoint at 50 Hz and dies at a random moment of the move. Reported: time
   from the last setpoint to the release (deadman + stop + hold), residual |v| at release, drift in the 2 s after,
   and the margin to the bound computed up front — p50 / p99 / max over the cases.
2. **Flood** (real ``servo-node`` process, UDP on 127.0.0.1): one publisher sends setpoints as fast as it can for a
   few seconds, then stops. Reported: setpoints/s sent, how late the deadman expired after the last *sent* setpoint
   (beyond the timeout), and the node's RSS before and after.

Usage: ``python bench/safety.py [--cases 1000] [--flood-seconds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NODE_ID = 117
CLIENT_ID = 118
SUBJECT = 4017


def _stats(x: list[float]) -> str:
    a = np.asarray(x)
    return f"{np.percentile(a, 50):10.4g} {np.percentile(a, 99):10.4g} {a.max():10.4g}"


def publisher_dies(cases: int, seed: int) -> None:
    """Part 1: the stop after the publisher dies mid-move, on the simulated clock."""
    from servo_node.axis._config import loop_config, setpoint_floors
    from servo_node.control import ControlLoop
    from servo_node.drive import SimDrive
    from servo_node.drive.sim import joint_from_registers
    from servo_node.registers import ServoRegistry
    from servo_node.setpoint import ProfileLimits, Setpoint, interpret

    rng = random.Random(seed)
    took, residual, drift, margin = [], [], [], []
    refused = 0
    t0 = time.monotonic()
    for _ in range(cases):
        env = {
            "SIM__MAX_FORCE": f"{rng.uniform(20, 500):.6g}",
            "SIM__INERTIA": f"{rng.uniform(0.2, 5):.6g}",
            "SIM__STATIC_FRICTION": f"{rng.uniform(0, 2):.6g}",
            "SERVO__DRIVE__MODE": rng.choice(["velocity", "torque"]),
        }
        reg = ServoRegistry(None, env)
        cfg = loop_config(reg)
        loop = ControlLoop(cfg, SimDrive(joint_from_registers(reg)), clock="simulated")
        loop.start()
        v = rng.uniform(1, 100)
        a = rng.uniform(5, 400)
        sp = interpret(
            rng.uniform(-100, 100), 0.0, 0.0, (-v, v), (-a * rng.uniform(0.3, 3), a), rng.uniform(50, 5000),
            ProfileLimits(-10, 10, -50, 50, 500), 100.0, setpoint_floors(cfg.envelope),
        )  # fmt: skip
        if not isinstance(sp, Setpoint):
            refused += 1
            continue
        death = rng.uniform(0.05, 2.0)
        last_rx = 0.0
        while loop.now() < death:
            last_rx = loop.now()
            loop.command(sp, last_rx)
            loop.advance(0.02)
        bound = cfg.deadman_timeout_s + cfg.stop_bound_s()
        while loop.sample().engaged and loop.now() < last_rx + bound + 1.0:
            loop.advance(0.001)
        s = loop.sample()
        took.append(s.time_s - last_rx)
        residual.append(abs(s.velocity))
        margin.append(bound - (s.time_s - last_rx))
        p = s.position
        loop.advance(2.0)
        drift.append(abs(loop.sample().position - p))
        if s.engaged:
            print(f"NOT AT REST within the bound: {env} {sp}", file=sys.stderr)
    n = len(took)
    print(f"\n1. Publisher dies mid-move: {n} cases ({refused} setpoints refused by the floors), "
          f"simulated clock, {time.monotonic() - t0:.1f} s")  # fmt: skip
    print(f"{'':38} {'p50':>10} {'p99':>10} {'max':>10}")
    print(f"{'last setpoint → released [s]':38} {_stats(took)}")
    print(f"{'bound − that [s] (p50 / p1 / min > 0)':38} {np.percentile(margin, 50):10.4g} "
          f"{np.percentile(margin, 1):10.4g} {min(margin):10.4g}")  # fmt: skip
    print(f"{'|v| at release':38} {_stats(residual)}")
    print(f"{'drift in the 2 s after release':38} {_stats(drift)}")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _flood(seconds: float, env: dict[str, str]) -> tuple[int, float]:
    """Publish setpoints as fast as possible for ``seconds``; return (count, system-clock time of the last one)."""
    import pycyphal.application
    import zubax.physics.dynamics as dyn
    import zubax.physics.kinematics as kin
    import zubax.telega

    from cyphal_common.transport import make_transport

    reg = pycyphal.application.make_registry(None, {"UAVCAN__UDP__IFACE": env["UAVCAN__UDP__IFACE"],
                                                   "UAVCAN__NODE__ID": str(CLIENT_ID)})  # fmt: skip
    node = pycyphal.application.make_node(pycyphal.application.NodeInfo(name="bench.flood"), reg,
                                          transport=make_transport(reg))  # fmt: skip
    node.start()
    pub = node.make_publisher(zubax.telega.ServoCommand_1_0, SUBJECT)
    n = 0
    end = time.monotonic() + seconds
    last = 0.0
    try:
        while time.monotonic() < end:
            target = 1000.0 if n % 2 == 0 else 1000.5  # A new target each time: every one re-plans.
            msg = zubax.telega.ServoCommand_1_0(
                target=dyn.DoF2nd_1_0(kinematics=kin.DoF2nd_1_0(position=target, velocity=0.0), force=0.0)
            )
            await pub.publish(msg)
            last = time.time()
            n += 1
            if n % 64 == 0:
                await asyncio.sleep(0)
    finally:
        pub.close()
        node.close()
    return n, last


def flood(seconds: float) -> None:
    """Part 2: a setpoint flood at a real servo-node process."""
    from cyphal_common import dsdl

    env = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "SERVO__", "SIM__"))}
    env.update({"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(NODE_ID),
                "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SUBJECT), "CYPHAL_PATH": str(dsdl.dsdl_dir()),
                "PYCYPHAL_PATH": str(dsdl.ensure_compiled())})  # fmt: skip
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([str(bin_dir / "servo-node"), "run", "--registry", str(Path(tmp) / "r.db")], env=env,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            time.sleep(8.0)  # Start-up (kernels load from the cache).
            rss0 = _rss_kib(proc.pid)
            n, last = asyncio.run(_flood(seconds, env))
            time.sleep(2.0)
            rss1 = _rss_kib(proc.pid)
            status: dict[str, object] = {}
            answered = math.nan
            for client in range(CLIENT_ID + 1, CLIENT_ID + 60):  # A fresh node-ID per try (no transfer-ID clash).
                y_env = {**env, "UAVCAN__NODE__ID": str(client)}
                out = subprocess.run([str(bin_dir / "y"), "r", str(NODE_ID), "sys.status"], env=y_env,
                                     capture_output=True, text=True, timeout=30).stdout  # fmt: skip
                reply = json.loads(out) if out.strip() else None
                if reply:
                    status = json.loads(reply)["servo"]
                    answered = time.time() - last
                    break
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    expired_at = float(str(status.get("expired_at", math.nan)))

    deadman = 0.5
    print(f"\n2. Flood: one publisher for {seconds:g} s at a servo-node process (UDP 127.0.0.1)")
    print(f"{'setpoints sent':38} {n:10d}  ({n / seconds:.0f}/s)")
    late = expired_at - last - deadman
    print(f"{'deadman lateness after the last sent':38} {late:10.4f} s  (state {status.get('state')})")
    print(f"{'register answers again after':38} {answered:10.2f} s  after the last setpoint")
    print(f"{'RSS before → after':38} {rss0 / 1024:10.1f} → {rss1 / 1024:.1f} MiB")


def main() -> None:
    """Run both parts and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flood-seconds", type=float, default=5.0)
    args = ap.parse_args()
    from cyphal_common import dsdl
    from servo_node._kernel_cache import invalidate_if_sources_changed

    dsdl.ensure_compiled()
    invalidate_if_sources_changed()
    publisher_dies(args.cases, args.seed)
    flood(args.flood_seconds)


if __name__ == "__main__":
    main()
