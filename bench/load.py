"""A servo and its drive on a busy host: tracking, loop timing and heartbeat with CPU hogs beside them.

One ``servo-node`` (``udral`` backend, the default 1 kHz loop at standard priority, as a user starts it) drives one
``sim-plant`` (the simulated joint as a UDRAL drive, 200 Hz) over UDP 127.0.0.1 or udpmc CAN, while 0, 1, 2 or 4
CPU hogs (``yes >/dev/null``, niceness 0) run beside them. This process is the user: it moves the joint 0 → 2 → 0 …
(the default profile, a new target every 1.2 s, setpoints at 20 Hz), reads after each move the servo's own
``track_max`` (each measurement against the reference of its instant), and at the end lets the deadman stop the
joint and checks it came to rest. It listens to the servo's heartbeat under SCHED_FIFO where permitted, so the
periods it reports are the servo's, not its own lateness. Reported per row: the tracking error (p50 / max over the
moves), the loop's lateness p99 and max and the ticks it missed (``sys.timing``, over the row), the heartbeat
period's extremes, the final stop, and the servo's error reports (``servo error: …`` in its log, after its start-up).

Usage: ``python bench/load.py [--hogs 0 1 2 4] [--transports udp udpmc] [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SERVO, PLANT, USER = 125, 90, 100
SETPOINT = 27
PORTS = {"setpoint": 40, "readiness": 41, "dynamics": 42, "feedback": 43}
TARGETS = (2.0, 0.0)
MOVE_S = 1.2
"""A new target this often [second]: the default profile's 2 rad move takes 0.5 s, the rest is the hold."""


def _transport_env(transport: str) -> dict[str, str]:
    if transport == "udp":
        return {"UAVCAN__UDP__IFACE": "127.0.0.1"}
    group = f"239.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"
    return {"UAVCAN__CAN__IFACE": f"udpmc:{group}:{random.randint(20000, 60000)}", "UAVCAN__CAN__MTU": "64"}


@contextmanager
def _nodes(transport_env: dict[str, str], tmp: Path) -> Iterator[None]:
    """``sim-plant`` and ``servo-node`` on the transport, at standard priority."""
    from cyphal_common import dsdl

    base = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "SERVO__", "SIM__"))}
    base.update(transport_env, CYPHAL_PATH=str(dsdl.dsdl_dir()), PYCYPHAL_PATH=str(dsdl.ensure_compiled()))
    plant = base | {"UAVCAN__NODE__ID": str(PLANT), "SIM__PUBLISH_RATE": "200",
                    **{f"UAVCAN__{'SUB' if k in ('setpoint', 'readiness') else 'PUB'}__SERVO__{k.upper()}__ID": str(v)
                       for k, v in PORTS.items()}}
    servo = base | {"UAVCAN__NODE__ID": str(SERVO), "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SETPOINT),
                    "SERVO__DRIVE__BACKEND": "udral", "SERVO__DRIVE__NODE_ID": str(PLANT),
                    **{f"UAVCAN__{'PUB' if k in ('setpoint', 'readiness') else 'SUB'}__DRIVE_{k.upper()}__ID": str(v)
                       for k, v in PORTS.items()}}
    bin_dir = Path(sys.executable).parent
    logs = [(tmp / "plant.log").open("w"), (tmp / "servo.log").open("w")]
    procs = [subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_standard)
             for (cmd, env), log in zip((([sys.executable, "-m", "sim_plant_node", "--registry", str(tmp / "plant.db")],
                                          plant),
                                         ([str(bin_dir / "servo-node"), "run", "--registry", str(tmp / "servo.db")],
                                          servo)), logs, strict=True)]
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


def _standard() -> None:
    """In a child: the standard policy at niceness 0, whatever this process runs under."""
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    os.setpriority(os.PRIO_PROCESS, 0, 0)


@contextmanager
def _hogs(n: int) -> Iterator[None]:
    """``n`` processes of ``yes >/dev/null`` at niceness 0."""
    procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, preexec_fn=_standard) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


class User:
    """This process's node: the setpoints, the servo's registers and heartbeat."""

    def __init__(self, transport_env: dict[str, str]) -> None:
        import pycyphal.presentation
        import uavcan.node
        import uavcan.primitive.scalar
        import uavcan.register

        from cyphal_common.transport import make_transport

        regs: dict[str, Any] = {"uavcan.node.id": USER}
        if "UAVCAN__CAN__IFACE" in transport_env:
            regs.update({"uavcan.can.iface": transport_env["UAVCAN__CAN__IFACE"], "uavcan.can.mtu": 64})
        else:
            regs["uavcan.udp.iface"] = transport_env["UAVCAN__UDP__IFACE"]
        self.pres = pycyphal.presentation.Presentation(make_transport(regs))
        self._pub = self.pres.make_publisher(uavcan.primitive.scalar.Real32_1_0, SETPOINT)
        self._real32 = uavcan.primitive.scalar.Real32_1_0
        self._access = self.pres.make_client_with_fixed_service_id(uavcan.register.Access_1_0, SERVO)
        self._access.response_timeout = 5.0
        self._request = uavcan.register.Access_1_0.Request
        self._name = uavcan.register.Name_1_0
        self.heartbeats: list[float] = []
        hb = self.pres.make_subscriber_with_fixed_subject_id(uavcan.node.Heartbeat_1_0)
        hb.receive_in_background(self._on_heartbeat)

    async def _on_heartbeat(self, _msg: Any, meta: Any) -> None:
        if meta.source_node_id == SERVO:
            self.heartbeats.append(float(meta.timestamp.monotonic))

    async def read(self, name: str) -> Any:
        res = await self._access.call(self._request(name=self._name(name)))
        if res is None or res[0].value.string is None:
            return None
        return json.loads(res[0].value.string.value.tobytes().decode())

    async def up(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while (await self.read("sys.timing")) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the servo did not answer")
        await asyncio.sleep(1.0)

    async def hold(self, target: float, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await self._pub.publish(self._real32(target))
            await asyncio.sleep(0.05)

    def close(self) -> None:
        self.pres.close()


def _error_reports(log: Path) -> list[str]:
    """The servo's error reports in its log (``servo error: …``), in order."""
    return [ln.split("servo error: ", 1)[1] for ln in log.read_text().splitlines() if "servo error: " in ln]


def _counted(reports: list[str]) -> str:
    """Reports counted per reason, in words."""
    counts: dict[str, int] = {}
    for why in reports:
        counts[why] = counts.get(why, 0) + 1
    return "; ".join(f"{n}× {why}" for why, n in counts.items()) or "none"


async def _row(transport: str, hogs: int, seconds: float, tmp: Path) -> dict[str, Any]:
    env = _transport_env(transport)
    with _nodes(env, tmp):
        user = User(env)
        try:
            try:
                await user.up()
            except RuntimeError:
                print((tmp / "servo.log").read_text()[-2000:], file=sys.stderr)
                raise
            # The start-up's own error (the drive not heard yet when the loop starts) is not the row's.
            start_errors = len(_error_reports(tmp / "servo.log"))
            await user.hold(0.0, 1.5)
            before = await user.read("sys.timing")
            tracks: list[float] = []
            with _hogs(hogs):
                user.heartbeats.clear()
                t_end = time.monotonic() + seconds
                k = 0
                while time.monotonic() < t_end:
                    await user.hold(TARGETS[k % 2], MOVE_S)
                    motion = await user.read("sys.motion")
                    if motion is not None and isinstance(motion.get("track_max"), float):
                        tracks.append(float(motion["track_max"]))
                    k += 1
                after = await user.read("sys.timing")
                beats = list(user.heartbeats)
                await asyncio.sleep(3.0)  # No setpoints: the deadman stops the joint.
                motion = await user.read("sys.motion")
                errors = _error_reports(tmp / "servo.log")[start_errors:]
        finally:
            user.close()
    periods = [b - a for a, b in itertools.pairwise(beats)]
    rest = motion is not None and not motion["engaged"] and abs(float(motion["meas"][1])) < 1e-3
    tracks.sort()
    return {
        "transport": transport, "hogs": hogs, "moves": len(tracks),
        "track_p50": tracks[len(tracks) // 2] if tracks else float("nan"),
        "track_max": max(tracks, default=float("nan")),
        "late_p99": after["late_p99_ms"], "late_max": after["late_max_ms"],
        "missed": after["missed"] - before["missed"],
        "hb_min": min(periods, default=float("nan")), "hb_max": max(periods, default=float("nan")),
        "at_rest": rest, "errors": _counted(errors),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hogs", type=int, nargs="+", default=[0, 1, 2, 4])
    ap.add_argument("--transports", nargs="+", default=["udp", "udpmc"], choices=["udp", "udpmc"])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))  # The observer, above everything measured.
    except OSError:
        print("(not permitted to run under SCHED_FIFO: the heartbeat periods include this process's own lateness)")
    print("| transport | hogs | moves | track p50 / max [mrad] | loop late p99 / max [ms] | ticks missed | "
          "heartbeat period min / max [s] | deadman stop at rest | servo errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for transport in args.transports:
            for hogs in args.hogs:
                row_dir = Path(tmp) / f"{transport}-{hogs}"  # Fresh register files: a row's own transport only.
                row_dir.mkdir()
                r = asyncio.run(_row(transport, hogs, args.seconds, row_dir))
                print(f"| {r['transport']} | {r['hogs']} | {r['moves']} | {r['track_p50'] * 1e3:.2f} / "
                      f"{r['track_max'] * 1e3:.2f} | {r['late_p99']:.2f} / {r['late_max']:.1f} | {r['missed']} | "
                      f"{r['hb_min']:.3f} / {r['hb_max']:.3f} | {'yes' if r['at_rest'] else 'NO'} | "
                      f"{r['errors']} |", flush=True)


if __name__ == "__main__":
    main()
