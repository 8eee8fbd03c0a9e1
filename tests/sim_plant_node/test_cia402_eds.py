"""The shipped EDS: a well-formed CiA 306 file canopen imports, the very dictionary the emulator serves (every
entry readable by SDO), and PDOs a master remaps by SDO as on any device (checked mappings, new layout on the bus)."""

from __future__ import annotations

import configparser
from collections.abc import Iterator

import canopen
import pytest
from canopen.objectdictionary import ODVariable

from sim_plant_node.cia402 import Emulator, eds_path
from sim_plant_node.cia402 import _objects as ob

from .canopen_master import COUNTS, Master, emulator_and_master

NODE_ID = 31
IFACE = "virtual:cia402-eds"
COMPUTED = {0x6041, 0x6064, 0x606C, 0x6077, 0x60F4, 0x6061}
"""Entries whose value the drive computes (state, actual values)."""
SCALED = {0x6076}
"""Entries whose initial value derives from registers (0x6076 from sim.max_force = 50 here)."""


@pytest.fixture(scope="module")
def parsed() -> configparser.ConfigParser:
    with eds_path() as path:
        cp = configparser.ConfigParser(strict=True, interpolation=None)
        cp.optionxform = str  # type: ignore[assignment,method-assign]
        cp.read(path, encoding="ascii")
    return cp


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[Emulator, Master]]:
    """One emulator (max force 50) and a master in PRE-OPERATIONAL, shared by the module."""
    with emulator_and_master(IFACE, NODE_ID) as (emulator, master):
        master.node.nmt.state = "PRE-OPERATIONAL"
        yield emulator, master


def test_eds_is_well_formed(parsed: configparser.ConfigParser) -> None:
    """CiA 306 structure: every object listed once, SubNumber = its sub-sections, PDO counts, mandatory objects."""
    objects = {s for s in parsed.sections() if len(s) == 4 and all(c in "0123456789ABCDEF" for c in s)}
    listed: list[int] = []
    for group in ("MandatoryObjects", "OptionalObjects", "ManufacturerObjects"):
        n = int(parsed[group]["SupportedObjects"])
        listed += [int(parsed[group][str(i)], 16) for i in range(1, n + 1)]
    assert sorted(listed) == sorted(int(s, 16) for s in objects) and len(set(listed)) == len(listed)
    assert {0x1000, 0x1001, 0x1018} <= {int(parsed["MandatoryObjects"][k], 16) for k in ("1", "2", "3")}
    for s in objects:
        subs = [x for x in parsed.sections() if x.startswith(s + "sub")]
        if "SubNumber" in parsed[s]:
            assert int(parsed[s]["SubNumber"]) == len(subs), s
        else:
            assert not subs and parsed[s]["ObjectType"] == "0x7", s
    info = parsed["DeviceInfo"]
    assert int(info["NrOfRXPDO"]) == sum(1 for s in objects if s.startswith("14")) == ob.PDO_COUNT
    assert int(info["NrOfTXPDO"]) == sum(1 for s in objects if s.startswith("18")) == ob.PDO_COUNT
    assert parsed["FileInfo"]["FileName"] == ob.EDS_NAME


def test_eds_holds_what_the_code_uses() -> None:
    """canopen imports it; the drive objects exist with the access the code assumes; modes and device type."""
    with eds_path() as path:
        od = canopen.import_od(str(path), NODE_ID)
    for index in ob.DRIVE_OBJECTS:
        assert isinstance(od[index], ODVariable), hex(index)
    for index in (ob.CONTROLWORD, ob.TARGET_POSITION, ob.TARGET_VELOCITY, ob.TARGET_TORQUE, ob.VELOCITY_OFFSET):
        assert od[index].writable and od[index].pdo_mappable, hex(index)
    for index in (ob.STATUSWORD, ob.POSITION_ACTUAL, ob.VELOCITY_ACTUAL, ob.TORQUE_ACTUAL, ob.ERROR_CODE):
        assert not od[index].writable and od[index].pdo_mappable, hex(index)
    for index in ob.ALLOWED:
        assert od[index].writable and od[index].default in ob.ALLOWED[index], hex(index)
    assert od[ob.SUPPORTED_DRIVE_MODES].default == ob.SUPPORTED_MODES_BITS
    assert od[ob.DEVICE_TYPE].default & 0xFFFF == 402
    assert od[0x1400][1].default == 0x200 + NODE_ID and od[0x1800][1].default == 0x180 + NODE_ID


def test_the_emulator_serves_exactly_the_eds(bench: tuple[Emulator, Master]) -> None:
    """Same dictionary; every readable entry reads by SDO and holds its EDS default unless the drive computes it."""
    emulator, master = bench
    assert emulator.node is not None
    with eds_path() as path:
        od = canopen.import_od(str(path), NODE_ID)
    mine = emulator.node.object_dictionary
    assert sorted(mine.keys()) == sorted(od.keys())
    for index in od:
        obj = od[index]
        entries = [obj] if isinstance(obj, ODVariable) else list(obj.values())
        for var in entries:
            theirs = mine[index] if isinstance(obj, ODVariable) else mine[index][var.subindex]
            assert (theirs.name, theirs.data_type, theirs.access_type, theirs.default) == (
                var.name,
                var.data_type,
                var.access_type,
                var.default,
            )
            if not var.readable:
                continue
            sdo = master.node.sdo[index] if isinstance(obj, ODVariable) else master.node.sdo[index][var.subindex]
            value = sdo.raw
            if index not in COMPUTED | SCALED:
                assert value == var.default, f"0x{index:04X}sub{var.subindex}: {value!r} != {var.default!r}"
    assert master.node.sdo[0x6076].raw == 50000  # mN·m: sim.max_force.
    assert master.node.sdo[0x6041].raw & 0x4F == 0x40  # SWITCH ON DISABLED.


def test_refused_writes(bench: tuple[Emulator, Master]) -> None:
    """Values outside an object's range, unmappable objects, over-long PDOs and read-only objects are aborted."""
    _, master = bench
    sdo = master.node.sdo
    cases = [
        (lambda: setattr(sdo[0x6060], "raw", 1), 0x06090030),  # Profiled position: not supported.
        (lambda: setattr(sdo[0x6098], "raw", 1), 0x06090030),  # Homing method other than 35/37.
        (lambda: setattr(sdo[0x1A03][1], "raw", 0x60650020), 0x06040041),  # 0x6065 is not mappable.
        (lambda: setattr(sdo[0x1603][1], "raw", 0x60410010), 0x06040041),  # A read-only object in an RPDO.
        (lambda: setattr(sdo[0x1A03][1], "raw", 0x60640010), 0x06040041),  # Wrong length.
        (lambda: setattr(sdo[0x6041], "raw", 0), 0x06010002),  # Read-only.
        (lambda: setattr(sdo[0x1800][2], "raw", 252), 0x06090030),  # RTR-only transmission: not offered.
    ]
    for write, code in cases:
        with pytest.raises(canopen.SdoAbortedError) as info:
            write()
        assert info.value.code == code
    for sub in range(1, 4):
        sdo[0x1A03][sub].raw = 0x60640020
    with pytest.raises(canopen.SdoAbortedError) as info:
        sdo[0x1A03][0].raw = 3  # 96 bits.
    assert info.value.code == 0x06040042
    for sub in range(1, 4):
        sdo[0x1A03][sub].raw = 0


def test_pdo_remap_by_sdo(bench: tuple[Emulator, Master]) -> None:
    """The master maps TPDO4 = statusword + position actual every 2nd SYNC and RPDO4 = target velocity (RPDO3
    off), saves by SDO, reads it back; in OPERATIONAL the joint follows RPDO4 and TPDO4 reports it."""
    emulator, master = bench
    node = master.node
    node.tpdo.read()
    node.rpdo.read()
    tpdo4, rpdo4, rpdo3 = node.tpdo[4], node.rpdo[4], node.rpdo[3]
    tpdo4.clear()
    tpdo4.add_variable(0x6041)
    tpdo4.add_variable(0x6064)
    tpdo4.trans_type = 2
    tpdo4.enabled = True
    rpdo4.clear()
    rpdo4.add_variable(0x60FF)
    rpdo4.trans_type = 1
    rpdo4.enabled = True
    rpdo3.enabled = False
    for pdo in (tpdo4, rpdo4, rpdo3):
        pdo.save()
    assert node.sdo[0x1A03][0].raw == 2 and node.sdo[0x1A03][2].raw == 0x60640020
    assert node.sdo[0x1803][1].raw == 0x480 + NODE_ID and node.sdo[0x1803][2].raw == 2
    assert node.sdo[0x1402][1].raw & 0x80000000

    node.tpdo.read()  # Back from the device: the layout it now uses.
    node.rpdo.read()
    assert [v.index for v in node.tpdo[4]] == [0x6041, 0x6064] and node.tpdo[4].enabled
    assert [v.index for v in node.rpdo[4]] == [0x60FF] and not node.rpdo[3].enabled
    received: list[tuple[int, int]] = []
    node.tpdo[4].add_callback(lambda m: received.append((int(m[0].raw), int(m[1].raw))))
    counts = {1: 0, 4: 0}
    node.tpdo[1].add_callback(lambda m: counts.__setitem__(1, counts[1] + 1))
    node.tpdo[4].add_callback(lambda m: counts.__setitem__(4, counts[4] + 1))
    node.nmt.state = "OPERATIONAL"
    master.network.sync.start(0.005)
    node.rpdo[4].start(0.005)
    node.sdo[0x6060].raw = 9
    for cw in (0x06, 0x07, 0x0F):
        node.sdo[0x6040].raw = cw
    node.rpdo[4]["Target velocity"].raw = round(0.5 * COUNTS)
    master.wait("moving by RPDO4", lambda: abs(master.velocity() - 0.5) < 1e-3)
    moving_from = received[-1][1] if received else 0
    # TPDO4's position goes forward (however long the emulated joint, not real-time here, takes to step).
    master.wait("TPDO4 reporting the motion", lambda: bool(received) and received[-1][1] > moving_from + 0.05 * COUNTS)
    assert all(sw & 0x6F == 0x27 for sw, _ in received[-5:])
    # TPDO4 reports the joint's position: the first one sent after an SDO read of 0x6064 lies between that read and
    # the next (the drive answers and sends in order on one bus; no clock is compared).
    before = master.position()
    n = len(received)
    master.wait("a TPDO4 after the read", lambda: len(received) > n)
    reported = received[n][1] / COUNTS
    after = master.position()
    assert before - 0.005 <= reported <= after + 0.005, (before, reported, after)
    assert 1.5 < counts[1] / counts[4] < 2.5  # Every 2nd SYNC.
    node.sdo[0x6040].raw = 0x00
    assert emulator.drive is not None and emulator.drive.state.value == "SWITCH ON DISABLED"
