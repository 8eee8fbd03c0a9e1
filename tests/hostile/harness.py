"""Watching a real ``servo-node`` process under hostile input: heartbeats, dynamics, memory, its log.

:class:`BusObserver` records every heartbeat whose source is the node under test, stamped by the kernel at its
arrival (:class:`KernelStampedHeartbeats`: gaps are measured where the product promises them, on the bus, even
when the test's own process is too busy to read datagrams on time — a fuzzer holding the GIL made 2–6 s "gaps" out
of heartbeats the node sent every 1.00 s), and, through an in-process pycyphal node (its own, uncommon node-ID) on
UDP 127.0.0.1 in a thread, every ``dynamics`` sample. :func:`rss_kib` reads the resident set
of the process from ``/proc``. :class:`LoggedNode` starts ``servo-node run`` with stdout+stderr in a file, so the
log can be searched for ``Traceback`` while the process runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cyphal_common.heartbeat_probe import CYPHAL_UDP_PORT, HEARTBEAT_SUBJECT_ID, parse_heartbeat
from tests.procs import BusThread, servo_node, wait_for

HEARTBEAT_GAP_LIMIT_S = 1.5
"""The product's promise: heartbeats at 1 Hz, never a gap above 1.5 s (the fuzzing invariant)."""


def rss_kib(pid: int) -> int:
    """VmRSS of a process [KiB]."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


@dataclasses.dataclass
class DynamicsSample:
    """One ``dynamics`` message: receive time [s, monotonic], measured position and velocity."""

    t: float
    position: float
    velocity: float


SO_TIMESTAMP = 29
"""Linux: stamp each received datagram with its arrival time (``SCM_TIMESTAMP``, a struct timeval); Python's
``socket`` module does not name it."""


class KernelStampedHeartbeats:
    """Heartbeats of one node on Cyphal/UDP 127.0.0.1 with the kernel's arrival time, read by a plain thread.

    The times are on ``time.monotonic`` (the kernel stamps the system clock; the offset is taken at each read).
    """

    def __init__(self, node_id: int, on_heartbeat: Any) -> None:
        self._node_id, self._on_heartbeat = node_id, on_heartbeat
        group = socket.inet_aton(f"239.0.{HEARTBEAT_SUBJECT_ID >> 8}.{HEARTBEAT_SUBJECT_ID & 0xFF}")
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
        self._sock.bind((socket.inet_ntoa(group), CYPHAL_UDP_PORT))
        self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group + socket.inet_aton("127.0.0.1"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not select.select([self._sock], [], [], 0.2)[0]:
                continue
            data, ancillary, _, _ = self._sock.recvmsg(2048, socket.CMSG_SPACE(16))
            hb = parse_heartbeat(data)
            if hb is None or hb.source != self._node_id:
                continue
            arrived = time.monotonic()
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMP and len(value) >= 16:
                    sec, usec = struct.unpack("qq", value[:16])
                    arrived = sec + usec * 1e-6 - (time.time() - time.monotonic())
            self._on_heartbeat(arrived)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


class BusObserver(BusThread):
    """Heartbeats of one node and its ``dynamics`` subject, recorded from a pycyphal node in a thread."""

    def __init__(self, node_id: int, observer_node_id: int, dynamics_subject: int | None = None) -> None:
        self.node_id = node_id
        self.heartbeats: list[float] = []
        self.dynamics: list[DynamicsSample] = []
        self._lock = threading.Lock()
        super().__init__("bus-observer")
        self._started = time.monotonic()
        self._heartbeats = KernelStampedHeartbeats(node_id, self._on_heartbeat)
        self._presentation = self._run(self._open(observer_node_id, dynamics_subject))

    def _on_heartbeat(self, arrived: float) -> None:
        with self._lock:
            self.heartbeats.append(arrived)

    def close(self) -> None:
        self._heartbeats.close()
        super().close()

    async def _open(self, observer_node_id: int, dynamics_subject: int | None) -> Any:
        import pycyphal.presentation
        import zubax.physics.dynamics

        from cyphal_common.transport import make_transport

        transport = make_transport({"uavcan.node.id": observer_node_id, "uavcan.udp.iface": "127.0.0.1"})
        presentation = pycyphal.presentation.Presentation(transport)
        if dynamics_subject is not None:
            dyn = presentation.make_subscriber(zubax.physics.dynamics.DoF3rdTs_1_0, dynamics_subject)

            async def on_dynamics(msg: Any, meta: Any) -> None:
                if meta.source_node_id == self.node_id:
                    k = msg.value.kinematics
                    with self._lock:
                        self.dynamics.append(
                            DynamicsSample(
                                float(meta.timestamp.monotonic), float(k.base.position), float(k.base.velocity)
                            )
                        )

            dyn.receive_in_background(on_dynamics)
        return presentation

    def heartbeat_gaps(self, since: float | None = None) -> float:
        """Largest gap between heartbeats received after ``since`` (and up to now) [s]."""
        with self._lock:
            times = [t for t in self.heartbeats if since is None or t >= since]
        if not times:
            return time.monotonic() - (since if since is not None else self._started)
        edges = [since, *times] if since is not None else times
        gaps = [b - a for a, b in itertools.pairwise(edges)]
        gaps.append(time.monotonic() - times[-1])
        return max(gaps)

    def heartbeats_after(self, t: float) -> list[float]:
        """Reception times of the node's heartbeats later than ``t``."""
        with self._lock:
            return [x for x in self.heartbeats if x > t]

    def wait_heartbeats(self, count: int = 2, timeout: float = 60.0) -> None:
        """Block until ``count`` heartbeats of the node have been heard."""
        wait_for(lambda: len(self.heartbeats) >= count, timeout, what=f"{count} heartbeats of node {self.node_id}")

    def dynamics_since(self, since: float) -> list[DynamicsSample]:
        """``dynamics`` samples received at or after ``since``."""
        with self._lock:
            return [d for d in self.dynamics if d.t >= since]



@contextmanager
def observer(node_id: int, observer_node_id: int, dynamics_subject: int | None = None) -> Iterator[BusObserver]:
    """A :class:`BusObserver`, closed at the end of the block."""
    obs = BusObserver(node_id, observer_node_id, dynamics_subject)
    try:
        yield obs
    finally:
        obs.close()


@dataclasses.dataclass
class LoggedNode:
    """A running ``servo-node`` process whose combined output goes to ``log``."""

    proc: subprocess.Popen[str]
    log: Path
    node_id: int

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        """Everything the process printed so far."""
        return self.log.read_text(errors="replace")

    def assert_alive_and_clean(self) -> None:
        """Still running, and no traceback in its log."""
        assert self.proc.poll() is None, f"servo-node exited with {self.proc.returncode}:\n{self.text()[-4000:]}"
        text = self.text()
        assert "Traceback" not in text, f"traceback in the servo-node log:\n{text[-6000:]}"


@contextmanager
def logged_servo_node(env: Mapping[str, str], registry: Path, log: Path, node_id: int) -> Iterator[LoggedNode]:
    """``servo-node run`` with its output in ``log``; yielded once it answers register reads; SIGINT at the end."""
    with servo_node(env, registry, node_id, log=log) as proc:
        yield LoggedNode(proc, log, node_id)
