"""The CiA 402 drive's object dictionary: the shipped EDS, the indices the emulator implements, value ranges.

The EDS (``sim_plant_node/cia402_drive.eds``, package data) is the one description of the dictionary: the
emulator's :class:`canopen.LocalNode` is built from it and a master reads the same file. This module names the
objects the code acts on and says which values it accepts.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from typing import Any

EDS_NAME = "cia402_drive.eds"
"""File name of the EDS inside the ``sim_plant_node`` package."""

# Communication profile (CiA 301).
DEVICE_TYPE = 0x1000
ERROR_REGISTER = 0x1001
SYNC_COB_ID = 0x1005
CYCLE_PERIOD = 0x1006
DEVICE_NAME = 0x1008
GUARD_TIME = 0x100C
LIFE_TIME_FACTOR = 0x100D
CONSUMER_HEARTBEAT = 0x1016
PRODUCER_HEARTBEAT = 0x1017
IDENTITY = 0x1018
RPDO_COMM, RPDO_MAP, TPDO_COMM, TPDO_MAP = 0x1400, 0x1600, 0x1800, 0x1A00
PDO_COUNT = 4
"""RPDOs and TPDOs each of the shipped EDS (communication 0x1400…0x1403 / 0x1800…0x1803, mapping 0x1600…0x1603 /
0x1A00…0x1A03); another file declares its own (:func:`._profile.pdo_numbers`)."""
PDO_MAX = 512
"""PDOs of each direction CiA 301 allows (0x1400…0x15FF, 0x1800…0x19FF and their mappings)."""


def pdo_parameter(index: int) -> tuple[bool, bool, int] | None:
    """(receive, mapping, PDO number 1…512) if ``index`` is a PDO communication or mapping parameter, else None."""
    for base, receive, mapping in (
        (RPDO_COMM, True, False),
        (RPDO_MAP, True, True),
        (TPDO_COMM, False, False),
        (TPDO_MAP, False, True),
    ):
        if base <= index < base + PDO_MAX:
            return receive, mapping, index - base + 1
    return None


# Drive profile (CiA 402).
ERROR_CODE = 0x603F
ABORT_CONNECTION_OPTION = 0x6007
CONTROLWORD = 0x6040
STATUSWORD = 0x6041
QUICK_STOP_OPTION = 0x605A
SHUTDOWN_OPTION = 0x605B
DISABLE_OPERATION_OPTION = 0x605C
HALT_OPTION = 0x605D
FAULT_REACTION_OPTION = 0x605E
MODES_OF_OPERATION = 0x6060
MODES_OF_OPERATION_DISPLAY = 0x6061
POSITION_ACTUAL = 0x6064
FOLLOWING_ERROR_WINDOW = 0x6065
FOLLOWING_ERROR_TIMEOUT = 0x6066
POSITION_WINDOW = 0x6067
VELOCITY_ACTUAL = 0x606C
VELOCITY_WINDOW = 0x606D
TARGET_TORQUE = 0x6071
MAX_TORQUE = 0x6072
RATED_TORQUE = 0x6076
TORQUE_ACTUAL = 0x6077
TARGET_POSITION = 0x607A
HOME_OFFSET = 0x607C
PROFILE_DECELERATION = 0x6084
QUICK_STOP_DECELERATION = 0x6085
HOMING_METHOD = 0x6098
VELOCITY_OFFSET = 0x60B1
TORQUE_OFFSET = 0x60B2
FOLLOWING_ERROR_ACTUAL = 0x60F4
TARGET_VELOCITY = 0x60FF
DIGITAL_INPUTS = 0x60FD
HOMING_SPEEDS = 0x6099
HOMING_ACCELERATION = 0x609A
INTERPOLATION_SUB_MODE = 0x60C0
INTERPOLATION_DATA = 0x60C1
INTERPOLATION_PERIOD = 0x60C2
SUPPORTED_DRIVE_MODES = 0x6502

# Modes of operation (0x6060 values) and their bits in 0x6502.
MODE_NONE, MODE_HOMING, MODE_IP, MODE_CSP, MODE_CSV, MODE_CST = 0, 6, 7, 8, 9, 10
MODES = (MODE_NONE, MODE_HOMING, MODE_CSP, MODE_CSV, MODE_CST)
"""The modes the shipped EDS offers (0x6502 = :data:`SUPPORTED_MODES_BITS`); another file's: :mod:`._profile`."""
SUPPORTED_MODES_BITS = (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9)
HOMING_METHODS = (17, 18, 35, 37)
"""17/18: the negative/positive limit switch (no index pulse); 35/37: the current position (35 is its number up to
CiA 402 2.0, 37 since); a file's LowLimit/HighLimit of 0x6098 may narrow them."""

DRIVE_OBJECTS = (
    ERROR_CODE,
    ABORT_CONNECTION_OPTION,
    CONTROLWORD,
    STATUSWORD,
    QUICK_STOP_OPTION,
    SHUTDOWN_OPTION,
    DISABLE_OPERATION_OPTION,
    HALT_OPTION,
    FAULT_REACTION_OPTION,
    MODES_OF_OPERATION,
    MODES_OF_OPERATION_DISPLAY,
    POSITION_ACTUAL,
    FOLLOWING_ERROR_WINDOW,
    FOLLOWING_ERROR_TIMEOUT,
    POSITION_WINDOW,
    VELOCITY_ACTUAL,
    VELOCITY_WINDOW,
    TARGET_TORQUE,
    MAX_TORQUE,
    RATED_TORQUE,
    TORQUE_ACTUAL,
    TARGET_POSITION,
    HOME_OFFSET,
    PROFILE_DECELERATION,
    QUICK_STOP_DECELERATION,
    HOMING_METHOD,
    VELOCITY_OFFSET,
    TORQUE_OFFSET,
    FOLLOWING_ERROR_ACTUAL,
    TARGET_VELOCITY,
    SUPPORTED_DRIVE_MODES,
)
"""The CiA 402 objects whose values the drive (:class:`~._drive.Cia402Drive`) holds and serves."""

ALLOWED: dict[int, tuple[int, ...]] = {
    ABORT_CONNECTION_OPTION: (0, 1, 2, 3),
    QUICK_STOP_OPTION: tuple(range(9)),
    SHUTDOWN_OPTION: (0, 1),
    DISABLE_OPERATION_OPTION: (0, 1),
    HALT_OPTION: (1, 2, 3, 4),
    FAULT_REACTION_OPTION: (0, 1, 2, 3, 4),
    MODES_OF_OPERATION: MODES,
    HOMING_METHOD: HOMING_METHODS,
}
"""Values a write may set (others are refused: SDO abort "value range exceeded")."""

# Emergency error codes (CiA 301 / CiA 402) and error register bits.
EMCY_OVER_CURRENT = 0x2310  # Continuous over-current (the injected fault).
EMCY_HEARTBEAT = 0x8130  # Life guard or heartbeat error.
ERR_GENERIC, ERR_CURRENT, ERR_COMMUNICATION = 1 << 0, 1 << 1, 1 << 4


def eds_path() -> Any:
    """A context manager giving the EDS as a real file path (``with eds_path() as p: ...``)."""
    return as_file(files("sim_plant_node").joinpath(EDS_NAME))
