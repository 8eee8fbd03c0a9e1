"""The console's cost and latency: servo nodes publishing ``dynamics`` at 1 kHz per axis, ``servo-node console``
serving them, and a real headless Chromium plotting every axis (Debian's chromium + chromium-driver, selenium).

* end-to-end latency, per sample that reaches the page: the page's receipt time (``performance.timeOrigin +
  performance.now()``, the system clock of this host) minus the sample's own stamp in the node's ``dynamics`` (the
  node's system clock at the sample): the node's publication, the console's reception, its frame (a frame every
  25 ms, so up to 25 ms of the latency is the frame period), the WebSocket, the page's parsing. p50/p99/max [ms];
  Split at the median: *node→frame* (a frame's sending minus its newest sample's stamp) and *→page* (the page's
  receipt minus the frame's sending);
* the console process's CPU [% of one core] (``/proc``: user + system over the measured window), the browser's
  (every Chromium process), the samples the console received per second and the page's drawn frames per second,
  and the machine's load average at the end (the figures are only as good as the cores the run had).

Two cases: ``light`` (one axis at 1 kHz plotted) and ``8x1k`` (two nodes of four axes each, every axis at 1 kHz,
all eight plotted). Every axis follows a sine (one ``y pub``, 20 Hz setpoints): an axis left in standby ticks and
publishes at its idle rate (100 Hz), not at ``servo.dynamics_rate``. It isolates itself on a network namespace of
its own (root), so it hears no other traffic.
Usage: ``python bench/console.py [--seconds 20] [--cases light,8x1k] [--client browser|socket] [--realtime]``.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CONSOLE_ID = 120
RATE_HZ = 1000
AXES = ("a", "b", "c", "d")


def _node_env(node_id: int, axes: int, base: int) -> dict[str, str]:
    from tests.procs import base_env

    env = base_env(UAVCAN__NODE__ID=str(node_id))
    if axes == 1:
        env.update(UAVCAN__PUB__DYNAMICS__ID=str(base), UAVCAN__SUB__SETPOINT_SERVO__ID=str(base + 100),
                   SERVO__DYNAMICS_RATE=str(RATE_HZ))
        return env
    env["SERVO__AXES"] = " ".join(AXES[:axes])
    for k, name in enumerate(AXES[:axes]):
        up = name.upper()
        env[f"UAVCAN__PUB__{up}__DYNAMICS__ID"] = str(base + k)
        env[f"UAVCAN__SUB__{up}__SETPOINT_SERVO__ID"] = str(base + 100 + k)
        env[f"{up}__SERVO__DYNAMICS_RATE"] = str(RATE_HZ)
    return env


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU time of these processes so far [second]."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (by their parents in ``/proc``)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def _case(name: str, nodes: list[tuple[int, int]], seconds: float, tmp: Path, realtime: bool,
          client: str) -> dict[str, Any]:
    from tests.procs import BIN, base_env, wait_answers
    from tests.procs import realtime as fifo

    envs = [_node_env(n, axes, 3000 + 10 * k) for k, (n, axes) in enumerate(nodes)]
    procs = [subprocess.Popen([str(BIN / "servo-node"), "run", "--registry", ":memory:"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for env in envs]
    url_file = tmp / f"{name}.url"
    console = subprocess.Popen([str(BIN / "servo-node"), "console", "--port", "0", "--url-file", str(url_file)],
                               env=base_env(UAVCAN__NODE__ID=str(CONSOLE_ID)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        for proc, (n, axes) in zip(procs, nodes, strict=True):
            wait_answers(proc, _node_env(n, axes, 0), n, "servo-node", timeout=600)
        subjects = [v for env in envs for key, v in env.items() if key.endswith("SETPOINT_SERVO__ID")]
        setpoints = [a for i, subject in enumerate(subjects)
                     for a in (f"{subject}:uavcan.primitive.scalar.Real32", f'{{value: !$ "sin(t + {i})"}}')]
        procs.append(subprocess.Popen([str(BIN / "y"), "pub", "-T", "0.05", *setpoints],
                                      env=base_env(UAVCAN__NODE__ID=str(CONSOLE_ID + 1)), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        while not (url_file.exists() and url_file.read_text().strip()):
            time.sleep(0.1)
        if realtime:  # The console above the nodes (what they publish is what it gets), the browser below both.
            for proc in procs:
                fifo(proc.pid, 5)
            fifo(console.pid, 10)
        total = sum(axes for _, axes in nodes)
        url = url_file.read_text().strip()
        measure = _socket if client == "socket" else _browser
        stats0, stats1, cpu, browser_cpu, took = measure(url, total, seconds, console.pid, realtime)
        lat = np.asarray(stats1["lat"][-(stats1["n"] - stats0["n"]):]) * 1e3
        return {"case": name, "axes": total, "received_hz": (stats1["received"] - stats0["received"]) / took,
                "fps": (stats1["draws"] - stats0["draws"]) / took, "console_cpu": 100 * cpu / took,
                "browser_cpu": 100 * browser_cpu / took, "n": lat.size, "p50": np.percentile(lat, 50),
                "p99": np.percentile(lat, 99), "max": lat.max(),
                "lag50": 1e3 * np.percentile(stats1["lag"], 50), "tr50": 1e3 * np.percentile(stats1["tr"], 50),
                "load": os.getloadavg()[0]}
    finally:
        for proc in [console, *procs]:
            proc.send_signal(2)
        for proc in [console, *procs]:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


Stats = dict[str, Any]


def _browser(url: str, total: int, seconds: float, console_pid: int,
             realtime: bool) -> tuple[Stats, Stats, float, float, float]:
    """The page in headless Chromium plots every axis: its own statistics (``window.consoleStats``)."""
    from tests.console import browser
    from tests.procs import realtime as fifo

    with browser.chromium() as driver:
        driver.get(url)
        if realtime:
            for pid in [driver.service.process.pid, *_descendants(driver.service.process.pid)]:
                fifo(pid, 1)
        deadline = time.monotonic() + 120
        while len(driver.find_elements("css selector", "#axes tbody tr")) < total:
            assert time.monotonic() < deadline, "the page did not list every axis"
            time.sleep(0.2)
        for box in driver.find_elements("css selector", "#axes input.plot"):
            box.click()
        time.sleep(5.0)  # Subscriptions, the first frames, the charts' first draws.
        browser_pids = _descendants(driver.service.process.pid)
        if realtime:  # Any process the page started since.
            for pid in browser_pids:
                fifo(pid, 1)
        script = ("return {lat: consoleStats.latencies, n: consoleStats.latencies.length, draws: consoleStats.draws, "
                  "received: consoleStats.received, lag: consoleStats.serverLag.slice(-1000), "
                  "tr: consoleStats.transport.slice(-1000)}")
        stats0 = driver.execute_script(script)
        cpu0, b0, t0 = _cpu_s([console_pid]), _cpu_s(browser_pids), time.monotonic()
        time.sleep(seconds)
        cpu1, b1, t1 = _cpu_s([console_pid]), _cpu_s(browser_pids), time.monotonic()
        stats1 = driver.execute_script(script)
    return stats0, stats1, cpu1 - cpu0, b1 - b0, t1 - t0


def _socket(url: str, total: int, seconds: float, console_pid: int,
            _realtime: bool) -> tuple[Stats, Stats, float, float, float]:
    """A WebSocket client asks for every axis as a 1000-pixel-wide page would and times the frames (no browser)."""
    import asyncio
    import json

    import aiohttp

    base, token = url.split("/#token=")

    async def run() -> tuple[Stats, Stats, float, float, float]:
        stats: Stats = {"lat": [], "n": 0, "draws": 0, "received": 0, "lag": [], "tr": []}
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(base.replace("http", "ws") + "/ws", origin=base) as ws:
            await ws.send_json({"type": "hello", "token": token})
            keys: list[str] = []
            end, snap = math.inf, None
            cpu0 = t0 = 0.0
            while time.monotonic() < end:
                msg = json.loads((await ws.receive()).data)
                recv = time.time()
                if msg["type"] == "bus":
                    stats["received"] = msg["received"]
                    found = [a["key"] for n in msg["nodes"] for a in n["axes"]]
                    if not keys and len(found) == total:
                        keys = found
                        await ws.send_json({"type": "plot", "axes": keys, "window_s": 10, "width": 1000})
                        start = time.monotonic() + 5.0
                elif msg["type"] == "frame":
                    stats["draws"] += 1
                    for a in msg["axes"].values():
                        stats["lat"] += [recv - t for t in a["t"]]
                        stats["lag"].append(msg["sent_at"] - a["t"][-1])
                        stats["tr"].append(recv - msg["sent_at"])
                    stats["n"] = len(stats["lat"])
                    if snap is None and keys and time.monotonic() >= start:
                        snap = {k: (list(v) if isinstance(v, list) else v) for k, v in stats.items()}
                        cpu0, t0 = _cpu_s([console_pid]), time.monotonic()
                        end = t0 + seconds
            cpu1, t1 = _cpu_s([console_pid]), time.monotonic()
        assert snap is not None
        return snap, stats, cpu1 - cpu0, 0.0, t1 - t0

    return asyncio.run(run())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window per case [second]")
    ap.add_argument("--cases", default="light,8x1k")
    ap.add_argument("--client", choices=("browser", "socket"), default="browser",
                    help="who plots: the page in headless Chromium, or a WebSocket client asking what a page would "
                         "(the console's own cost and latency, without a browser on the same cores)")
    ap.add_argument("--realtime", action="store_true",
                    help="the console, the nodes and the browser under SCHED_FIFO, in that order (root): their own "
                         "figures on a machine that other work keeps busy")
    args = ap.parse_args()
    from cyphal_common import dsdl
    from tests import isolation
    from tests.console import browser

    if (why := browser.missing()) is not None:
        print(f"bench/console.py: {why}", file=sys.stderr)
        return 2
    isolation.isolate()
    dsdl.ensure_compiled()
    cases = {"light": [(21, 1)], "8x1k": [(21, 4), (22, 4)]}
    print(f"{'case':6} {'axes':>4} {'recv/s':>8} {'page fps':>8} {'console CPU':>11} {'browser CPU':>11} "
          f"{'samples':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'node→frame':>10} {'→page':>6} {'load':>5}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            r = _case(name, cases[name], args.seconds, Path(tmp), args.realtime, args.client)
            print(f"{r['case']:6} {r['axes']:4d} {r['received_hz']:8.0f} {r['fps']:8.1f} {r['console_cpu']:10.1f}% "
                  f"{r['browser_cpu']:10.1f}% {r['n']:8d} {r['p50']:7.1f} {r['p99']:7.1f} {r['max']:7.1f} "
                  f"{r['lag50']:10.1f} {r['tr50']:6.1f} {r['load']:5.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
