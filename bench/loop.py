"""Control-loop timing: period error at 1 kHz and 500 Hz, with and without 100 Hz setpoint traffic over UDP.

Runs a real servo node (embedded simulated drive, UDP on 127.0.0.1) in this process, and for the traffic cases
a second Cyphal node in this process publishing ``zubax.telega.ServoCommand`` at 100 Hz with a new target each
time (so every message re-plans). Reports the ticks, the lateness of each tick against its absolute deadline (none
without setpoints: the idle node ticks at 100 Hz and times no wake-up, ``control._kernel.idle``), the process CPU
use, and the latency from publishing a setpoint to the loop tick that starts the new plan (the first of the 40 from
idle, its thread woken by the command).

Usage: ``python bench/loop.py [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SUBJECT = 27


def _command_factory() -> Callable[[float], Any]:
    """``ServoCommand`` to a target position (generated types: imported once the DSDL is compiled)."""
    import zubax.physics.dynamics as dyn
    import zubax.physics.kinematics as kin
    import zubax.telega

    def command(target: float) -> zubax.telega.ServoCommand_1_0:
        return zubax.telega.ServoCommand_1_0(
            target=dyn.DoF2nd_1_0(kinematics=kin.DoF2nd_1_0(position=target, velocity=0.0), force=0.0)
        )

    return command


async def _case(rate_hz: int, traffic: bool, seconds: float, priority: int) -> dict[str, float]:
    import pycyphal.application
    import zubax.telega

    from servo_node.node import ServoNode

    _command = _command_factory()
    env = {
        "UAVCAN__UDP__IFACE": "127.0.0.1",
        "UAVCAN__NODE__ID": "120",
        "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SUBJECT),
        "SERVO__LOOP_RATE": str(rate_hz),
        "SERVO__DEADMAN_TIMEOUT": "2",
        "SERVO__LOOP_PRIORITY": str(priority),
    }
    servo = ServoNode(None, env)
    task = asyncio.create_task(servo.run())
    await asyncio.wait_for(servo.ready.wait(), 60)
    pub_node = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name="bench.publisher"),
        pycyphal.application.make_registry(None, {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": "121"}),
    )
    pub = pub_node.make_publisher(zubax.telega.ServoCommand_1_0, SUBJECT)
    pub_node.start()
    try:
        loop = servo.loop
        await asyncio.sleep(0.5)
        skip, ticks0 = int(loop.timing[-1]), loop.sample().ticks
        cpu0, wall0 = os.times(), time.monotonic()
        k = 0
        next_at = time.monotonic()
        while time.monotonic() - wall0 < seconds:
            if traffic:
                await pub.publish(_command(math.sin(k * 0.05)))
                k += 1
            next_at += 0.01
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        cpu1, wall1 = os.times(), time.monotonic()
        n = int(loop.timing[-1]) - skip  # Timed wake-ups: none while the node idles (control._kernel.idle).
        errors = loop.period_errors()[-n:] * 1e6 if n > 0 else np.full(1, math.nan)
        ticks = loop.sample().ticks - ticks0
        cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0) * 100

        latencies = []
        for i in range(40):
            seq = loop.sample().command_seq
            sent = time.monotonic()
            await pub.publish(_command(10.0 + i))
            while (s := loop.sample()).command_seq == seq or s.plan_start_s < sent:
                await asyncio.sleep(0.0002)
            latencies.append((s.plan_start_s - sent) * 1e6)
            await asyncio.sleep(0.02)
        return {
            "p50": float(np.percentile(errors, 50)),
            "p99": float(np.percentile(errors, 99)),
            "max": float(errors.max()),
            "ticks": ticks,
            "cpu": cpu,
            "lat50": float(np.percentile(latencies, 50)),
            "lat99": float(np.percentile(latencies, 99)),
        }
    finally:
        pub_node.close()
        servo.request_close()
        await task


async def _main(seconds: float) -> None:
    print(f"cyphal-servo control loop timing ({os.cpu_count()} cores, {seconds:g} s per case, UDP loopback)")
    hdr = f"{'prio':>4} {'rate':>6} {'setpoints':>10} {'ticks':>7} {'err p50 µs':>11} {'p99 µs':>8} {'max µs':>8}"
    print(hdr + f" {'CPU %':>6} {'sp→motion p50 µs':>17} {'p99 µs':>8}")
    cases = [(p, rate, traffic) for p in (0, 50) for rate in (1000, 500) for traffic in (False, True)]
    for priority, rate, traffic in cases:
        r = await _case(rate, traffic, seconds, priority)
        print(
            f"{priority or 'std':>4} {rate:>5}H {'100 Hz' if traffic else 'none':>10} {r['ticks']:>7.0f} "
            f"{r['p50']:>11.1f} {r['p99']:>8.1f} {r['max']:>8.1f} {r['cpu']:>6.1f} {r['lat50']:>17.0f} "
            f"{r['lat99']:>8.0f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    from cyphal_common import dsdl
    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()  # Before any kernel module loads its numba cache.
    dsdl.ensure_compiled()
    asyncio.run(_main(args.seconds))


if __name__ == "__main__":
    main()
