"""Many axes in one node: CPU, tick lateness and start-up time for 1, 8, 16, 32 and 48 axes.

For each axis count and each loop priority (standard, and ``servo.loop_priority`` 50 where the OS permits it):

* **start**: ``servo-node run`` as a process, from its launch to its first OPERATIONAL heartbeat (warm caches;
  the fastest of ``--starts`` launches);
* **idle**: the node (in this process, embedded simulated joints at 1 kHz, UDP on 127.0.0.1) without setpoints:
  process CPU [% of one core];
* **100 Hz**: a publisher in another process sends every axis a ``zubax.telega.ServoCommand`` with a new target
  at 100 Hz (each one re-plans): process CPU, the lateness of each wake-up of the control thread against its
  absolute deadline (p50, p99, max), and the ticks lost (the ticks short of ``rate × window`` over every axis);
  ``rx Hz`` is the setpoints each axis took per second (below 100: the publisher or the node fell behind).

The machine's other load shows in every number: read each row with its 1-minute load average (last column). Run it in
a network namespace of its own (``docs/testing.md``). Usage:
``python bench/scale.py [--axes 1 8 16 32 48] [--seconds 5] [--starts 2] [--windows 1]`` (``--windows K``: the
100 Hz CPU is the median of K windows in a row, their range printed last: single windows of 8 axes swing by a
quarter); ``--bare N``: pycyphal alone receiving the
same traffic for N axes (its CPU per message; ``--in-loop``: its sessions read by the event loop, as the node's are,
instead of pycyphal's thread per session); ``--publish N`` is the publisher.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NODE, PUBLISHER, LISTENER = 120, 121, 122
SUBJECT0 = 1000
"""Axis ``k`` takes its setpoints on subject ``SUBJECT0 + k``."""
RATE_HZ = 1000.0
BIN = Path(sys.executable).parent


def _env(axes: int, priority: int) -> dict[str, str]:
    env = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(NODE)}
    names = [f"j{k}" for k in range(axes)]
    env["SERVO__AXES"] = " ".join(names)
    for k, name in enumerate(names):
        up = name.upper()
        env[f"UAVCAN__SUB__{up}__SETPOINT_SERVO__ID"] = str(SUBJECT0 + k)
        env[f"{up}__SERVO__LOOP_RATE"] = str(RATE_HZ)
        env[f"{up}__SERVO__DEADMAN_TIMEOUT"] = "2"
        env[f"{up}__SERVO__LOOP_PRIORITY"] = str(priority)
    return env


async def _publish(axes: int) -> None:
    """The publisher process: a new target for every axis at 100 Hz until killed."""
    import pycyphal.application
    import zubax.physics.dynamics as dyn
    import zubax.physics.kinematics as kin
    import zubax.telega

    node = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name="bench.scale.publisher"),
        pycyphal.application.make_registry(None, {"UAVCAN__UDP__IFACE": "127.0.0.1",
                                                  "UAVCAN__NODE__ID": str(PUBLISHER)}),
    )
    pubs = [node.make_publisher(zubax.telega.ServoCommand_1_0, SUBJECT0 + k) for k in range(axes)]
    node.start()
    k = 0
    next_at = time.monotonic()
    while True:
        target = math.sin(k * 0.05)
        for p in pubs:
            await p.publish(zubax.telega.ServoCommand_1_0(
                target=dyn.DoF2nd_1_0(kinematics=kin.DoF2nd_1_0(position=target, velocity=0.0), force=0.0)))
        k += 1
        next_at += 0.01
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def _bare(axes: int, seconds: float, in_loop: bool = False) -> None:
    """pycyphal's own cost per setpoint: a plain node receives the same traffic on raw input sessions (as the servo's
    intake does) and only deserialises it. Prints the CPU per message.

    ``in_loop``: the same sessions read by the event loop, as the node's transports read them
    (``cyphal_common/transport/_udp_reception.py``); without it, pycyphal 1.27's own reader thread per session,
    which hands each frame to the loop."""
    import pycyphal.application
    import zubax.telega

    if in_loop:
        from cyphal_common.transport import _udp_reception

        _udp_reception.install()
    node = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name="bench.scale.bare"),
        pycyphal.application.make_registry(None, {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(NODE)}),
    )
    node.start()
    transport = node.presentation.transport
    extent = pycyphal.dsdl.get_extent_bytes(zubax.telega.ServoCommand_1_0)
    count = [0]

    async def receive(subject_id: int) -> None:
        session = transport.get_input_session(
            pycyphal.transport.InputSessionSpecifier(pycyphal.transport.MessageDataSpecifier(subject_id), None),
            pycyphal.transport.PayloadMetadata(extent))
        loop = asyncio.get_running_loop()
        while True:
            t = await session.receive(loop.time() + 1.0)
            if t is not None and pycyphal.dsdl.deserialize(zubax.telega.ServoCommand_1_0, t.fragmented_payload):
                count[0] += 1

    tasks = [asyncio.create_task(receive(SUBJECT0 + k)) for k in range(axes)]
    publisher = subprocess.Popen([sys.executable, __file__, "--publish", str(axes)])
    try:
        deadline = time.monotonic() + 60.0  # The publisher's start-up (imports); a silent one is an error, not a hang.
        while count[0] < axes:
            if publisher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no setpoints received ({count[0]} messages in 60 s)")
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        cpu0, wall0, n0 = _cpu_s(), time.monotonic(), count[0]
        await asyncio.sleep(seconds)
        wall = time.monotonic() - wall0
        cpu, rate = (_cpu_s() - cpu0) / wall, (count[0] - n0) / wall
        how = "read by the event loop" if in_loop else "pycyphal's reader threads"
        print(f"bare pycyphal ({how}), {axes} subjects: {rate:.0f} messages/s, {cpu * 100:.1f} % CPU, "
              f"{cpu / rate * 1e6:.0f} µs CPU per message (load {os.getloadavg()[0]:.1f})")
    finally:
        publisher.kill()
        publisher.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        node.close()


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


async def _run_case(axes: int, priority: int, seconds: float, windows: int = 1) -> dict[str, Any]:
    from servo_node.node import ServoNode

    servo = ServoNode(None, _env(axes, priority))
    task = asyncio.create_task(servo.run())
    await asyncio.wait_for(servo.ready.wait(), 120)
    publisher: subprocess.Popen[bytes] | None = None
    try:
        thread = servo.control_thread
        assert thread is not None
        await asyncio.sleep(1.0)
        cpu0, wall0 = _cpu_s(), time.monotonic()
        await asyncio.sleep(seconds)
        idle = (_cpu_s() - cpu0) / (time.monotonic() - wall0) * 100

        publisher = subprocess.Popen([sys.executable, __file__, "--publish", str(axes)])
        deadline = time.monotonic() + 120.0  # The publisher's start-up (imports) is not the node's load.
        while not all(a.counters.setpoints_accepted > 0 for a in servo.axes):
            if publisher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the publisher does not reach every axis")
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        accepted0 = sum(a.counters.setpoints_accepted for a in servo.axes)
        ticks0 = [a.loop.sample().ticks for a in servo.axes]
        skip = int(thread.timing[-1])
        wall0 = time.monotonic()
        busy_windows = []
        for _ in range(windows):  # The node's CPU per window; the rest over all of them.
            cpu0, at0 = _cpu_s(), time.monotonic()
            await asyncio.sleep(seconds)
            busy_windows.append((_cpu_s() - cpu0) / (time.monotonic() - at0) * 100)
        wall = time.monotonic() - wall0
        ticked = [a.loop.sample().ticks - t for a, t in zip(servo.axes, ticks0, strict=True)]
        n = int(thread.timing[-1]) - skip
        lateness = thread.period_errors()[-n:] * 1e6
        accepted = sum(a.counters.setpoints_accepted for a in servo.axes) - accepted0
        return {
            "idle": idle,
            "busy": float(np.median(busy_windows)),
            "busy_range": (min(busy_windows), max(busy_windows)),
            "p50": float(np.percentile(lateness, 50)),
            "p99": float(np.percentile(lateness, 99)),
            "max": float(lateness.max()),
            "lost": max(0.0, sum(RATE_HZ * wall - t for t in ticked) - axes),  # One tick per axis: edge of window.
            "rx_hz": accepted / wall / axes,
            "load": os.getloadavg()[0],
        }
    finally:
        if publisher is not None:
            publisher.kill()
            publisher.wait()
        servo.request_close()
        await task


async def _start_time(axes: int, starts: int) -> float:
    """Launch of ``servo-node run`` → its first OPERATIONAL heartbeat [second], the fastest of ``starts``."""
    import pycyphal.application
    import uavcan.node

    listener = pycyphal.application.make_node(
        pycyphal.application.NodeInfo(name="bench.scale.listener"),
        pycyphal.application.make_registry(None, {"UAVCAN__UDP__IFACE": "127.0.0.1",
                                                  "UAVCAN__NODE__ID": str(LISTENER)}),
    )
    sub = listener.make_subscriber(uavcan.node.Heartbeat_1_0)
    listener.start()
    best = math.inf
    try:
        for i in range(starts):
            nid = NODE + 10 + i  # A fresh node-ID per launch: a restarted node's transfer-IDs would repeat.
            env = {k: v for k, v in os.environ.items() if not k.startswith("UAVCAN__")}
            env.update(_env(axes, 0), UAVCAN__NODE__ID=str(nid))
            t0 = time.monotonic()
            proc = subprocess.Popen([str(BIN / "servo-node"), "run", "--registry", ":memory:"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            took = math.inf
            while time.monotonic() - t0 < 120 and took == math.inf:
                got = await sub.receive_for(1.0)
                if got is not None and got[1].source_node_id == nid and got[0].mode.value == \
                        uavcan.node.Mode_1_0.OPERATIONAL:
                    took = time.monotonic() - t0
            proc.terminate()
            proc.wait()
            best = min(best, took)
    finally:
        listener.close()
    return best


async def _main(axis_counts: list[int], seconds: float, starts: int, windows: int) -> None:
    load = os.getloadavg()
    each = f"; 100 Hz %: the median of {windows} windows, their range last" if windows > 1 else ""
    print(f"cyphal-servo, many axes per node ({os.cpu_count()} cores, load {load[0]:.1f}; {seconds:g} s windows{each}; "
          f"1 kHz loops; embedded joints; UDP loopback)")
    print(f"{'axes':>4} {'prio':>4} {'start s':>7} {'idle %':>7} {'/axis':>6} {'100Hz %':>8} {'/axis':>6} "
          f"{'rx Hz':>6} {'late p50 µs':>11} {'p99 µs':>8} {'max µs':>8} {'lost':>6} {'load':>5}")
    for axes in axis_counts:
        start = await _start_time(axes, starts) if starts > 0 else math.nan
        for priority in (0, 50):
            r = await _run_case(axes, priority, seconds, windows)
            low, high = r["busy_range"]
            spread = f"  {low:.1f}–{high:.1f}" if windows > 1 else ""
            print(f"{axes:>4} {priority or 'std':>4} {start:>7.2f} {r['idle']:>7.1f} {r['idle'] / axes:>6.2f} "
                  f"{r['busy']:>8.1f} {r['busy'] / axes:>6.2f} {r['rx_hz']:>6.0f} {r['p50']:>11.0f} "
                  f"{r['p99']:>8.0f} {r['max']:>8.0f} {r['lost']:>6.0f} {r['load']:>5.1f}{spread}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--axes", type=int, nargs="+", default=[1, 8, 16, 32, 48])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--starts", type=int, default=2, help="launches per axis count for the start time (0: none)")
    ap.add_argument("--windows", type=int, default=1,
                    help="100 Hz: this many windows in a row, the CPU their median (one swings by a quarter)")
    ap.add_argument("--bare", type=int, default=0, help="only pycyphal's cost per setpoint, for this many subjects")
    ap.add_argument("--in-loop", action="store_true", help="--bare: sessions read by the event loop")
    ap.add_argument("--publish", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    from cyphal_common import dsdl

    if args.publish or args.bare:
        dsdl.ensure_compiled()
        asyncio.run(_publish(args.publish) if args.publish else _bare(args.bare, args.seconds, args.in_loop))
        return
    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()  # Before any kernel module loads its numba cache.
    dsdl.ensure_compiled()
    asyncio.run(_main(args.axes, args.seconds, args.starts, args.windows))


if __name__ == "__main__":
    main()
