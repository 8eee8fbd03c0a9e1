"""The CiA 402 drive state machine as pure logic: controlword → transition, state → statusword bits.

No CANopen, no clock, no joint: :mod:`._drive` performs what each transition means for the motor. Numbers are
those of CiA 402-2 (IEC 61800-7-201) figure "state machine": 0 start → not ready, 1 → switch on disabled,
2/6/8 shutdown, 3 switch on, 4 enable operation, 5 disable operation, 7/9/10/12 disable voltage (7, 10 also quick
stop), 11 quick stop, 12 also quick stop done, 13 fault, 14 fault reaction done, 15 fault reset, 16 enable
operation from quick stop active (quick stop options 5…8 only).
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class State(enum.Enum):
    """The eight states of a CiA 402 drive."""

    NOT_READY_TO_SWITCH_ON = "NOT READY TO SWITCH ON"
    SWITCH_ON_DISABLED = "SWITCH ON DISABLED"
    READY_TO_SWITCH_ON = "READY TO SWITCH ON"
    SWITCHED_ON = "SWITCHED ON"
    OPERATION_ENABLED = "OPERATION ENABLED"
    QUICK_STOP_ACTIVE = "QUICK STOP ACTIVE"
    FAULT_REACTION_ACTIVE = "FAULT REACTION ACTIVE"
    FAULT = "FAULT"


class Command(enum.Enum):
    """Device control commands decoded from controlword bits 0–3 (bit 7, fault reset, is an edge: see below)."""

    SHUTDOWN = "shutdown"  # 0xxx x110
    SWITCH_ON = "switch on"  # 0xxx 0111 (also "disable operation")
    ENABLE_OPERATION = "enable operation"  # 0xxx 1111 (also "switch on + enable operation")
    DISABLE_VOLTAGE = "disable voltage"  # 0xxx xx0x
    QUICK_STOP = "quick stop"  # 0xxx x01x


# Controlword bits.
CW_SWITCH_ON = 1 << 0
CW_ENABLE_VOLTAGE = 1 << 1
CW_QUICK_STOP = 1 << 2  # Active low: 0 commands a quick stop.
CW_ENABLE_OPERATION = 1 << 3
CW_HOMING_START = 1 << 4  # Homing mode: operation start (rising edge).
CW_FAULT_RESET = 1 << 7
CW_HALT = 1 << 8

# Statusword bits.
SW_READY_TO_SWITCH_ON = 1 << 0
SW_SWITCHED_ON = 1 << 1
SW_OPERATION_ENABLED = 1 << 2
SW_FAULT = 1 << 3
SW_VOLTAGE_ENABLED = 1 << 4
SW_QUICK_STOP = 1 << 5  # Active low: 0 while a quick stop is active.
SW_SWITCH_ON_DISABLED = 1 << 6
SW_WARNING = 1 << 7
SW_REMOTE = 1 << 9
SW_TARGET_REACHED = 1 << 10
SW_INTERNAL_LIMIT = 1 << 11
SW_OP_MODE_12 = 1 << 12  # CSP/CSV/CST: drive follows the command value; homing: homing attained.
SW_OP_MODE_13 = 1 << 13  # CSP: following error; homing: homing error.

_STATE_BITS = {
    State.NOT_READY_TO_SWITCH_ON: 0x0000,
    State.SWITCH_ON_DISABLED: SW_SWITCH_ON_DISABLED,
    State.READY_TO_SWITCH_ON: SW_QUICK_STOP | SW_VOLTAGE_ENABLED | SW_READY_TO_SWITCH_ON,
    State.SWITCHED_ON: SW_QUICK_STOP | SW_VOLTAGE_ENABLED | SW_SWITCHED_ON | SW_READY_TO_SWITCH_ON,
    State.OPERATION_ENABLED: SW_QUICK_STOP
    | SW_VOLTAGE_ENABLED
    | SW_OPERATION_ENABLED
    | SW_SWITCHED_ON
    | SW_READY_TO_SWITCH_ON,
    State.QUICK_STOP_ACTIVE: SW_VOLTAGE_ENABLED | SW_OPERATION_ENABLED | SW_SWITCHED_ON | SW_READY_TO_SWITCH_ON,
    State.FAULT_REACTION_ACTIVE: SW_VOLTAGE_ENABLED
    | SW_FAULT
    | SW_OPERATION_ENABLED
    | SW_SWITCHED_ON
    | SW_READY_TO_SWITCH_ON,
    State.FAULT: SW_FAULT,
}

STATE_MASK = 0x006F
"""Statusword bits that tell the state (0, 1, 2, 3, 5, 6); bit 5 is "don't care" in not ready, switch on disabled,
fault reaction active and fault."""

POWERED = frozenset({State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE, State.FAULT_REACTION_ACTIVE})
"""States in which the motor may carry current."""


class Transition(NamedTuple):
    """A state change and the transition numbers it took (3 + 4 for "switch on + enable operation")."""

    target: State
    numbers: tuple[int, ...]


def state_bits(state: State) -> int:
    """The statusword bits of ``state`` (bits 0–6 of the standard patterns)."""
    return _STATE_BITS[state]


def decode_statusword(statusword: int) -> State | None:
    """The state a statusword shows, or None if it shows none (the standard masks)."""
    for state, bits in _STATE_BITS.items():
        dont_care_qs = state in (
            State.NOT_READY_TO_SWITCH_ON,
            State.SWITCH_ON_DISABLED,
            State.FAULT_REACTION_ACTIVE,
            State.FAULT,
        )
        mask = 0x004F if dont_care_qs else STATE_MASK
        if statusword & mask == bits & mask:
            return state
    return None


def decode(controlword: int) -> Command:
    """The device control command in controlword bits 0–3 (bit 7 ignored: the fault reset edge is separate)."""
    if not controlword & CW_ENABLE_VOLTAGE:
        return Command.DISABLE_VOLTAGE
    if not controlword & CW_QUICK_STOP:
        return Command.QUICK_STOP
    if not controlword & CW_SWITCH_ON:
        return Command.SHUTDOWN
    if not controlword & CW_ENABLE_OPERATION:
        return Command.SWITCH_ON
    return Command.ENABLE_OPERATION


def quick_stop_stays(option: int) -> bool:
    """Quick stop option code 0x605A: 5…8 stay in quick stop active after the stop, 0…4 go to switch on disabled."""
    return 5 <= option <= 8


_TABLE: dict[tuple[State, Command], Transition] = {
    (State.SWITCH_ON_DISABLED, Command.SHUTDOWN): Transition(State.READY_TO_SWITCH_ON, (2,)),
    (State.READY_TO_SWITCH_ON, Command.SWITCH_ON): Transition(State.SWITCHED_ON, (3,)),
    (State.READY_TO_SWITCH_ON, Command.ENABLE_OPERATION): Transition(State.OPERATION_ENABLED, (3, 4)),
    (State.READY_TO_SWITCH_ON, Command.DISABLE_VOLTAGE): Transition(State.SWITCH_ON_DISABLED, (7,)),
    (State.READY_TO_SWITCH_ON, Command.QUICK_STOP): Transition(State.SWITCH_ON_DISABLED, (7,)),
    (State.SWITCHED_ON, Command.ENABLE_OPERATION): Transition(State.OPERATION_ENABLED, (4,)),
    (State.SWITCHED_ON, Command.SHUTDOWN): Transition(State.READY_TO_SWITCH_ON, (6,)),
    (State.SWITCHED_ON, Command.DISABLE_VOLTAGE): Transition(State.SWITCH_ON_DISABLED, (10,)),
    (State.SWITCHED_ON, Command.QUICK_STOP): Transition(State.SWITCH_ON_DISABLED, (10,)),
    (State.OPERATION_ENABLED, Command.SWITCH_ON): Transition(State.SWITCHED_ON, (5,)),
    (State.OPERATION_ENABLED, Command.SHUTDOWN): Transition(State.READY_TO_SWITCH_ON, (8,)),
    (State.OPERATION_ENABLED, Command.DISABLE_VOLTAGE): Transition(State.SWITCH_ON_DISABLED, (9,)),
    (State.OPERATION_ENABLED, Command.QUICK_STOP): Transition(State.QUICK_STOP_ACTIVE, (11,)),
    (State.QUICK_STOP_ACTIVE, Command.DISABLE_VOLTAGE): Transition(State.SWITCH_ON_DISABLED, (12,)),
}
"""Controlword-driven transitions outside fault handling; every other (state, command) pair changes nothing."""


def on_controlword(state: State, controlword: int, previous: int, quick_stop_option: int) -> Transition | None:
    """The transition a newly received controlword causes in ``state`` (``previous``: the controlword before it).

    In FAULT only a rising edge of bit 7 acts (15); in NOT READY and FAULT REACTION ACTIVE nothing does. Enable
    operation leaves QUICK STOP ACTIVE (16) only under a quick stop option that stays there (5…8).
    """
    if state is State.FAULT:
        if controlword & CW_FAULT_RESET and not previous & CW_FAULT_RESET:
            return Transition(State.SWITCH_ON_DISABLED, (15,))
        return None
    if state in (State.NOT_READY_TO_SWITCH_ON, State.FAULT_REACTION_ACTIVE):
        return None
    command = decode(controlword)
    if state is State.QUICK_STOP_ACTIVE and command is Command.ENABLE_OPERATION and quick_stop_stays(quick_stop_option):
        return Transition(State.OPERATION_ENABLED, (16,))
    return _TABLE.get((state, command))


def on_ready(state: State) -> Transition | None:
    """Initialisation finished (1): NOT READY → SWITCH ON DISABLED."""
    return Transition(State.SWITCH_ON_DISABLED, (1,)) if state is State.NOT_READY_TO_SWITCH_ON else None


def on_fault(state: State) -> Transition | None:
    """A fault occurred (13): any state but FAULT REACTION ACTIVE and FAULT → FAULT REACTION ACTIVE."""
    if state in (State.FAULT_REACTION_ACTIVE, State.FAULT):
        return None
    return Transition(State.FAULT_REACTION_ACTIVE, (13,))


def on_fault_reaction_done(state: State) -> Transition | None:
    """The fault reaction finished (14): FAULT REACTION ACTIVE → FAULT."""
    return Transition(State.FAULT, (14,)) if state is State.FAULT_REACTION_ACTIVE else None


def on_quick_stop_done(state: State, quick_stop_option: int) -> Transition | None:
    """The quick stop finished: under options 0…4 QUICK STOP ACTIVE → SWITCH ON DISABLED (12), else it stays."""
    if state is State.QUICK_STOP_ACTIVE and not quick_stop_stays(quick_stop_option):
        return Transition(State.SWITCH_ON_DISABLED, (12,))
    return None
