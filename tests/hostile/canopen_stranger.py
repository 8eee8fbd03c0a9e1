"""A stranger on the CANopen bus of a servo and its drive: any node can send NMT, SDO, SYNC and EMCY, and does.

:class:`Stranger` is a canopen ``Network`` on the test's ``udpmc:`` iface with a ``RemoteNode`` of the emulated
drive (its shipped EDS): it writes the drive's objects by SDO and sends NMT commands, as an attacker (or a buggy
tool) would, and reads the joint's own state back from the drive (velocity 0x606C, position 0x6064, statusword) to
judge what the joint did. The drive's one SDO server is shared with the servo, which reads and writes it too: a read
whose answer was the servo's (canopen names that: "another SDO client") is asked again.

:class:`CanListener` records every frame of some COB-IDs with the kernel's arrival stamp (python-can's
``udp_multicast`` stamps each datagram with ``SO_TIMESTAMPNS``), so that gaps are measured as the bus saw them, not
as this busy process read them. :func:`flood` sends EMCY frames from a process of its own with plain python-can.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import canopen

from cyphal_common.transport import open_can_bus
from sim_plant_node.cia402 import eds_path
from tests.procs import base_env, wait_for

COUNTS = 10000.0
"""Increments per unit of the emulated drive (its default ``sim.canopen.counts_per_unit``)."""


@dataclass
class JointSample:
    """The joint as the drive itself reports it: monotonic time, position [unit], velocity [unit/s]."""

    t: float
    p: float
    v: float


class Stranger:
    """A canopen node on ``iface`` that is not the drive's master (it produces no heartbeat of its own)."""

    def __init__(self, iface: str, drive_id: int) -> None:
        self.network = canopen.Network(open_can_bus(iface))
        self.network.NOTIFIER_CYCLE = 0.1
        self.network.connect()
        with eds_path() as path:
            self.node = canopen.RemoteNode(drive_id, str(path))
        self.network.add_node(self.node)
        self.node.sdo.RESPONSE_TIMEOUT = 0.5
        self._sdo = threading.Lock()

    # ---------------------------------------------------------------- the attacks

    def write(self, index: int, sub: int | None, value: int, attempts: int = 20) -> None:
        """An SDO download to the drive (asked again while the servo's own SDO traffic answers it instead)."""
        self._retry(lambda: self._var(index, sub).__setattr__("raw", value), attempts)

    def nmt(self, command: int) -> None:
        """An NMT command addressed to the drive (``000: <command> <node-ID>``)."""
        self.node.nmt.send_command(command)

    # ---------------------------------------------------------------- reading the drive

    def read(self, index: int, sub: int | None = None, attempts: int = 20) -> int:
        """An SDO upload from the drive."""
        return int(self._retry(lambda: self._var(index, sub).raw, attempts))

    def joint(self) -> JointSample:
        """The joint's position and velocity as the drive reports them (SDO)."""
        p = self.read(0x6064) / COUNTS
        v = self.read(0x606C) / COUNTS
        return JointSample(time.monotonic(), p, v)

    def statusword(self) -> int:
        return self.read(0x6041)

    def _var(self, index: int, sub: int | None) -> Any:
        return self.node.sdo[index] if sub is None else self.node.sdo[index][sub]

    def _retry(self, fn: Any, attempts: int) -> Any:
        last: Exception | None = None
        for _ in range(attempts):
            try:
                with self._sdo:
                    return fn()
            except canopen.SdoCommunicationError as ex:  # The servo's transfer answered, or no answer (STOPPED).
                last = ex
                time.sleep(0.02)
        raise AssertionError(f"the drive does not answer SDO: {last}")

    def close(self) -> None:
        self.network.disconnect()


@contextlib.contextmanager
def stranger(iface: str, drive_id: int) -> Iterator[Stranger]:
    s = Stranger(iface, drive_id)
    try:
        yield s
    finally:
        s.close()


def at_rest(s: Stranger, v_rest: float, timeout: float, hold_s: float = 0.3) -> JointSample:
    """The first sample of a run of samples within ``v_rest`` that has lasted ``hold_s``; fails after ``timeout``
    naming the last samples."""
    samples: list[JointSample] = []

    def settled() -> JointSample | None:
        samples.append(s.joint())
        moving = [k for k, x in enumerate(samples) if abs(x.v) > v_rest]
        start = moving[-1] + 1 if moving else 0
        if start < len(samples) and samples[-1].t - samples[start].t >= hold_s:
            return samples[start]
        return None

    try:
        return wait_for(settled, timeout, interval=0.05, what=f"the joint at rest (|v| <= {v_rest})")
    except AssertionError as ex:
        raise AssertionError(f"{ex}; the last readings: {samples[-5:]}") from None


class CanListener:
    """Frames of some COB-IDs on ``iface`` with their kernel arrival stamps [second, wall clock], in a thread."""

    def __init__(self, iface: str, cob_ids: set[int]) -> None:
        self._bus = open_can_bus(iface)
        self._ids = cob_ids
        self.frames: list[tuple[int, float, bytes]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="can-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._bus.recv(0.1)
            if msg is not None and msg.arbitration_id in self._ids:
                with self._lock:
                    self.frames.append((msg.arbitration_id, float(msg.timestamp), bytes(msg.data)))

    def stamps(self, cob_id: int, since: float = 0.0) -> list[float]:
        """Arrival stamps of ``cob_id`` at or after wall-clock ``since``."""
        with self._lock:
            return [t for c, t, _ in self.frames if c == cob_id and t >= since]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._bus.shutdown()


class JointTimeline(CanListener):
    """The joint's velocity and position as the drive itself put them on the bus, kernel-stamped: its TPDOs in the
    servo's mapping (TPDO1 statusword + mode display + position, 7 bytes; TPDO2 velocity + torque, 6 bytes) and its
    SDO answers for 0x606C and 0x6064 (to whoever asked: the stranger keeps asking while no TPDO comes)."""

    def __init__(self, iface: str, drive_id: int) -> None:
        self.drive_id = drive_id
        super().__init__(iface, {0x180 + drive_id, 0x280 + drive_id, 0x580 + drive_id})

    def velocities(self, since: float) -> list[tuple[float, float]]:
        """(wall-clock stamp, velocity [unit/s]) from ``since`` on."""
        out = []
        with self._lock:
            frames = list(self.frames)
        for cob, t, data in frames:
            if t < since:
                continue
            if cob == 0x280 + self.drive_id and len(data) == 6:
                out.append((t, int.from_bytes(data[0:4], "little", signed=True) / COUNTS))
            elif cob == 0x580 + self.drive_id and len(data) == 8 and data[0] & 0xE0 == 0x40 and \
                    data[1:4] == bytes([0x6C, 0x60, 0]):
                out.append((t, int.from_bytes(data[4:8], "little", signed=True) / COUNTS))
        return out

    def rest_since(self, since: float, v_rest: float) -> float | None:
        """The stamp from which every velocity reading after ``since`` stays within ``v_rest`` (None: the last one
        does not)."""
        readings = self.velocities(since)
        if not readings or abs(readings[-1][1]) > v_rest:
            return None
        moving = [t for t, v in readings if abs(v) > v_rest]
        if not moving:
            return readings[0][0]
        return next(t for t, _ in readings if t > moving[-1])


def max_gap(stamps: list[float], start: float, end: float) -> float:
    """Largest gap between consecutive stamps in [start, end], the edges included [second]."""
    inner = sorted(t for t in stamps if start <= t <= end)
    edges = [start, *inner, end]
    return max(b - a for a, b in itertools.pairwise(edges))


FLOOD_SCRIPT = """
import sys, time, can
from cyphal_common.transport import open_can_bus
iface, cob_id, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
bus = open_can_bus(iface)
t0 = time.monotonic()
for k in range(count):
    code = 0x1000 + (k % 0x0FFF)
    bus.send(can.Message(arbitration_id=cob_id, is_extended_id=False,
                         data=bytes([code & 0xFF, code >> 8, 0x01, 0, 0, 0, 0, 0])))
    delay = t0 + (k + 1) * seconds / count - time.monotonic()
    if delay > 0:
        time.sleep(delay)
print(f"sent {count} frames in {time.monotonic() - t0:.2f} s")
bus.shutdown()
"""


def flood(iface: str, cob_id: int, count: int, seconds: float) -> subprocess.Popen[str]:
    """``count`` EMCY-shaped frames on ``cob_id`` spread over ``seconds``, from a process of its own (plain
    python-can); the caller waits for it."""
    return subprocess.Popen(
        [sys.executable, "-c", FLOOD_SCRIPT, iface, str(cob_id), str(count), str(seconds)],
        env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
