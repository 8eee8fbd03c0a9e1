"""An independent CANopen master for the emulated CiA 402 drive: canopen's own ``BaseNode402`` from the shipped EDS.

Everything on the bus goes through canopen (SDO, PDO, NMT, SYNC, EMCY, and the master's heartbeat from a canopen
``LocalNode``'s NMT slave); the test reads the drive back through the TPDOs it records.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import canopen
from canopen.objectdictionary import UNSIGNED16, ObjectDictionary, ODVariable
from canopen.profiles.p402 import BaseNode402

from cyphal_common.transport import open_can_bus
from sim_plant import JointParams
from sim_plant_node.cia402 import Emulator, eds_path
from tests.procs import start, stop

COUNTS = 10000.0
"""Increments per unit (the default of ``sim.canopen.counts_per_unit``)."""


def private_udpmc_iface() -> str:
    """A random multicast group and port, so that parallel runs and other tests on this host do not meet."""
    rnd = random.SystemRandom()
    return f"udpmc:239.{rnd.randint(1, 254)}.{rnd.randint(1, 254)}.{rnd.randint(1, 254)}:{rnd.randint(20000, 60000)}"


@contextmanager
def emulator_process(
    command: list[str], iface: str, node_id: int, env: Mapping[str, str], log_path: Path
) -> Iterator[subprocess.Popen[str]]:
    """``sim-plant --canopen`` as a separate process; on exit SIGTERM, which must end it cleanly (status 0, no
    traceback in its output)."""
    args = [*command, "--registry", ":memory:", "--canopen", str(node_id), "--can", iface]
    proc = start(args, env, log=log_path)
    try:
        yield proc
    finally:
        stop(proc, timeout=15, signum=signal.SIGTERM)
    code = proc.returncode
    text = log_path.read_text()
    assert code == 0, f"the emulator exited with {code}:\n{text}"
    assert "Traceback" not in text, text


@contextmanager
def emulator_and_master(iface: str, node_id: int) -> Iterator[tuple[Emulator, Master]]:
    """An emulated drive in this process (max velocity 100, max force 50) on ``iface``, and a master that has heard
    it answer; both closed at the end."""
    emulator = Emulator(JointParams(max_velocity=100.0, max_force=50.0), node_id, iface).start()
    master = Master(iface, node_id)
    try:
        master.wait_for_drive()
        yield emulator, master
    finally:
        master.close()
        emulator.close()


def _heartbeat_dictionary(period_ms: int) -> ObjectDictionary:
    """The master's own dictionary: just its producer heartbeat time."""
    od = ObjectDictionary()
    var = ODVariable("Producer heartbeat time", 0x1017)
    var.data_type = UNSIGNED16
    var.access_type = "rw"
    var.default = period_ms
    od.add_object(var)
    return od


class Master:
    """A master on ``iface`` driving drive ``node_id``; records (monotonic, statusword, position, velocity)."""

    def __init__(self, iface: str, node_id: int, master_id: int = 0x70) -> None:
        """Connect; nothing is sent yet."""
        self.network = canopen.Network(open_can_bus(iface))
        self.network.NOTIFIER_CYCLE = 0.1  # Closing waits for the receive thread's poll: keep it short.
        self.network.connect()
        with eds_path() as path:
            self.node = BaseNode402(node_id, str(path))
        self.network.add_node(self.node)
        # The library's defaults (0.2…0.8 s) assume an unloaded host; the verdicts here are about behaviour. These
        # are guards against a hang: a test process beside the real-time stream may get no CPU for seconds (ci28: a
        # 0.5 s sleep took about 9 s, and a state change then missed a 10 s deadline).
        self.node.TIMEOUT_SWITCH_STATE_FINAL = 60.0
        self.node.TIMEOUT_SWITCH_STATE_SINGLE = 30.0
        self.node.TIMEOUT_CHECK_TPDO = 10.0
        self.node.TIMEOUT_SWITCH_OP_MODE = 30.0
        self.node.sdo.RESPONSE_TIMEOUT = 10.0
        self.master_id = master_id
        self.heartbeat: Any = None
        self.samples: list[tuple[float, int, int, int]] = []
        self._lock = threading.Lock()

    def wait_for_drive(self, timeout: float = 60.0, boot: bool = False) -> None:
        """Check that the drive answers (an SDO read of its device type); with ``boot``, first wait for its boot-up
        message (a process that is still starting: probing it by SDO would leave late answers behind)."""
        if boot:
            self.node.nmt.wait_for_bootup(timeout)
        assert self.node.sdo[0x1000].raw == 0x00020192

    def bring_up(self, period: float = 0.005, heartbeat_ms: int | None = None, consumer_ms: int = 0) -> None:
        """PRE-OPERATIONAL, PDO configuration read back, heartbeats, OPERATIONAL, SYNC and cyclic RPDOs 2 and 3."""
        self.node.nmt.state = "PRE-OPERATIONAL"
        self.node.sdo[0x1006].raw = round(period * 1e6)
        if consumer_ms:  # The drive watches our heartbeat.
            self.node.sdo[0x1016][1].raw = (self.master_id << 16) | consumer_ms
        if heartbeat_ms is not None:
            self.start_heartbeat(heartbeat_ms)
        self.node.setup_402_state_machine()
        self.node.tpdo[2].add_callback(self._record)
        self.node.nmt.state = "OPERATIONAL"
        self.network.sync.start(period)
        self.node.rpdo[2].start(period)
        self.node.rpdo[3].start(period)

    def start_heartbeat(self, period_ms: int) -> None:
        """Produce our heartbeat (canopen's NMT slave of a local node) at ``period_ms``."""
        self.heartbeat = self.network.create_node(self.master_id, _heartbeat_dictionary(period_ms))
        self.heartbeat.nmt.state = "INITIALISING"
        self.heartbeat.nmt.state = "PRE-OPERATIONAL"
        self.heartbeat.nmt.state = "OPERATIONAL"

    def die(self) -> None:
        """Go silent as a killed master: no heartbeat, no SYNC, no RPDOs."""
        if self.heartbeat is not None:
            self.heartbeat.nmt.stop_heartbeat()
        self.network.sync.stop()
        self.node.rpdo.stop()

    def _record(self, m: Any) -> None:
        with self._lock:
            sw = int(self.node.tpdo_values.get(0x6041, 0))
            self.samples.append((time.monotonic(), sw, int(m["Position actual value"].raw), int(m[1].raw)))

    def since(self, t0: float) -> list[tuple[float, int, int, int]]:
        """Recorded samples from monotonic ``t0`` on."""
        with self._lock:
            return [s for s in self.samples if s[0] >= t0]

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        """Poll ``predicate`` until true; fail naming ``what``."""
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; statusword 0x{self.statusword():04X}"
            time.sleep(0.01)

    def statusword(self) -> int:
        """The statusword read by SDO (works without SYNC)."""
        return int(self.node.sdo[0x6041].raw)

    def velocity(self) -> float:
        """Velocity actual by SDO [unit/s]."""
        return int(self.node.sdo[0x606C].raw) / COUNTS

    def position(self) -> float:
        """Position actual by SDO [unit]."""
        return int(self.node.sdo[0x6064].raw) / COUNTS

    def close(self) -> None:
        """Stop everything we send and leave the bus."""
        self.die()
        self.network.disconnect()
