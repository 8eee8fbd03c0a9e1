"""The processes of an ``odrive`` test: ``servo-node`` and an ODrive (ours, ``sim-plant --odrive``, or someone
else's) on a ``udpmc:`` CAN bus (python-can's udp_multicast, a private group per test), the servo on Cyphal/UDP at
127.0.0.1; and a listener that reads the drive's frames with ODrive's published DBC (``cantools``), independently of
our own codec."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import can

from tests.procs import BIN, SIM_PLANT, RegisterClient, base_env, popen, realtime, servo_node, wait_for

NODE, CLIENT, SETPOINT = 3795, 3796, 3797
"""Uncommon Cyphal node-IDs and subject: other traffic on 127.0.0.1 may use the usual ones."""
DRIVE_ID = 3
"""The ODrive's node-ID (below 8: odrive-can's DBC names axes 0..7)."""
TARGET = 3.0


def iface() -> str:
    r = random.Random()
    return f"udpmc:239.{r.randint(1, 254)}.{r.randint(1, 254)}.{r.randint(1, 254)}:{r.randint(20000, 60000)}"


def dbc() -> Any:
    """ODrive's CAN Simple DBC for firmware 0.6.10 as the ``odrive-can`` package ships it, read by ``cantools``."""
    import cantools
    from odrive_can.utils import get_dbc_path

    return cantools.database.load_file(str(get_dbc_path("odrive-cansimple-0.6.10")))


class Listener:
    """The drive's heartbeats and estimates on the bus, decoded with the DBC (a thread of this process)."""

    def __init__(self, bus_iface: str, node_id: int = DRIVE_ID) -> None:
        from cyphal_common.transport import open_can_bus

        self.db = dbc()
        self.node_id = node_id
        self.bus = open_can_bus(bus_iface)
        self.heartbeat: dict[str, Any] | None = None
        self.estimates: dict[str, Any] | None = None
        self.frames: list[tuple[float, str, dict[str, Any]]] = []
        """(received [monotonic second], message name, signals), the latest 2000."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def message(self, name: str) -> Any:
        return self.db.get_message_by_name(f"Axis{self.node_id}_{name}")

    def send(self, name: str, rtr: bool = False, **signals: Any) -> None:
        m = self.message(name)
        values = {s.name: 0 for s in m.signals} | signals
        data = None if rtr else m.encode(values)
        self.bus.send(can.Message(arbitration_id=m.frame_id, data=data, is_extended_id=False, is_remote_frame=rtr,
                                  dlc=m.length if rtr else len(data or b"")))

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.bus.recv(0.1)
            if msg is None or msg.is_remote_frame or msg.arbitration_id >> 5 != self.node_id:
                continue
            try:
                m = self.db.get_message_by_frame_id(msg.arbitration_id)
                decoded = m.decode(bytes(msg.data))
            except Exception:  # Not in the DBC, or not decodable: not for this listener.
                continue
            name = m.name.split("_", 1)[1]
            # The kernel's receipt instant (wall clock) on the monotonic clock: not when this thread got to it.
            received = float(msg.timestamp) - time.time() + time.monotonic() if msg.timestamp else time.monotonic()
            self.frames.append((received, name, decoded))
            del self.frames[:-2000]
            if name == "Heartbeat":
                self.heartbeat = decoded
            elif name == "Get_Encoder_Estimates":
                self.estimates = decoded

    def state(self) -> str:
        return str(self.heartbeat["Axis_State"]) if self.heartbeat else "UNKNOWN"

    def error(self) -> str:
        return str(self.heartbeat["Axis_Error"]) if self.heartbeat else "UNKNOWN"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.bus.shutdown()


class Rig:
    """One test's processes and the means to watch and command them."""

    def __init__(self, bus_iface: str, env: dict[str, str], reader: RegisterClient) -> None:
        self.iface = bus_iface
        self.env = env
        self.reader = reader
        self.servo_proc: Any = None
        self.plant_proc: Any = None

    def motion(self) -> dict[str, Any]:
        return dict(self.reader.json("sys.motion"))

    def servo(self) -> dict[str, Any]:
        return dict(self.reader.json("sys.status")["servo"])

    def drive(self) -> dict[str, Any]:
        return dict(self.reader.json("sys.drive"))

    @contextmanager
    def publishing(self, target: float) -> Iterator[Any]:
        """Setpoints at 10 Hz (the deadman is 0.5 s) until the block ends."""
        e = {k: v for k, v in self.env.items() if not k.startswith(("SERVO__", "SIM__"))}
        e["UAVCAN__NODE__ID"] = str(CLIENT)
        with popen([str(BIN / "y"), "pub", "-T", "0.1", f"{SETPOINT}:uavcan.primitive.scalar.real32", str(target)],
                   e) as proc:
            yield proc

    def settled(self, target: float = TARGET) -> dict[str, Any] | None:
        m = self.motion()
        return m if isinstance(m["settled"], float) and abs(m["meas"][0] - target) < 0.01 else None

    def move_then_idle(self, what: str) -> tuple[dict[str, Any], list[tuple[str, float]]]:
        """0 → TARGET under setpoints until it settles (the drive in closed loop then, as the DBC reads its
        heartbeat), then the deadman's stop until the drive reports IDLE: (``sys.motion`` at the arrival, the
        (drive state, measured velocity) pairs seen until IDLE)."""
        listener = Listener(self.iface)
        seen: list[tuple[str, float]] = []
        try:
            with self.publishing(TARGET):
                m = wait_for(lambda: self.settled(), timeout=60, what=what)
                assert listener.state() == "CLOSED_LOOP_CONTROL"

            def idle() -> bool:
                state, v = listener.state(), self.motion()["meas"][1]
                seen.append((state, v))
                return state == "IDLE"

            wait_for(idle, timeout=30, interval=0.02, what="IDLE after the deadman stop")
        finally:
            listener.close()
        return m, seen

    def up(self, what: str = "the drive brought up") -> None:
        """Until the servo heard the drive at rest in IDLE, standing by; then both run under SCHED_FIFO where
        permitted (as deployed)."""
        # A generous wait: the first run after an edit compiles the kernels.
        wait_for(lambda: (d := self.drive()).get("state") == "IDLE" and d.get("watchdog") is not None
                 and self.servo()["state"] == "standby", timeout=180, what=what)
        pids = [p.pid for p in (self.plant_proc, self.servo_proc) if p is not None]
        print(f"SCHED_FIFO {'on' if all(realtime(pid) for pid in pids) else 'not permitted'}")


def servo_env(bus_iface: str, mode: str = "velocity", node_id: int = DRIVE_ID, **extra: str) -> dict[str, str]:
    return base_env(**{
        "UAVCAN__NODE__ID": str(NODE),
        "UAVCAN__SUB__SETPOINT_SERVO__ID": str(SETPOINT),
        "SERVO__DRIVE__BACKEND": "odrive",
        "SERVO__DRIVE__MODE": mode,
        "SERVO__DRIVE__CAN__IFACE": bus_iface,
        "SERVO__DRIVE__ODRIVE__NODE_ID": str(node_id),
        "SERVO__PROFILE__VELOCITY": "-10 10",
        "SERVO__PROFILE__ACCELERATION": "-50 50",
        "SERVO__PROFILE__JERK": "500",
        # Torque: critically damped at ω = 40 rad/s (K_p = J·ω², K_d = 2·J·ω, J = 1), as for CiA 402 CST.
        **({"SERVO__CONTROL__TORQUE_GAINS": "1600 80"} if mode == "torque" else {}),
        **extra,  # The test's registers over these.
    })


def endpoints_file() -> str:
    """The emulator's ``flat_endpoints.json`` (its own endpoint IDs)."""
    from importlib import resources

    return str(resources.files("sim_plant_node.odrive").joinpath("flat_endpoints.json"))


@contextmanager
def rig(tmp: Path, mode: str = "velocity", plant: dict[str, str] | None = None, servo: dict[str, str] | None = None,
        plant_cmd: list[str] | None = None, node_id: int = DRIVE_ID) -> Iterator[Rig]:
    """Our emulated ODrive (or ``plant_cmd``) and a servo node commanding node ``node_id`` in ``mode``; their output
    in ``tmp`` (drive.log, servo.log)."""
    bus_iface = iface()
    env = servo_env(bus_iface, mode, node_id, **(servo or {}))
    cmd = plant_cmd or [*SIM_PLANT, "--registry", ":memory:", "--odrive", str(DRIVE_ID), "--can", bus_iface]
    with popen([*cmd, *(["--can", bus_iface] if plant_cmd else [])], base_env(**(plant or {})),
               log=tmp / "drive.log") as plant_proc:
        with servo_node(env, tmp / "servo.db", NODE, log=tmp / "servo.log") as servo_proc:
            reader = RegisterClient(env, NODE, CLIENT + 1)
            r = Rig(bus_iface, env, reader)
            r.servo_proc, r.plant_proc = servo_proc, plant_proc
            try:
                yield r
            finally:
                reader.close()
