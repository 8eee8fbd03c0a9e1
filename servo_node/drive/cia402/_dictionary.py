"""The objects a CiA 402 master needs on any drive, as a canopen object dictionary built here (no vendor EDS).

canopen encodes SDO values and lays out PDOs from an object dictionary; the servo needs only the standard objects
of CiA 301 (communication) and CiA 402 (drive profile) it reads, writes or maps, with their standard types, so it
works with a drive whose EDS it has never seen. Also the statusword decoding and the controlword commands.
"""

from __future__ import annotations

from typing import Any

DEVICE_TYPE, ERROR_REGISTER, CYCLE_PERIOD, DEVICE_NAME = 0x1000, 0x1001, 0x1006, 0x1008
GUARD_TIME, LIFE_TIME_FACTOR = 0x100C, 0x100D
CONSUMER_HEARTBEAT, PRODUCER_HEARTBEAT, IDENTITY = 0x1016, 0x1017, 0x1018
RPDO_COMM, RPDO_MAP, TPDO_COMM, TPDO_MAP = 0x1400, 0x1600, 0x1800, 0x1A00
ERROR_CODE, ABORT_CONNECTION_OPTION = 0x603F, 0x6007
CONTROLWORD, STATUSWORD = 0x6040, 0x6041
MODES_OF_OPERATION, MODES_OF_OPERATION_DISPLAY = 0x6060, 0x6061
POSITION_ACTUAL, VELOCITY_ACTUAL, TORQUE_ACTUAL = 0x6064, 0x606C, 0x6077
TARGET_POSITION, TARGET_VELOCITY, TARGET_TORQUE = 0x607A, 0x60FF, 0x6071
VELOCITY_OFFSET, TORQUE_OFFSET = 0x60B1, 0x60B2
RATED_TORQUE, HOME_OFFSET, HOMING_METHOD = 0x6076, 0x607C, 0x6098
FOLLOWING_ERROR_ACTUAL, SUPPORTED_DRIVE_MODES = 0x60F4, 0x6502
HOMING_SPEEDS, DIGITAL_INPUTS = 0x6099, 0x60FD
IP_SUB_MODE, IP_DATA, IP_PERIOD = 0x60C0, 0x60C1, 0x60C2
ENCODER_RESOLUTION, GEAR_RATIO, FEED_CONSTANT = 0x608F, 0x6091, 0x6092
SI_POSITION, SI_VELOCITY = 0x60A8, 0x60A9

MODE_HOMING, MODE_IP, MODE_CSP, MODE_CSV, MODE_CST = 6, 7, 8, 9, 10
MODE_OF_LAW = {"position": MODE_CSP, "velocity": MODE_CSV, "torque": MODE_CST}
"""``servo.drive.mode`` → the cyclic synchronous mode it asks for (0x6060); see :mod:`._identify` for the others."""
MODE_NAMES = {MODE_HOMING: "homing", MODE_IP: "IP", MODE_CSP: "CSP", MODE_CSV: "CSV", MODE_CST: "CST"}
STREAMING_MODES = (MODE_CSP, MODE_CSV, MODE_CST, MODE_IP)

# SDO abort codes (CiA 301) the bring-up tells apart.
ABORT_NO_OBJECT, ABORT_NO_SUBINDEX = 0x06020000, 0x06090011
ABORT_NOT_MAPPABLE, ABORT_PDO_LENGTH = 0x06040041, 0x06040042
ABORT_WRITE_ONLY = 0x06010001
ABSENT = (ABORT_NO_OBJECT, ABORT_NO_SUBINDEX)
"""The drive has no such object (or sub-index)."""

# Controlword commands (CiA 402 device control); fault reset is the rising edge of bit 7.
CW_DISABLE_VOLTAGE, CW_QUICK_STOP, CW_SHUTDOWN, CW_SWITCH_ON, CW_ENABLE = 0x00, 0x02, 0x06, 0x07, 0x0F
CW_FAULT_RESET = 0x80
CW_HOMING_START = 0x1F
"""Enable operation with bit 4 (homing operation start)."""
CW_IP_ENABLE = 0x10
"""Controlword bit 4 in IP (mode 7): enable ip mode (the drive interpolates while it is set)."""

_STATES = (  # (mask, value, name), the CiA 402 statusword table
    (0x4F, 0x00, "NOT READY TO SWITCH ON"),
    (0x4F, 0x40, "SWITCH ON DISABLED"),
    (0x6F, 0x21, "READY TO SWITCH ON"),
    (0x6F, 0x23, "SWITCHED ON"),
    (0x6F, 0x27, "OPERATION ENABLED"),
    (0x6F, 0x07, "QUICK STOP ACTIVE"),
    (0x4F, 0x0F, "FAULT REACTION ACTIVE"),
    (0x4F, 0x08, "FAULT"),
)
SW_FAULT, SW_WARNING, SW_TARGET_REACHED, SW_INTERNAL_LIMIT = 1 << 3, 1 << 7, 1 << 10, 1 << 11
SW_FOLLOWING_ERROR = 1 << 13
"""CSP: following error (also homing error in mode 6)."""
SW_HOMING_ATTAINED = 1 << 12
"""Homing: attained; IP: ip mode active; CSx: following the command."""

# NMT states as a heartbeat carries them (CiA 301), and what we call them.
NMT_BOOT_UP, NMT_STOPPED, NMT_OPERATIONAL, NMT_PRE_OPERATIONAL = 0x00, 0x04, 0x05, 0x7F
_NMT_NAMES = {NMT_BOOT_UP: "BOOT-UP", NMT_STOPPED: "STOPPED", NMT_OPERATIONAL: "OPERATIONAL",
              NMT_PRE_OPERATIONAL: "PRE-OPERATIONAL"}


def nmt_name(state: int) -> str:
    """The NMT state a heartbeat byte says (UNKNOWN for none heard yet: negative)."""
    if state < 0:
        return "UNKNOWN"
    return _NMT_NAMES.get(state, f"NMT 0x{state:02X}")


def mode_name(mode: int | None) -> str:
    """CSV, CSP, CST, homing, or the number (a mode display 0x6061 we did not set)."""
    return "UNKNOWN" if mode is None else MODE_NAMES.get(mode, str(mode))


def state_of(statusword: int) -> str:
    """The CiA 402 state a statusword shows; UNKNOWN for none yet (negative)."""
    if statusword < 0:
        return "UNKNOWN"
    for mask, value, name in _STATES:
        if statusword & mask == value:
            return name
    return "UNKNOWN"


def dictionary() -> Any:
    """A canopen ``ObjectDictionary`` with the standard objects the master uses (types per CiA 301/402)."""
    from canopen import objectdictionary as odm

    od = odm.ObjectDictionary()

    def var(name: str, index: int, sub: int, dtype: int, access: str = "rw") -> Any:
        v = odm.ODVariable(name, index, sub)
        v.data_type, v.access_type = dtype, access
        return v

    u8, u16, u32 = odm.UNSIGNED8, odm.UNSIGNED16, odm.UNSIGNED32
    i8, i16, i32 = odm.INTEGER8, odm.INTEGER16, odm.INTEGER32
    for index, name, dtype, access in (
        (DEVICE_TYPE, "Device type", u32, "ro"),
        (ERROR_REGISTER, "Error register", u8, "ro"),
        (CYCLE_PERIOD, "Communication cycle period", u32, "rw"),
        (PRODUCER_HEARTBEAT, "Producer heartbeat time", u16, "rw"),
        (ERROR_CODE, "Error code", u16, "ro"),
        (ABORT_CONNECTION_OPTION, "Abort connection option code", i16, "rw"),
        (CONTROLWORD, "Controlword", u16, "rw"),
        (STATUSWORD, "Statusword", u16, "ro"),
        (MODES_OF_OPERATION, "Modes of operation", i8, "rw"),
        (MODES_OF_OPERATION_DISPLAY, "Modes of operation display", i8, "ro"),
        (POSITION_ACTUAL, "Position actual value", i32, "ro"),
        (VELOCITY_ACTUAL, "Velocity actual value", i32, "ro"),
        (TARGET_TORQUE, "Target torque", i16, "rw"),
        (RATED_TORQUE, "Motor rated torque", u32, "rw"),
        (TORQUE_ACTUAL, "Torque actual value", i16, "ro"),
        (TARGET_POSITION, "Target position", i32, "rw"),
        (HOME_OFFSET, "Home offset", i32, "rw"),
        (HOMING_METHOD, "Homing method", i8, "rw"),
        (VELOCITY_OFFSET, "Velocity offset", i32, "rw"),
        (TORQUE_OFFSET, "Torque offset", i16, "rw"),
        (FOLLOWING_ERROR_ACTUAL, "Following error actual value", i32, "ro"),
        (TARGET_VELOCITY, "Target velocity", i32, "rw"),
        (SUPPORTED_DRIVE_MODES, "Supported drive modes", u32, "ro"),
        (GUARD_TIME, "Guard time", u16, "rw"),
        (LIFE_TIME_FACTOR, "Life time factor", u8, "rw"),
        (IP_SUB_MODE, "Interpolation sub mode select", i16, "rw"),
        (SI_POSITION, "SI unit position", u32, "rw"),
        (SI_VELOCITY, "SI unit velocity", u32, "rw"),
        (DIGITAL_INPUTS, "Digital inputs", u32, "ro"),
    ):
        od.add_object(var(name, index, 0, dtype, access))
    name_var = var("Manufacturer device name", DEVICE_NAME, 0, odm.VISIBLE_STRING, "ro")
    od.add_object(name_var)
    for index, name, types in (
        (IP_DATA, "Interpolation data record", (i32,)),
        (IP_PERIOD, "Interpolation time period", (u8, i8)),
        (HOMING_SPEEDS, "Homing speeds", (u32, u32)),
        (ENCODER_RESOLUTION, "Position encoder resolution", (u32, u32)),
        (GEAR_RATIO, "Gear ratio", (u32, u32)),
        (FEED_CONSTANT, "Feed constant", (u32, u32)),
    ):
        rec = odm.ODRecord(name, index)
        rec.add_member(var("Highest sub-index supported", index, 0, u8, "ro"))
        for sub, dtype in enumerate(types, 1):
            rec.add_member(var(f"{name} {sub}", index, sub, dtype))
        od.add_object(rec)
    consumer = odm.ODArray("Consumer heartbeat time", CONSUMER_HEARTBEAT)
    consumer.add_member(var("Number of entries", CONSUMER_HEARTBEAT, 0, u8, "ro"))
    consumer.add_member(var("Consumer heartbeat time 1", CONSUMER_HEARTBEAT, 1, u32))
    od.add_object(consumer)
    identity = odm.ODRecord("Identity object", IDENTITY)
    for sub, name in enumerate(("Number of entries", "Vendor-ID", "Product code", "Revision number", "Serial number")):
        identity.add_member(var(name, IDENTITY, sub, u8 if sub == 0 else u32, "ro"))
    od.add_object(identity)
    for n in range(4):
        for base, kind in ((RPDO_COMM, "RPDO"), (TPDO_COMM, "TPDO")):
            rec = odm.ODRecord(f"{kind} {n + 1} communication parameter", base + n)
            rec.add_member(var("Highest sub-index supported", base + n, 0, u8, "ro"))
            rec.add_member(var("COB-ID", base + n, 1, u32))
            rec.add_member(var("Transmission type", base + n, 2, u8))
            rec.add_member(var("Inhibit time", base + n, 3, u16))
            rec.add_member(var("Event timer", base + n, 5, u16))
            od.add_object(rec)
        for base, kind in ((RPDO_MAP, "RPDO"), (TPDO_MAP, "TPDO")):
            rec = odm.ODRecord(f"{kind} {n + 1} mapping parameter", base + n)
            rec.add_member(var("Number of mapped objects", base + n, 0, u8))
            for sub in range(1, 9):
                rec.add_member(var(f"Mapped object {sub}", base + n, sub, u32))
            od.add_object(rec)
    return od


def master_dictionary(heartbeat_ms: int) -> Any:
    """The servo's own dictionary on the CANopen bus: its producer heartbeat time (canopen's NMT slave sends it)."""
    from canopen import objectdictionary as odm

    od = odm.ObjectDictionary()
    v = odm.ODVariable("Producer heartbeat time", PRODUCER_HEARTBEAT)
    v.data_type, v.access_type, v.default = odm.UNSIGNED16, "rw", heartbeat_ms
    od.add_object(v)
    return od
