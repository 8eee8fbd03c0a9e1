"""Tracking over the bus against added latency: a servo and its drive (sim-plant) behind a delaying relay.

The servo (``servo-node``, ``udral`` backend) and the drive (``sim-plant``) are real processes on different
subject-IDs; this process is a Cyphal node in between that republishes every message after a chosen one-way
delay (setpoint and readiness towards the drive, dynamics and feedback back), publishes the move's setpoints and
reads the servo's ``sys.motion``. For each transport (UDP 127.0.0.1, udpmc CAN) and each law — ``before``: the
velocity law as it was (``servo.drive.compensation = off``: feed-forward at t, feedback on the latest measurement,
k = 5), ``after``: the link model (``predict``, k = 40) — it runs, per added latency 0 / 5 / 10 / 20 ms, one
unmeasured move (the link model adapts to the new latency) and then the measured 0 → 3 move at the default
profile (v 10, a 50, j 500; plan 0.600 s). Reported: the node's own ``track_max`` (each measurement against the
reference of its instant), ``settled`` (plan start to arrival within ``servo.arrival_tolerance``), the overshoot
past the target, and the link as the servo measured it (measurement age, command delay: p50 / max; they include
the relay's own hop). All processes, the relay included, run under SCHED_FIFO where permitted (as a servo and
its drive are deployed); ``--no-rt`` leaves them at normal priority.

Usage: ``python bench/remote.py [--latencies 0 5 10 20] [--transports udp udpmc] [--no-rt]``.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SERVO, PLANT, RELAY = 125, 90, 100
SETPOINT = 27
SERVO_SIDE = {"setpoint": 40, "readiness": 41, "dynamics": 42, "feedback": 43}
DRIVE_SIDE = {"setpoint": 50, "readiness": 51, "dynamics": 52, "feedback": 53}
TARGET = 3.0


def _realtime(pid: int) -> bool:
    """SCHED_FIFO 10 for every thread of ``pid`` (0: this process) where permitted."""
    ok = True
    for task in Path(f"/proc/{pid or os.getpid()}/task").iterdir():
        try:
            os.sched_setscheduler(int(task.name), os.SCHED_FIFO, os.sched_param(10))
        except OSError:
            ok = False
    return ok


def _transport_env(transport: str) -> dict[str, str]:
    if transport == "udp":
        return {"UAVCAN__UDP__IFACE": "127.0.0.1"}
    group = f"udpmc:239.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"
    return {"UAVCAN__CAN__IFACE": f"{group}:{random.randint(20000, 60000)}", "UAVCAN__CAN__MTU": "64"}


@contextmanager
def _processes(transport_env: dict[str, str], compensation: str, tmp: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """sim-plant and servo-node, wired through the relay's subject-IDs."""
    from cyphal_common import dsdl

    base = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "SERVO__", "SIM__"))}
    base.update(transport_env, CYPHAL_PATH=str(dsdl.dsdl_dir()), PYCYPHAL_PATH=str(dsdl.ensure_compiled()))
    plant_env = base | {
        "UAVCAN__NODE__ID": str(PLANT),
        "UAVCAN__SUB__SERVO__SETPOINT__ID": str(DRIVE_SIDE["setpoint"]),
        "UAVCAN__SUB__SERVO__READINESS__ID": str(DRIVE_SIDE["readiness"]),
        "UAVCAN__PUB__SERVO__DYNAMICS__ID": str(SERVO_SIDE["dynamics"]),
        "UAVCAN__PUB__SERVO__FEEDBACK__ID": str(SERVO_SIDE["feedback"]),
        "SIM__PUBLISH_RATE": "200",
    }
    servo_env = base | {
        "UAVCAN__NODE__ID": str(SERVO),
        "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SETPOINT),
        "SERVO__DRIVE__BACKEND": "udral",
        "SERVO__DRIVE__COMPENSATION": compensation,
        "UAVCAN__PUB__DRIVE_SETPOINT__ID": str(SERVO_SIDE["setpoint"]),
        "UAVCAN__PUB__DRIVE_READINESS__ID": str(SERVO_SIDE["readiness"]),
        "UAVCAN__SUB__DRIVE_DYNAMICS__ID": str(DRIVE_SIDE["dynamics"]),
        "UAVCAN__SUB__DRIVE_FEEDBACK__ID": str(DRIVE_SIDE["feedback"]),
    }
    bin_dir = Path(sys.executable).parent
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sim_plant_node", "--registry", str(tmp / "plant.db")], env=plant_env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        ),
        subprocess.Popen(
            [str(bin_dir / "servo-node"), "run", "--registry", str(tmp / f"servo-{compensation}.db")], env=servo_env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        ),
    ]  # fmt: skip
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


class Relay:
    """This process's node: the delaying relay, the setpoint publisher and a ``sys.motion`` reader."""

    def __init__(self, transport_env: dict[str, str]) -> None:
        import pycyphal.presentation
        import reg.udral.physics.dynamics.rotation as rot
        import reg.udral.service.actuator.common as actuator
        import reg.udral.service.common as common
        import uavcan.primitive.scalar
        import uavcan.register

        from cyphal_common.transport import make_transport

        regs: dict[str, Any] = {"uavcan.node.id": RELAY}
        if "UAVCAN__CAN__IFACE" in transport_env:
            regs.update({"uavcan.can.iface": transport_env["UAVCAN__CAN__IFACE"], "uavcan.can.mtu": 64})
        else:
            regs["uavcan.udp.iface"] = transport_env["UAVCAN__UDP__IFACE"]
        self.pres = pycyphal.presentation.Presentation(make_transport(regs))
        self.delay = 0.0
        self.closed = False
        routes = [
            (rot.Planar_0_1, SERVO_SIDE["setpoint"], DRIVE_SIDE["setpoint"]),
            (common.Readiness_0_1, SERVO_SIDE["readiness"], DRIVE_SIDE["readiness"]),
            (rot.PlanarTs_0_1, SERVO_SIDE["dynamics"], DRIVE_SIDE["dynamics"]),
            (actuator.Feedback_0_1, SERVO_SIDE["feedback"], DRIVE_SIDE["feedback"]),
        ]
        for dtype, src, dst in routes:
            pub = self.pres.make_publisher(dtype, dst)
            self.pres.make_subscriber(dtype, src).receive_in_background(self._forwarder(pub))
        self._setpoint = self.pres.make_publisher(uavcan.primitive.scalar.Real32_1_0, SETPOINT)
        self._real32 = uavcan.primitive.scalar.Real32_1_0
        self._access = self.pres.make_client_with_fixed_service_id(uavcan.register.Access_1_0, SERVO)
        self._access.response_timeout = 2.0
        self._access_t = uavcan.register.Access_1_0
        self._name_t = uavcan.register.Name_1_0

    def _forwarder(self, pub: Any) -> Any:
        loop = asyncio.get_running_loop()

        async def send(msg: Any) -> None:
            if not self.closed:
                await pub.publish(msg)

        async def forward(msg: Any, _meta: Any) -> None:
            if self.delay <= 0.0:
                await send(msg)
            else:
                loop.call_later(self.delay, lambda: loop.create_task(send(msg)))

        return forward

    async def motion(self) -> dict[str, Any] | None:
        result = await self._access.call(self._access_t.Request(name=self._name_t("sys.motion")))
        if result is None or result[0].value.string is None:
            return None
        try:
            return dict(json.loads(result[0].value.string.value.tobytes().decode()))
        except json.JSONDecodeError:
            return None

    async def move(self, target: float, timeout: float = 10.0) -> dict[str, Any] | None:
        """Publish ``target`` at 10 Hz until the servo reports arrival (None: it did not within ``timeout``)."""
        start = time.monotonic()
        m: dict[str, Any] | None = None
        last_pub = -1.0
        while time.monotonic() - start < timeout:
            if time.monotonic() - last_pub >= 0.1:
                last_pub = time.monotonic()
                await self._setpoint.publish(self._real32(target))
            await asyncio.sleep(0.05)
            m = await self.motion()
            if (
                m is not None
                and time.monotonic() - start > 0.3
                and isinstance(m.get("settled"), float)
                and abs(m["meas"][0] - target) < 0.01
                and abs(m["ref"][0] - target) < 1e-9
            ):
                await asyncio.sleep(0.3)  # Let the overshoot (if any) show, keep the deadman fed.
                await self._setpoint.publish(self._real32(target))
                return await self.motion()
        return None

    def close(self) -> None:
        self.closed = True
        self.pres.close()


async def _run_config(transport: str, compensation: str, latencies: list[float], rt: bool) -> list[dict[str, Any]]:
    env = _transport_env(transport)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, _processes(env, compensation, Path(tmp)) as procs:
        relay = Relay(env)
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:  # Up (kernels loaded) and hearing the drive.
                m = await relay.motion() if all(p.poll() is None for p in procs) else None
                if m is not None and m.get("meas", [math.nan])[0] == 0.0:
                    break
                await asyncio.sleep(0.5)
            else:
                raise RuntimeError(f"{transport}/{compensation}: the servo did not come up with its drive")
            if rt:
                rt = all(_realtime(p.pid) for p in procs) and _realtime(0)
            for latency in latencies:
                relay.delay = latency
                await relay.move(-1.0)  # Unmeasured: away and back to 0 with this latency, the link model adapts.
                await relay.move(0.0)
                m = await relay.move(TARGET)
                rows.append({"transport": transport, "law": compensation, "latency": latency, "motion": m, "rt": rt})
                print(f"  {transport:6s} {compensation:8s} {latency * 1e3:4.0f} ms: {m}", flush=True)
        finally:
            relay.close()
    return rows


def _fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, float) else f"{x!s:>{spec.split('.')[0] or 1}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latencies", type=float, nargs="+", default=[0.0, 5.0, 10.0, 20.0], help="one-way [ms]")
    ap.add_argument("--transports", nargs="+", default=["udp", "udpmc"], choices=["udp", "udpmc"])
    ap.add_argument("--no-rt", action="store_true", help="do not ask for SCHED_FIFO")
    args = ap.parse_args()
    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    latencies = [x * 1e-3 for x in args.latencies]
    rows: list[dict[str, Any]] = []
    for transport in args.transports:
        for law in ("off", "predict"):
            rows += asyncio.run(_run_config(transport, law, latencies, not args.no_rt))
    print("\nThe 0 → 3 move (v 10, a 50, j 500; plan 0.600 s) through a relay adding a one-way latency each way.")
    print("before = servo.drive.compensation off (the law as it was), after = predict (the link model).")
    print("track_max, settled: the servo's sys.motion; age, delay: the link as the servo measured it [ms].\n")
    by = {(r["transport"], r["latency"], r["law"]): r["motion"] or {} for r in rows}
    print(f"{'':16s} | {'before':^27s} | {'after':^27s} | {'link (after) [ms]':^25s}")
    print(
        f"{'transport added':16s} | {'track_max':>9s} {'settled':>7s} {'overshoot':>9s} | {'track_max':>9s} "
        f"{'settled':>7s} {'overshoot':>9s} | {'age p50/max':>12s} {'delay p50/max':>12s}"
    )
    print("-" * 106)
    for transport in args.transports:
        for latency in latencies:
            cells = []
            for law in ("off", "predict"):
                m = by.get((transport, latency, law), {})
                cells.append(
                    f"{_fmt(m.get('track_max', '-'), '9.2e')} {_fmt(m.get('settled', '-'), '7.3f')} "
                    f"{_fmt(m.get('over', '-'), '9.1e')}"
                )
            link = by.get((transport, latency, "predict"), {}).get("link", ["-"] * 4)
            print(
                f"{transport:6s} {latency * 1e3:6.0f} ms | {cells[0]} | {cells[1]} | "
                f"{_fmt(link[0], '5.2f')}/{_fmt(link[1], '6.1f')} {_fmt(link[2], '5.2f')}/{_fmt(link[3], '6.2f')}"
            )
    print(f"\nSCHED_FIFO: {'on' if all(r['rt'] for r in rows) else 'not (everywhere) permitted'}")


if __name__ == "__main__":
    main()
