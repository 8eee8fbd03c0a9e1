"""The emulated CiA 402 drive through faults and stops, driven by canopen's ``BaseNode402`` on an in-process
``virtual:`` bus: an injected over-current fault, its reset, a quick stop, and the loss of the master's heartbeat."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import pytest

from sim_plant import JointParams
from sim_plant_node.cia402 import Emulator

from .canopen_master import COUNTS, Master

NODE_ID = 9
_channels = itertools.count()

Start = Callable[..., tuple[Emulator, Master]]


@pytest.fixture
def drive() -> Iterator[Start]:
    """Factory: an emulator (with its keyword arguments) and a master brought to OPERATIONAL, on a private bus."""
    opened: list[tuple[Emulator, Master]] = []

    def start(heartbeat_ms: int | None = None, consumer_ms: int = 0, **kwargs: float) -> tuple[Emulator, Master]:
        iface = f"virtual:cia402-faults-{next(_channels)}"
        emulator = Emulator(JointParams(max_velocity=100.0, max_force=100.0), NODE_ID, iface, **kwargs).start()
        master = Master(iface, NODE_ID)
        opened.append((emulator, master))
        master.wait_for_drive()
        master.bring_up(heartbeat_ms=heartbeat_ms, consumer_ms=consumer_ms)
        return emulator, master

    try:
        yield start
    finally:
        for emulator, master in opened:
            master.close()
            emulator.close()


def _moving(master: Master, velocity: float) -> None:
    """CSV, OPERATION ENABLED, cruising at ``velocity``."""
    master.node.op_mode = "CYCLIC SYNCHRONOUS VELOCITY"
    master.node.rpdo[3]["Target velocity"].raw = round(velocity * COUNTS)
    master.node.state = "OPERATION ENABLED"
    master.wait("cruising", lambda: abs(master.velocity() - velocity) < 1e-3)


def _at_rest(master: Master) -> None:
    """The joint stopped and stays put."""
    master.wait("rest", lambda: master.velocity() == 0.0)
    p = master.position()
    time.sleep(0.1)
    assert master.velocity() == 0.0 and master.position() == p


def test_injected_fault_reset_and_quick_stop(drive: Start) -> None:
    """Over-current at the injected time: EMCY 0x2310, fault bit, 0x603F and 0x1001 set, the fault reaction brings
    the joint to rest; a fault reset (bit 7 edge) clears everything and the drive re-enables; a quick stop
    (controlword) ramps to rest and ends in SWITCH ON DISABLED under the default 0x605A = 2."""
    emulator, master = drive(fault_after=0.3)
    node = master.node
    _moving(master, 2.0)
    emcy = node.emcy.wait(0x2310, timeout=30.0)
    assert emcy is not None and emcy.register & 0x03 == 0x03  # Generic + current.
    master.wait("FAULT", lambda: master.statusword() & 0x4F == 0x08)
    assert node.sdo[0x603F].raw == 0x2310
    assert node.sdo[0x1001].raw & 0x02
    _at_rest(master)
    assert emulator.drive is not None and 13 in emulator.drive.transitions and 14 in emulator.drive.transitions

    node.reset_from_fault()  # 0x80 rising edge, then back to OPERATION ENABLED; the target is still 2.0.
    assert node.state == "OPERATION ENABLED"
    assert node.sdo[0x603F].raw == 0 and node.sdo[0x1001].raw == 0
    assert any(e.code == 0 for e in node.emcy.log)  # The EMCY error reset.
    master.wait("moving again", lambda: abs(master.velocity() - 2.0) < 1e-3)

    seen: set[int] = set()
    node.tpdo[1].add_callback(lambda m: seen.add(int(m[0].raw) & 0x6F))
    node.controlword = 0x0002  # Quick stop.
    master.wait("SWITCH ON DISABLED", lambda: master.statusword() & 0x4F == 0x40)
    _at_rest(master)
    assert 0x07 in seen  # QUICK STOP ACTIVE was shown during the ramp.
    assert emulator.drive is not None and emulator.drive.transitions[-2:] == [11, 12]


def test_quick_stop_that_stays_holds_and_reports_target_reached(drive: Start) -> None:
    """0x605A = 6: quick stop ramp, then QUICK STOP ACTIVE holding the joint at rest (target reached) until the
    master enables operation again (16)."""
    emulator, master = drive()
    node = master.node
    node.sdo[0x605A].raw = 6
    _moving(master, -1.0)
    node.controlword = 0x0002
    master.wait("held in QUICK STOP ACTIVE", lambda: master.statusword() & 0x46F == 0x407)
    _at_rest(master)
    node.controlword = 0x000F
    master.wait("moving again", lambda: abs(master.velocity() + 1.0) < 1e-3)
    assert emulator.drive is not None and 16 in emulator.drive.transitions


def test_heartbeat_loss_quick_stops_to_rest(drive: Start) -> None:
    """The master dies (no heartbeat, SYNC, RPDO): the drive's heartbeat consumer times out, sends EMCY 0x8130 and,
    under the default 0x6007 = 3, quick-stops the joint to rest on its own clock, ending in SWITCH ON DISABLED."""
    emulator, master = drive(heartbeat_ms=50, consumer_ms=1000)  # Generous: a loaded host stalls threads.
    _moving(master, 3.0)
    master.die()
    emcy = master.node.emcy.wait(0x8130, timeout=30.0)
    assert emcy is not None and emcy.register & 0x10
    master.wait("SWITCH ON DISABLED", lambda: master.statusword() & 0x4F == 0x40)
    _at_rest(master)
    assert master.statusword() & 0x80  # Warning: the communication error stands while the master is gone.
    assert emulator.drive is not None and emulator.drive.transitions[-2:] == [11, 12]
