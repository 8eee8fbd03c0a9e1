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

``canopen``: the same move with the ``cia402`` backend and the emulated CiA 402 drive (``sim-plant --canopen``), in
each of its modes (CSV, CST with K_p, K_d = 1600, 80, CSP). The servo and the drive sit on two ``udpmc:`` CAN buses
and this process bridges them (:class:`CanRelay`): every frame — SYNC, RPDOs, TPDOs, SDO, NMT, heartbeats — goes
over after the added one-way delay, in order, as through a slow gateway. The servo's Cyphal side (setpoints,
``sys.motion``) is UDP 127.0.0.1 without delay.

``odrive``: the same move with the ``odrive`` backend and the emulated ODrive (``sim-plant --odrive``, CAN Simple),
in each mode (Set_Input_Vel, Set_Input_Torque with K_p, K_d = 1600, 80, Set_Input_Pos) behind the same delaying
bridge: commands at 200 Hz, the drive's encoder estimates at its default 100 Hz and unstamped (the servo stamps them
by their cadence).

Usage: ``python bench/remote.py [--latencies 0 5 10 20] [--transports udp udpmc canopen odrive] [--no-rt]``.
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
import threading
import time
from collections import deque
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
DRIVE_ID = 5
"""The emulated CiA 402 drive's CANopen node-ID."""
CIA402_MODES = {"velocity": "CSV", "torque": "CST", "position": "CSP"}
"""``servo.drive.mode`` and the CiA 402 mode it selects."""
ODRIVE_MODES = {"velocity": "vel", "torque": "torque", "position": "pos"}
"""``servo.drive.mode`` and the ODrive input it streams (Set_Input_Vel, _Torque, _Pos)."""


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
    return {"UAVCAN__CAN__IFACE": _udpmc_iface(), "UAVCAN__CAN__MTU": "64"}


def _udpmc_iface() -> str:
    group = f"239.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"
    return f"udpmc:{group}:{random.randint(20000, 60000)}"


def _base_env(transport_env: dict[str, str]) -> dict[str, str]:
    from cyphal_common import dsdl

    base = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "SERVO__", "SIM__"))}
    base.update(transport_env, CYPHAL_PATH=str(dsdl.dsdl_dir()), PYCYPHAL_PATH=str(dsdl.ensure_compiled()))
    return base


@contextmanager
def _started(cmds: list[tuple[list[str], dict[str, str]]]) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        for cmd, env in cmds
    ]
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


@contextmanager
def _processes(transport_env: dict[str, str], compensation: str, tmp: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """sim-plant and servo-node, wired through the relay's subject-IDs."""
    base = _base_env(transport_env)
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
    with _started([
        ([sys.executable, "-m", "sim_plant_node", "--registry", str(tmp / "plant.db")], plant_env),
        ([str(bin_dir / "servo-node"), "run", "--registry", str(tmp / f"servo-{compensation}.db")], servo_env),
    ]) as procs:
        yield procs


@contextmanager
def _cia402_processes(transport_env: dict[str, str], mode: str, servo_can: str, drive_can: str,
                      tmp: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """``sim-plant --canopen`` on ``drive_can`` and a ``cia402`` servo-node in ``mode`` on ``servo_can``."""
    base = _base_env(transport_env)
    servo_env = base | {
        "UAVCAN__NODE__ID": str(SERVO),
        "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SETPOINT),
        "SERVO__DRIVE__BACKEND": "cia402",
        "SERVO__DRIVE__MODE": mode,
        "SERVO__DRIVE__CAN__IFACE": servo_can,
        "SERVO__DRIVE__CANOPEN__NODE_ID": str(DRIVE_ID),
        **({"SERVO__CONTROL__TORQUE_GAINS": "1600 80"} if mode == "torque" else {}),  # ω = 40 rad/s, as CSV's k
    }
    bin_dir = Path(sys.executable).parent
    with _started([
        ([sys.executable, "-m", "sim_plant_node", "--registry", ":memory:", "--canopen", str(DRIVE_ID),
          "--can", drive_can], base),
        ([str(bin_dir / "servo-node"), "run", "--registry", str(tmp / f"servo-{mode}.db")], servo_env),
    ]) as procs:
        yield procs


@contextmanager
def _odrive_processes(transport_env: dict[str, str], mode: str, servo_can: str, drive_can: str,
                      tmp: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """``sim-plant --odrive`` on ``drive_can`` and an ``odrive`` servo-node in ``mode`` on ``servo_can``."""
    base = _base_env(transport_env)
    servo_env = base | {
        "UAVCAN__NODE__ID": str(SERVO),
        "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SETPOINT),
        "SERVO__DRIVE__BACKEND": "odrive",
        "SERVO__DRIVE__MODE": mode,
        "SERVO__DRIVE__CAN__IFACE": servo_can,
        "SERVO__DRIVE__ODRIVE__NODE_ID": str(DRIVE_ID),
        **({"SERVO__CONTROL__TORQUE_GAINS": "1600 80"} if mode == "torque" else {}),
    }
    bin_dir = Path(sys.executable).parent
    with _started([
        ([sys.executable, "-m", "sim_plant_node", "--registry", ":memory:", "--odrive", str(DRIVE_ID),
          "--can", drive_can], base),
        ([str(bin_dir / "servo-node"), "run", "--registry", str(tmp / f"servo-odrive-{mode}.db")], servo_env),
    ]) as procs:
        yield procs


class CanRelay:
    """A delaying bridge between two CAN buses: each frame heard on one is sent on the other ``delay`` [second]
    after its reception, in the order heard (one thread per direction). Own frames are not heard back
    (:class:`cyphal_common.transport.UdpMulticastCanBus` drops its echoes), so nothing circulates."""

    def __init__(self, iface_a: str, iface_b: str) -> None:
        from cyphal_common.transport import open_can_bus

        self.delay = 0.0
        self.frames = 0
        self._stop = threading.Event()
        self._buses = [open_can_bus(iface_a), open_can_bus(iface_b)]
        self._threads = [
            threading.Thread(target=self._run, args=(src, dst), name=f"can-relay {i}", daemon=True)
            for i, (src, dst) in enumerate([self._buses, self._buses[::-1]])
        ]
        for t in self._threads:
            t.start()

    def _run(self, src: Any, dst: Any) -> None:
        pending: deque[tuple[float, Any]] = deque()
        while not self._stop.is_set():
            timeout = max(0.0, pending[0][0] - time.monotonic()) if pending else 0.05
            msg = src.recv(timeout)
            if msg is not None:
                pending.append((time.monotonic() + self.delay, msg))
            while pending and pending[0][0] <= time.monotonic():
                try:
                    dst.send(pending.popleft()[1])
                    self.frames += 1
                except Exception:  # A full socket buffer loses the frame, as an overloaded gateway would.
                    pass

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2.0)
        for bus in self._buses:
            bus.shutdown()


class Client:
    """This process's node: the setpoint publisher and a ``sys.motion`` reader."""

    def __init__(self, transport_env: dict[str, str]) -> None:
        import pycyphal.presentation
        import uavcan.primitive.scalar
        import uavcan.register

        from cyphal_common.transport import make_transport

        regs: dict[str, Any] = {"uavcan.node.id": RELAY}
        if "UAVCAN__CAN__IFACE" in transport_env:
            regs.update({"uavcan.can.iface": transport_env["UAVCAN__CAN__IFACE"], "uavcan.can.mtu": 64})
        else:
            regs["uavcan.udp.iface"] = transport_env["UAVCAN__UDP__IFACE"]
        self.pres = pycyphal.presentation.Presentation(make_transport(regs))
        self.closed = False
        self._setpoint = self.pres.make_publisher(uavcan.primitive.scalar.Real32_1_0, SETPOINT)
        self._real32 = uavcan.primitive.scalar.Real32_1_0
        self._access = self.pres.make_client_with_fixed_service_id(uavcan.register.Access_1_0, SERVO)
        self._access.response_timeout = 2.0
        self._access_t = uavcan.register.Access_1_0
        self._name_t = uavcan.register.Name_1_0

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


class Relay(Client):
    """The client that is also the delaying relay of the UDRAL drive link."""

    def __init__(self, transport_env: dict[str, str]) -> None:
        import reg.udral.physics.dynamics.rotation as rot
        import reg.udral.service.actuator.common as actuator
        import reg.udral.service.common as common

        super().__init__(transport_env)
        self.delay = 0.0
        routes = [
            (rot.Planar_0_1, SERVO_SIDE["setpoint"], DRIVE_SIDE["setpoint"]),
            (common.Readiness_0_1, SERVO_SIDE["readiness"], DRIVE_SIDE["readiness"]),
            (rot.PlanarTs_0_1, SERVO_SIDE["dynamics"], DRIVE_SIDE["dynamics"]),
            (actuator.Feedback_0_1, SERVO_SIDE["feedback"], DRIVE_SIDE["feedback"]),
        ]
        for dtype, src, dst in routes:
            pub = self.pres.make_publisher(dtype, dst)
            self.pres.make_subscriber(dtype, src).receive_in_background(self._forwarder(pub))

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

async def _wait_up(client: Client, procs: list[subprocess.Popen[str]], what: str) -> None:
    """Until the servo is up (kernels loaded) and hears its drive at 0."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        m = await client.motion() if all(p.poll() is None for p in procs) else None
        if m is not None and m.get("meas", [math.nan])[0] == 0.0:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{what}: the servo did not come up with its drive")


async def _measure(client: Client, set_delay: Any, latencies: list[float], row: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for latency in latencies:
        set_delay(latency)
        await client.move(-1.0)  # Unmeasured: away and back to 0 with this latency, the link model adapts.
        await client.move(0.0)
        m = await client.move(TARGET)
        rows.append(row | {"latency": latency, "motion": m})
        print(f"  {row['transport']:7s} {row['law']:8s} {latency * 1e3:4.0f} ms: {m}", flush=True)
    return rows


async def _run_config(transport: str, compensation: str, latencies: list[float], rt: bool) -> list[dict[str, Any]]:
    env = _transport_env(transport)
    with tempfile.TemporaryDirectory() as tmp, _processes(env, compensation, Path(tmp)) as procs:
        relay = Relay(env)
        try:
            await _wait_up(relay, procs, f"{transport}/{compensation}")
            if rt:
                rt = all(_realtime(p.pid) for p in procs) and _realtime(0)

            def set_delay(x: float) -> None:
                relay.delay = x

            return await _measure(relay, set_delay, latencies, {"transport": transport, "law": compensation, "rt": rt})
        finally:
            relay.close()


async def _run_cia402(mode: str, latencies: list[float], rt: bool, kind: str = "canopen") -> list[dict[str, Any]]:
    env = {"UAVCAN__UDP__IFACE": "127.0.0.1"}
    servo_can, drive_can = _udpmc_iface(), _udpmc_iface()
    can_relay = CanRelay(servo_can, drive_can)
    processes = _cia402_processes if kind == "canopen" else _odrive_processes
    try:
        with tempfile.TemporaryDirectory() as tmp, processes(env, mode, servo_can, drive_can, Path(tmp)) as procs:
            client = Client(env)
            try:
                await _wait_up(client, procs, f"{kind}/{mode}")
                if rt:
                    rt = all(_realtime(p.pid) for p in procs) and _realtime(0)

                def set_delay(x: float) -> None:
                    can_relay.delay = x

                return await _measure(client, set_delay, latencies, {"transport": kind, "law": mode, "rt": rt})
            finally:
                client.close()
    finally:
        can_relay.close()


def _fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, float) else f"{x!s:>{spec.split('.')[0] or 1}}"


def _link(m: dict[str, Any]) -> str:
    link = m.get("link", ["-"] * 4)
    return f"{_fmt(link[0], '5.2f')}/{_fmt(link[1], '6.1f')} {_fmt(link[2], '5.2f')}/{_fmt(link[3], '6.2f')}"


def _cells(m: dict[str, Any]) -> str:
    return (f"{_fmt(m.get('track_max', '-'), '9.2e')} {_fmt(m.get('settled', '-'), '7.3f')} "
            f"{_fmt(m.get('over', '-'), '9.1e')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latencies", type=float, nargs="+", default=[0.0, 5.0, 10.0, 20.0], help="one-way [ms]")
    ap.add_argument("--transports", nargs="+", default=["udp", "udpmc", "canopen", "odrive"],
                    choices=["udp", "udpmc", "canopen", "odrive"],
                    help="canopen: the cia402 backend and the emulated drive; odrive: the odrive backend and the "
                    "emulated ODrive")
    ap.add_argument("--modes", nargs="+", default=list(CIA402_MODES), choices=list(CIA402_MODES),
                    help="servo.drive.mode of the canopen and odrive rows")
    ap.add_argument("--no-rt", action="store_true", help="do not ask for SCHED_FIFO")
    args = ap.parse_args()
    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    latencies = [x * 1e-3 for x in args.latencies]
    udral = [t for t in args.transports if t not in ("canopen", "odrive")]
    rows: list[dict[str, Any]] = []
    for transport in udral:
        for law in ("off", "predict"):
            rows += asyncio.run(_run_config(transport, law, latencies, not args.no_rt))
    if "canopen" in args.transports:
        for mode in args.modes:
            rows += asyncio.run(_run_cia402(mode, latencies, not args.no_rt))
    if "odrive" in args.transports:
        for mode in args.modes:
            rows += asyncio.run(_run_cia402(mode, latencies, not args.no_rt, "odrive"))
    by = {(r["transport"], r["latency"], r["law"]): r["motion"] or {} for r in rows}
    print("\nThe 0 → 3 move (v 10, a 50, j 500; plan 0.600 s) through a relay adding a one-way latency each way.")
    print("track_max, settled: the servo's sys.motion; age, delay: the link as the servo measured it [ms].")
    if udral:
        print("UDRAL drive (sim-plant): before = servo.drive.compensation off (the law as it was), after = predict "
              "(the link model).\n")
        print(f"{'':16s} | {'before':^27s} | {'after':^27s} | {'link (after) [ms]':^25s}")
        print(
            f"{'transport added':16s} | {'track_max':>9s} {'settled':>7s} {'overshoot':>9s} | {'track_max':>9s} "
            f"{'settled':>7s} {'overshoot':>9s} | {'age p50/max':>12s} {'delay p50/max':>12s}"
        )
        print("-" * 106)
        for transport in udral:
            for latency in latencies:
                before, after = by.get((transport, latency, "off"), {}), by.get((transport, latency, "predict"), {})
                print(f"{transport:6s} {latency * 1e3:6.0f} ms | {_cells(before)} | {_cells(after)} | {_link(after)}")
    if "canopen" in args.transports:
        print("\nCiA 402 drive (cia402 backend, sim-plant --canopen, 200 Hz SYNC) behind a delaying CAN bridge; CST "
              "with K_p, K_d = 1600, 80.\n")
        print(f"{'mode added':16s} | {'track_max':>9s} {'settled':>7s} {'overshoot':>9s} | "
              f"{'age p50/max':>12s} {'delay p50/max':>12s}")
        print("-" * 72)
        for mode in args.modes:
            for latency in latencies:
                m = by.get(("canopen", latency, mode), {})
                print(f"{CIA402_MODES[mode]:6s} {latency * 1e3:6.0f} ms | {_cells(m)} | {_link(m)}")
    if "odrive" in args.transports:
        print("\nODrive (odrive backend, sim-plant --odrive: commands at 200 Hz, estimates at 100 Hz, unstamped) "
              "behind a delaying CAN bridge; torque with K_p, K_d = 1600, 80.\n")
        print(f"{'input added':16s} | {'track_max':>9s} {'settled':>7s} {'overshoot':>9s} | "
              f"{'age p50/max':>12s} {'delay p50/max':>12s}")
        print("-" * 72)
        for mode in args.modes:
            for latency in latencies:
                m = by.get(("odrive", latency, mode), {})
                print(f"{ODRIVE_MODES[mode]:6s} {latency * 1e3:6.0f} ms | {_cells(m)} | {_link(m)}")
    print(f"\nSCHED_FIFO: {'on' if all(r['rt'] for r in rows) else 'not (everywhere) permitted'}")


if __name__ == "__main__":
    main()
