"""The compose bench's checks, run by the tester container inside the stack's network (``make compose-test``).

One subcommand per check; each prints ``PASS <check>: …`` or ``FAIL <check>: …`` and exits 0 or 1. Commands go
through the real yakut CLI (``y pub``); observation through this process's own pycyphal node (register reads,
subscriptions), so polling starts no process per read. The checks that need the host to act (kill a drive
container, ``docker stop`` a servo) print ``READY`` once the axis moves and then watch what follows.

Axis i of docker-compose.yml: servo node-ID 10+i, drive 20+i; subjects setpoint_servo 100+i, dynamics 130+i,
drive dynamics 220+i, drive feedback 230+i. Axis 4 (profile ``cia402``): servo node-ID 14 with the ``cia402``
backend, its drive the emulated CiA 402 drive at CANopen node-ID 4 (no Cyphal node: it is seen through the servo's
``sys.drive`` and ``dynamics``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cyphal_common import dsdl
from cyphal_common.heartbeat_probe import HEALTH_WARNING, udp_iface, wait_heartbeat

TESTER_NODE_ID = 40
_YAKUT_IDS = itertools.cycle(range(41, 48))  # a fresh client node-ID per `y` call (transfer-ID timeout)
ENGAGED, STANDBY = 3, 2  # reg.udral.service.common.Readiness
ARRIVAL_TOLERANCE = 1e-2
SPREAD_FRACTION = 0.2
"""Arrival spread (the nodes' t0 + T) that still counts as together, as a fraction of the common duration. The
nodes' plans last the common duration exactly (checked apart); the spread is their start skew, each node's latency
from reception to its next loop tick: a few ms on a quiet host, tens of ms on an overloaded one. Unsynchronised,
the axes' own time-optimal durations of this check's move differ by more than half the longest."""


@dataclass(frozen=True)
class Axis:
    index: int

    @property
    def servo(self) -> int:
        return 10 + self.index

    @property
    def drive(self) -> int:
        return 20 + self.index

    @property
    def setpoint(self) -> int:
        return 100 + self.index

    @property
    def dynamics(self) -> int:
        return 130 + self.index

    @property
    def drive_dynamics(self) -> int:
        return 220 + self.index

    @property
    def drive_feedback(self) -> int:
        return 230 + self.index


AXES = [Axis(i) for i in (1, 2, 3)]
CIA402_AXIS = Axis(4)
CIA402_DRIVE_ID = 4


class CheckFailedError(Exception):
    """A check's verdict: FAIL with this reason."""


def _iface() -> str:
    return udp_iface(os.environ.get("UAVCAN__UDP__IFACE"))


def _y_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UAVCAN__")}
    env.update(CYPHAL_PATH=str(dsdl.dsdl_dir()), PYCYPHAL_PATH=str(dsdl.ensure_compiled()),
               UAVCAN__UDP__IFACE=_iface(), UAVCAN__NODE__ID=str(next(_YAKUT_IDS)))
    return env


async def publish(targets: dict[Axis, float], seconds: float) -> asyncio.subprocess.Process:
    """``y pub`` of Real32 target positions to the axes' setpoint subjects at 10 Hz for ``seconds``."""
    args = ["y", "pub", "-T", "0.1", "-N", str(max(1, round(seconds * 10)))]
    for ax, p in targets.items():
        args += [f"{ax.setpoint}:uavcan.primitive.scalar.real32", f"{{value: {p!r}}}"]
    return await asyncio.create_subprocess_exec(*args, env=_y_env(), stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)


async def end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
    await proc.wait()


class Bus:
    """The tester's own pycyphal node on the stack's network: register reads and subscriptions."""

    def __init__(self) -> None:
        import pycyphal.presentation

        from cyphal_common.transport import make_transport

        transport = make_transport({"uavcan.node.id": TESTER_NODE_ID, "uavcan.udp.iface": _iface()})
        self.pres = pycyphal.presentation.Presentation(transport)
        self._clients: dict[int, Any] = {}

    def close(self) -> None:
        self.pres.close()

    async def read(self, node_id: int, name: str) -> Any:
        import uavcan.register
        from pycyphal.application.register import ValueProxy

        client = self._clients.get(node_id)
        if client is None:
            client = self.pres.make_client_with_fixed_service_id(uavcan.register.Access_1_0, node_id)
            client.response_timeout = 1.0
            self._clients[node_id] = client
        for _ in range(3):
            res = await client.call(uavcan.register.Access_1_0.Request(name=uavcan.register.Name_1_0(name)))
            if res is not None:
                value = res[0].value
                if value.string is not None:
                    return value.string.value.tobytes().decode()
                return list(ValueProxy(value).floats)
        raise CheckFailedError(f"node {node_id} did not answer a read of {name}")

    async def json(self, node_id: int, name: str) -> Any:
        return json.loads(await self.read(node_id, name))

    async def status(self, ax: Axis) -> dict[str, Any]:
        return dict((await self.json(ax.servo, "sys.status"))["servo"])

    async def at_rest(self, ax: Axis, timeout: float = 5.0) -> float:
        """The axis's measured position once it is at rest (|v| < 1e-3; the last one read after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            meas = (await self.json(ax.servo, "sys.motion"))["meas"]
            if abs(meas[1]) < 1e-3 or time.monotonic() > deadline:
                return float(meas[0])
            await asyncio.sleep(0.1)

    async def wait_moving(self, ax: Axis, speed: float = 2.0, timeout: float = 20.0) -> float:
        """Wait until the axis's measured |v| exceeds ``speed``; returns its position."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            meas = (await self.json(ax.servo, "sys.motion"))["meas"]
            if abs(meas[1]) > speed:
                return float(meas[0])
            await asyncio.sleep(0.1)
        raise CheckFailedError(f"servo {ax.servo} did not start moving within {timeout} s")


async def check_move(bus: Bus, targets: list[float]) -> str:
    """Every axis reaches its own target (published with yakut), settles there, and reports no error."""
    goal = dict(zip(AXES, targets, strict=True))
    pub = await publish(goal, seconds=15.0)
    try:
        deadline = time.monotonic() + 15.0
        pending = set(AXES)
        seen: dict[Axis, list[float]] = {}
        while pending and time.monotonic() < deadline:
            for ax in sorted(pending, key=lambda a: a.index):
                motion = await bus.json(ax.servo, "sys.motion")
                seen[ax] = motion["meas"]
                if abs(motion["meas"][0] - goal[ax]) < ARRIVAL_TOLERANCE and isinstance(motion.get("settled"), float):
                    pending.discard(ax)
            await asyncio.sleep(0.2)
        if pending:
            raise CheckFailedError("not at target: " + ", ".join(f"servo {a.servo} at {seen.get(a)} (target {goal[a]})"
                                                         for a in pending))
        errors = {ax.servo: (await bus.status(ax))["error"] for ax in AXES}
        if any(errors.values()):
            raise CheckFailedError(f"errors reported: {errors}")
    finally:
        await end(pub)
    return "every axis at its target: " + ", ".join(f"servo {a.servo} {goal[a]:+.3f}" for a in AXES)


_ROW = re.compile(r"^node (\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)(?:\s+\S+)*\s*$")
"""An axis row of servo-coord's table: node-ID, from, to, planned s, node T s, then whatever columns follow (the
table grew a lag column once, and this check silently stopped finding its rows)."""


async def check_coordinated(bus: Bus, targets: list[float], sync: str) -> str:
    """``servo-coord move`` from inside the network: every node takes its setpoint (none REJECTED), every node's
    plan lasts the common duration, the arrivals (t0 + T as the nodes report) lie within SPREAD_FRACTION of it,
    and every axis ends at its target."""
    env = _y_env()
    axes = [arg for ax in AXES for arg in ("--axis", f"{ax.servo}:{ax.setpoint}:{ax.dynamics}")]
    proc = await asyncio.create_subprocess_exec(
        "servo-coord", "move", *axes, "--to", ",".join(map(str, targets)), "--sync", sync, "--hold", "1.0",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    text = out.decode()
    print(text, end="")
    if proc.returncode != 0 or "REJECTED" in text:
        raise CheckFailedError(f"servo-coord exited {proc.returncode}")
    rows = {int(m[1]): m.groups()[1:] for m in map(_ROW.match, text.splitlines()) if m}
    spread = re.search(r"arrival spread ([0-9.]+) ms", text)
    if sorted(rows) != [a.servo for a in AXES] or spread is None:
        raise CheckFailedError("no result table from servo-coord")
    durations = [float(r[3]) for r in rows.values()]  # node T s
    if max(durations) - min(durations) > 2e-3:
        raise CheckFailedError(f"the nodes' planned durations differ: {durations}")
    if float(spread[1]) * 1e-3 > SPREAD_FRACTION * durations[0]:
        raise CheckFailedError(f"arrival spread {spread[1]} ms > {SPREAD_FRACTION:.0%} of {durations[0]:.3f} s")
    final = [await bus.at_rest(ax) for ax in AXES]
    if any(not abs(p - t) < ARRIVAL_TOLERANCE for p, t in zip(final, targets, strict=True)):
        raise CheckFailedError(f"not at the targets {targets} at rest after the hold: {final}")
    status = {ax.servo: (await bus.status(ax))["error"] for ax in AXES}
    if any(status.values()):
        raise CheckFailedError(f"errors reported: {status}")
    return f"common duration {durations[0]:.3f} s, arrival spread {spread[1]} ms, at the targets {final}"


async def check_drive_lost(bus: Bus, ax: Axis) -> str:
    """Mid-move, the host kills the axis's drive container: its servo reports error 3 (drive lost) and stops,
    its heartbeat says WARNING; the other axes report no error."""
    start = float((await bus.json(ax.servo, "sys.motion"))["meas"][0])
    pub = await publish({ax: start + 100.0}, seconds=30.0)
    try:
        await bus.wait_moving(ax)
        print("READY", flush=True)
        # The drive is gone for good: the error must hold and the heartbeat say WARNING (not merely once: a
        # starved host may time out a live drive's feedback for a moment too, and hear it again).
        deadline = time.monotonic() + 15.0
        st: dict[str, Any] = {}
        hb = None
        while time.monotonic() < deadline:
            st = await bus.status(ax)
            if st["error"] == 3 and st["state"] == "error":
                _, hb = await asyncio.get_running_loop().run_in_executor(None, wait_heartbeat, ax.servo, _iface(), 1.5)
                if hb is not None and hb.health == HEALTH_WARNING and (await bus.status(ax))["error"] == 3:
                    break
            await asyncio.sleep(0.2)
        else:
            raise CheckFailedError(f"servo {ax.servo} did not hold error 3 with a WARNING heartbeat: {st}, {hb}")
        others = {o.servo: (await bus.status(o))["error"] for o in AXES if o != ax}
        if any(others.values()):
            raise CheckFailedError(f"the other axes report errors: {others}")
    finally:
        await end(pub)
    return f"servo {ax.servo}: error 3 ({st['reason']}), heartbeat WARNING; the others no error"


async def check_safe_stop(bus: Bus, ax: Axis) -> str:
    """Mid-move, the host stops the axis's servo container (SIGTERM): the servo brings the joint to rest, then
    tells the drive STANDBY — the drive never had to quick-stop a vanished controller (health ADVISORY)."""
    import reg.udral.physics.dynamics.rotation as rotation
    import reg.udral.service.actuator.common as actuator

    from cyphal_common.udral import read_dynamics

    samples: list[tuple[float, float, float]] = []  # the drive's (timestamp, position, velocity)
    feedback: list[tuple[float, int, int]] = []  # (reception, readiness, health)
    dyn = bus.pres.make_subscriber(rotation.PlanarTs_0_1, ax.drive_dynamics)
    fb = bus.pres.make_subscriber(actuator.Feedback_0_1, ax.drive_feedback)

    async def on_dyn(msg: Any, _meta: Any) -> None:
        p, v, _, _ = read_dynamics(msg.value)
        samples.append((msg.timestamp.microsecond * 1e-6, p, v))

    async def on_fb(msg: Any, _meta: Any) -> None:
        feedback.append((time.monotonic(), int(msg.heartbeat.readiness.value), int(msg.heartbeat.health.value)))

    dyn.receive_in_background(on_dyn)
    fb.receive_in_background(on_fb)
    start = float((await bus.json(ax.servo, "sys.motion"))["meas"][0])
    target = start + 100.0  # Far enough that a stop taken late on a busy host is still mid-way.
    pub = await publish({ax: target}, seconds=30.0)
    try:
        await bus.wait_moving(ax)
        mark = len(feedback)
        print("READY", flush=True)
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline and not any(r == STANDBY for _, r, _ in feedback[mark:]):
            await asyncio.sleep(0.05)
        n_dyn = len(samples)
        await asyncio.sleep(0.5)  # Rest must last after the STANDBY too.
    finally:
        await end(pub)
        dyn.close()
        fb.close()
    after = feedback[mark:]
    if not any(r == STANDBY for _, r, _ in after):
        raise CheckFailedError(f"drive {ax.drive} never got STANDBY (feedback {after[-3:]})")
    if any(h != 0 for _, _, h in after):
        raise CheckFailedError(f"drive {ax.drive} health not NOMINAL during the stop (a quick stop?): "
                     f"{sorted({h for _, _, h in after})}")
    at_standby = samples[n_dyn - 1] if n_dyn else None
    tail = samples[n_dyn:]
    if at_standby is None or abs(at_standby[2]) > 0.02 or any(abs(v) > 0.02 for _, _, v in tail):
        raise CheckFailedError(f"the joint was not at rest at STANDBY: {at_standby}, after: {tail[-3:]}")
    if not abs(at_standby[1] - target) > 1.0:
        raise CheckFailedError(f"the move was not stopped mid-way: at {at_standby[1]:.3f}, target {target:.3f}")
    vmax = max((abs(v) for _, _, v in samples), default=math.nan)
    return (f"servo {ax.servo}: joint (peak |v| {vmax:.2f}) to rest at {at_standby[1]:.3f} (target {target:.1f}), "
            f"then STANDBY; drive health NOMINAL throughout")


async def check_cia402_move(bus: Bus, target: float) -> str:
    """The CiA 402 axis, commanded with yakut, reaches ``target`` and settles: its servo's ``sys.motion`` there, its
    ``dynamics`` (the drive's position actual 0x6064 as the servo reads it by TPDO) there, the drive OPERATION
    ENABLED in CSV at CANopen node-ID 4 while commanded, no error; when the setpoints stop (deadman), the drive is
    brought to rest and then Disable Operation (SWITCHED ON)."""
    import zubax.physics.dynamics as dynamics

    ax = CIA402_AXIS
    drive = await bus.json(ax.servo, "sys.drive")
    if drive.get("node") != CIA402_DRIVE_ID or drive.get("state") != "SWITCHED ON":
        raise CheckFailedError(f"servo {ax.servo}'s drive not brought up: {drive}")
    samples: list[float] = []
    sub = bus.pres.make_subscriber(dynamics.DoF3rdTs_1_0, ax.dynamics)

    async def on_dyn(msg: Any, _meta: Any) -> None:
        samples.append(float(msg.value.kinematics.base.position))

    sub.receive_in_background(on_dyn)
    pub = await publish({ax: target}, seconds=15.0)
    try:
        deadline = time.monotonic() + 15.0
        motion: dict[str, Any] = {}
        while time.monotonic() < deadline:
            motion = await bus.json(ax.servo, "sys.motion")
            if abs(motion["meas"][0] - target) < ARRIVAL_TOLERANCE and isinstance(motion.get("settled"), float):
                break
            await asyncio.sleep(0.2)
        else:
            raise CheckFailedError(f"servo {ax.servo} not at {target}: {motion.get('meas')}")
        drive = await bus.json(ax.servo, "sys.drive")
        if drive.get("state") != "OPERATION ENABLED" or drive.get("mode") != "CSV":
            raise CheckFailedError(f"the drive while commanded: {drive}")
        await asyncio.sleep(0.5)
        if not samples or abs(samples[-1] - target) > ARRIVAL_TOLERANCE:
            raise CheckFailedError(f"servo {ax.servo}'s dynamics: {samples[-3:]} (target {target})")
        error = (await bus.status(ax))["error"]
        if error:
            raise CheckFailedError(f"servo {ax.servo} reports error {error}: {await bus.status(ax)}")
    finally:
        await end(pub)
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:  # The deadman stop: the drive disabled at rest.
        drive = await bus.json(ax.servo, "sys.drive")
        if drive.get("state") == "SWITCHED ON":
            break
        await asyncio.sleep(0.2)
    else:
        raise CheckFailedError(f"the drive not disabled after the setpoints stopped: {drive}")
    rest = (await bus.json(ax.servo, "sys.motion"))["meas"]
    sub.close()
    if abs(rest[1]) > 1e-3 or abs(rest[0] - target) > ARRIVAL_TOLERANCE:
        raise CheckFailedError(f"not at rest at the target after the stop: {rest}")
    return (f"servo {ax.servo} at {motion['meas'][0]:+.4f} (target {target:+.3f}), settled after "
            f"{motion['settled']} s, track_max {motion['track_max']:.1e}, dynamics {samples[-1]:+.4f}; "
            f"drive CANopen node {drive['node']} CSV, SWITCHED ON at rest after the deadman stop")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="checks.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="check", required=True)
    mv = sub.add_parser("move", help="every axis to its own target (yakut)")
    mv.add_argument("targets", help="p1,p2,p3")
    co = sub.add_parser("coordinated", help="servo-coord moves all axes to arrive together")
    co.add_argument("targets", help="p1,p2,p3")
    co.add_argument("--sync", default="phase", choices=["phase", "time"])
    c4 = sub.add_parser("cia402-move", help="the CiA 402 axis (profile cia402) to a target and back to rest")
    c4.add_argument("target", type=float)
    for name in ("drive-lost", "safe-stop"):
        sub.add_parser(name).add_argument("axis", type=int, choices=[a.index for a in AXES])
    args = ap.parse_args(argv)
    dsdl.ensure_compiled()

    async def run() -> str:
        bus = Bus()
        try:
            if args.check == "move":
                return await check_move(bus, [float(x) for x in args.targets.split(",")])
            if args.check == "coordinated":
                return await check_coordinated(bus, [float(x) for x in args.targets.split(",")], args.sync)
            if args.check == "cia402-move":
                return await check_cia402_move(bus, args.target)
            if args.check == "drive-lost":
                return await check_drive_lost(bus, AXES[args.axis - 1])
            return await check_safe_stop(bus, AXES[args.axis - 1])
        finally:
            bus.close()

    try:
        print(f"PASS {args.check}: {asyncio.run(run())}", flush=True)
        return 0
    except CheckFailedError as ex:
        print(f"FAIL {args.check}: {ex}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
