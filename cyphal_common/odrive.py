"""ODrive's CAN Simple protocol (firmware 0.6): identifiers, enumerations and the payloads both ends use.

Shared by the ``odrive`` drive backend (the master) and the emulated ODrive (``sim-plant --odrive``). A frame's
11-bit identifier is ``node_id << 5 | command`` (node-ID 0..63, command 0..31); payloads are little-endian, the
physical quantities float32 in turns, turns/s and N·m at the motor shaft. The layouts follow ODrive's published
DBC file (``odrive-cansimple-0.6.10.dbc``); the tests check both ends against that file as ``cantools`` reads it,
so a mistake here cannot hide behind the two ends agreeing with each other.

Standard library only (``struct``): no application, no python-can.
"""

from __future__ import annotations

import enum
import struct

# ---------------------------------------------------------------- identifiers

GET_VERSION = 0x00
"""drive → master on request (RTR, or an empty data frame): protocol, hardware and firmware versions."""
HEARTBEAT = 0x01
"""drive → master, cyclic (``can.heartbeat_msg_rate_ms``, 100 ms by default): axis error, state, procedure result,
trajectory done."""
ESTOP = 0x02
GET_ERROR = 0x03
"""drive → master on request: active errors and the disarm reason."""
RX_SDO = 0x04
"""master → drive: read (opcode 0) or write (1) one endpoint of the firmware's ``flat_endpoints.json``."""
TX_SDO = 0x05
"""drive → master: the answer to a read (and, from firmware 0.6.11, the confirmation of a write)."""
ADDRESS = 0x06
SET_AXIS_STATE = 0x07
GET_ENCODER_ESTIMATES = 0x09
"""drive → master, cyclic (``can.encoder_msg_rate_ms``, 10 ms by default): position [turn], velocity [turn/s]."""
SET_CONTROLLER_MODE = 0x0B
SET_INPUT_POS = 0x0C
SET_INPUT_VEL = 0x0D
SET_INPUT_TORQUE = 0x0E
SET_LIMITS = 0x0F
GET_IQ = 0x14
GET_TEMPERATURE = 0x15
REBOOT = 0x16
GET_BUS_VOLTAGE_CURRENT = 0x17
CLEAR_ERRORS = 0x18
SET_ABSOLUTE_POSITION = 0x19
SET_POS_GAIN = 0x1A
SET_VEL_GAINS = 0x1B
GET_TORQUES = 0x1C
"""drive → master, cyclic if ``can.torques_msg_rate_ms`` > 0: torque target and estimate [N·m]."""
GET_POWERS = 0x1D
ENTER_DFU_MODE = 0x1F

MASTER_COMMANDS = frozenset({
    ESTOP, RX_SDO, ADDRESS, SET_AXIS_STATE, SET_CONTROLLER_MODE, SET_INPUT_POS, SET_INPUT_VEL, SET_INPUT_TORQUE,
    SET_LIMITS, REBOOT, CLEAR_ERRORS, SET_ABSOLUTE_POSITION, SET_POS_GAIN, SET_VEL_GAINS, ENTER_DFU_MODE,
})
"""Commands only a master sends as data frames: one heard on the bus came from another master."""

COMMAND_NAMES = {
    GET_VERSION: "Get_Version", HEARTBEAT: "Heartbeat", ESTOP: "Estop", GET_ERROR: "Get_Error", RX_SDO: "RxSdo",
    TX_SDO: "TxSdo", ADDRESS: "Address", SET_AXIS_STATE: "Set_Axis_State",
    GET_ENCODER_ESTIMATES: "Get_Encoder_Estimates", SET_CONTROLLER_MODE: "Set_Controller_Mode",
    SET_INPUT_POS: "Set_Input_Pos", SET_INPUT_VEL: "Set_Input_Vel", SET_INPUT_TORQUE: "Set_Input_Torque",
    SET_LIMITS: "Set_Limits", GET_IQ: "Get_Iq", GET_TEMPERATURE: "Get_Temperature", REBOOT: "Reboot",
    GET_BUS_VOLTAGE_CURRENT: "Get_Bus_Voltage_Current", CLEAR_ERRORS: "Clear_Errors",
    SET_ABSOLUTE_POSITION: "Set_Absolute_Position", SET_POS_GAIN: "Set_Pos_Gain", SET_VEL_GAINS: "Set_Vel_Gains",
    GET_TORQUES: "Get_Torques", GET_POWERS: "Get_Powers", ENTER_DFU_MODE: "Enter_DFU_Mode",
}

NODE_ID_MAX = 0x3F


def arbitration_id(node_id: int, command: int) -> int:
    """The 11-bit CAN identifier of ``command`` to or from ``node_id``."""
    return (node_id & NODE_ID_MAX) << 5 | (command & 0x1F)


def split_id(can_id: int) -> tuple[int, int]:
    """(node-ID, command) of an 11-bit identifier."""
    return (can_id >> 5) & NODE_ID_MAX, can_id & 0x1F


# ---------------------------------------------------------------- enumerations (the DBC's value tables)


class AxisState(enum.IntEnum):
    """``Axis_State`` / ``Axis_Requested_State``."""

    UNDEFINED = 0
    IDLE = 1
    STARTUP_SEQUENCE = 2
    FULL_CALIBRATION_SEQUENCE = 3
    MOTOR_CALIBRATION = 4
    SENSORLESS_CONTROL = 5
    ENCODER_INDEX_SEARCH = 6
    ENCODER_OFFSET_CALIBRATION = 7
    CLOSED_LOOP_CONTROL = 8
    LOCKIN_SPIN = 9
    ENCODER_DIR_FIND = 10
    HOMING = 11
    ENCODER_HALL_POLARITY_CALIBRATION = 12
    ENCODER_HALL_PHASE_CALIBRATION = 13
    ANTICOGGING_CALIBRATION = 14


class ControlMode(enum.IntEnum):
    """``Control_Mode`` of Set_Controller_Mode."""

    VOLTAGE_CONTROL = 0
    TORQUE_CONTROL = 1
    VELOCITY_CONTROL = 2
    POSITION_CONTROL = 3


class InputMode(enum.IntEnum):
    """``Input_Mode`` of Set_Controller_Mode; the servo plans itself and only ever uses PASSTHROUGH."""

    INACTIVE = 0
    PASSTHROUGH = 1
    VEL_RAMP = 2
    POS_FILTER = 3
    MIX_CHANNELS = 4
    TRAP_TRAJ = 5
    TORQUE_RAMP = 6
    MIRROR = 7
    TUNING = 8


class ProcedureResult(enum.IntEnum):
    """``Procedure_Result`` of the heartbeat: how the last requested state ended (BUSY while it runs)."""

    SUCCESS = 0
    BUSY = 1
    CANCELLED = 2
    DISARMED = 3
    NO_RESPONSE = 4
    POLE_PAIR_CPR_MISMATCH = 5
    PHASE_RESISTANCE_OUT_OF_RANGE = 6
    PHASE_INDUCTANCE_OUT_OF_RANGE = 7
    UNBALANCED_PHASES = 8
    INVALID_MOTOR_TYPE = 9
    ILLEGAL_HALL_STATE = 10
    TIMEOUT = 11
    HOMING_WITHOUT_ENDSTOP = 12
    INVALID_STATE = 13
    NOT_CALIBRATED = 14
    NOT_CONVERGING = 15


class AxisError(enum.IntFlag):
    """``Axis_Error`` of the heartbeat (the firmware's active errors and disarm reason), ``ODriveError`` of 0.6."""

    NONE = 0
    INITIALIZING = 0x1
    SYSTEM_LEVEL = 0x2
    TIMING_ERROR = 0x4
    MISSING_ESTIMATE = 0x8
    BAD_CONFIG = 0x10
    DRV_FAULT = 0x20
    MISSING_INPUT = 0x40
    DC_BUS_OVER_VOLTAGE = 0x100
    DC_BUS_UNDER_VOLTAGE = 0x200
    DC_BUS_OVER_CURRENT = 0x400
    DC_BUS_OVER_REGEN_CURRENT = 0x800
    CURRENT_LIMIT_VIOLATION = 0x1000
    MOTOR_OVER_TEMP = 0x2000
    INVERTER_OVER_TEMP = 0x4000
    VELOCITY_LIMIT_VIOLATION = 0x8000
    POSITION_LIMIT_VIOLATION = 0x10000
    WATCHDOG_TIMER_EXPIRED = 0x1000000
    ESTOP_REQUESTED = 0x2000000
    SPINOUT_DETECTED = 0x4000000
    BRAKE_RESISTOR_DISARMED = 0x8000000
    THERMISTOR_DISCONNECTED = 0x10000000
    CALIBRATION_ERROR = 0x40000000


def error_names(bits: int) -> str:
    """``0x01001000`` → ``"CURRENT_LIMIT_VIOLATION|WATCHDOG_TIMER_EXPIRED"`` (unknown bits in hex)."""
    names = [e.name for e in AxisError if e.value and bits & e.value and e.name]
    rest = bits & ~sum(e.value for e in AxisError)
    return "|".join([*names, *([f"0x{rest:X}"] if rest else [])]) or "NONE"


def state_name(state: int) -> str:
    """The axis state's name (its number if unknown)."""
    try:
        return AxisState(state).name
    except ValueError:
        return f"STATE_{state}"


def result_name(result: int) -> str:
    """The procedure result's name (its number if unknown)."""
    try:
        return ProcedureResult(result).name
    except ValueError:
        return f"RESULT_{result}"


# ---------------------------------------------------------------- payloads

SDO_READ = 0
SDO_WRITE = 1
SDO_FORMATS = {"bool": "?", "uint8": "B", "int8": "b", "uint16": "H", "int16": "h", "uint32": "I", "int32": "i",
               "uint64": "Q", "int64": "q", "float": "f"}
"""``struct`` codes of the endpoint types ``flat_endpoints.json`` names."""

FF_SCALE = 1000.0
"""Set_Input_Pos carries Vel_FF and Torque_FF as int16 in units of 1/1000 turn/s and 1/1000 N·m (the firmware's
default ``input_vel_scale``/``input_torque_scale``)."""


class Heartbeat:
    """A decoded heartbeat: ``error`` (bits), ``state``, ``result`` (procedure), ``done`` (trajectory done)."""

    __slots__ = ("done", "error", "result", "state")

    def __init__(self, error: int, state: int, result: int, done: bool) -> None:
        self.error, self.state, self.result, self.done = error, state, result, done


def pack_heartbeat(error: int, state: int, result: int, done: bool) -> bytes:
    """Axis_Error uint32, Axis_State uint8, Procedure_Result uint8, Trajectory_Done bit 0 of byte 6, byte 7 0."""
    return struct.pack("<IBBBx", error & 0xFFFFFFFF, state, result, 1 if done else 0)


def unpack_heartbeat(data: bytes) -> Heartbeat:
    """:raises ValueError: not 8 bytes (a shorter frame is not a heartbeat of this protocol)."""
    if len(data) != 8:
        raise ValueError(f"heartbeat of {len(data)} bytes (8 expected)")
    error, state, result, flags = struct.unpack_from("<IBBB", data)
    return Heartbeat(error, state, result, bool(flags & 1))


def pack_floats(a: float, b: float = 0.0) -> bytes:
    """Two float32: encoder estimates (pos, vel), Set_Input_Vel (vel, torque FF), Get_Torques (target, estimate),
    Set_Limits (velocity, current)."""
    return struct.pack("<ff", a, b)


def unpack_floats(data: bytes) -> tuple[float, float]:
    """:raises ValueError: not 8 bytes."""
    if len(data) != 8:
        raise ValueError(f"{len(data)} bytes where two float32 (8 bytes) are expected")
    a, b = struct.unpack("<ff", data)
    return float(a), float(b)


def pack_float(x: float) -> bytes:
    """Set_Input_Torque: one float32, padded to 8 bytes as the DBC's frame length says."""
    return struct.pack("<f4x", x)


def unpack_float(data: bytes) -> float:
    """:raises ValueError: shorter than 4 bytes."""
    if len(data) < 4:
        raise ValueError(f"{len(data)} bytes where a float32 is expected")
    return float(struct.unpack_from("<f", data)[0])


def _ff(x: float) -> int:
    """A feed-forward in int16 thousandths, saturated (NaN: 0)."""
    if x != x:
        return 0
    return int(max(-32768, min(32767, round(x * FF_SCALE))))


def pack_input_pos(pos: float, vel_ff: float, torque_ff: float) -> bytes:
    """Set_Input_Pos: Input_Pos float32 [turn], Vel_FF int16 [0.001 turn/s], Torque_FF int16 [0.001 N·m]."""
    return struct.pack("<fhh", pos, _ff(vel_ff), _ff(torque_ff))


def unpack_input_pos(data: bytes) -> tuple[float, float, float]:
    """:raises ValueError: not 8 bytes."""
    if len(data) != 8:
        raise ValueError(f"Set_Input_Pos of {len(data)} bytes (8 expected)")
    pos, vel, torque = struct.unpack("<fhh", data)
    return float(pos), vel / FF_SCALE, torque / FF_SCALE


def pack_u32(x: int, y: int | None = None) -> bytes:
    """Set_Axis_State (one uint32) or Set_Controller_Mode (control mode, input mode)."""
    return struct.pack("<I", x) + (struct.pack("<I", y) if y is not None else b"\0\0\0\0")


def pack_version(protocol: int, hw: tuple[int, int, int], fw: tuple[int, int, int], unreleased: int) -> bytes:
    """Get_Version: protocol, hardware (product line, version, variant), firmware (major, minor, revision),
    unreleased flag; one byte each."""
    return bytes([protocol, *hw, *fw, unreleased])


def unpack_version(data: bytes) -> tuple[str, str]:
    """(firmware "0.6.10", hardware "4.4.58") of a Get_Version answer. :raises ValueError: not 8 bytes."""
    if len(data) != 8:
        raise ValueError(f"Get_Version of {len(data)} bytes (8 expected)")
    return f"{data[4]}.{data[5]}.{data[6]}", f"{data[1]}.{data[2]}.{data[3]}"


def pack_sdo(opcode: int, endpoint: int, fmt: str = "", value: object = None) -> bytes:
    """RxSdo/TxSdo: opcode (TxSdo: reserved) uint8, endpoint ID uint16, reserved uint8, value (``fmt``), padded."""
    body = struct.pack("<BHB", opcode, endpoint, 0) + (struct.pack("<" + fmt, value) if fmt else b"")
    return body.ljust(8, b"\0")


def unpack_sdo(data: bytes) -> tuple[int, int, bytes]:
    """(opcode, endpoint ID, value bytes). :raises ValueError: shorter than 4 bytes."""
    if len(data) < 4:
        raise ValueError(f"SDO frame of {len(data)} bytes")
    opcode, endpoint, _ = struct.unpack_from("<BHB", data)
    return opcode, endpoint, bytes(data[4:])
