"""The CiA 402 state machine as pure logic: every (state, controlword command) pair against the standard's table,
the event transitions, and the statusword patterns against canopen's own ``State402`` masks."""

from __future__ import annotations

import pytest
from canopen.profiles.p402 import State402

from sim_plant_node.cia402 import _statemachine as sm
from sim_plant_node.cia402._statemachine import Command, State

S = State
NR, SOD, RTSO, SO, OE, QSA, FRA, F = (
    S.NOT_READY_TO_SWITCH_ON,
    S.SWITCH_ON_DISABLED,
    S.READY_TO_SWITCH_ON,
    S.SWITCHED_ON,
    S.OPERATION_ENABLED,
    S.QUICK_STOP_ACTIVE,
    S.FAULT_REACTION_ACTIVE,
    S.FAULT,
)

CONTROLWORDS = {
    Command.SHUTDOWN: 0x06,
    Command.SWITCH_ON: 0x07,
    Command.ENABLE_OPERATION: 0x0F,
    Command.DISABLE_VOLTAGE: 0x00,
    Command.QUICK_STOP: 0x02,
}
"""The standard's controlword of each command (bits 0–3)."""

EXPECTED: dict[tuple[State, Command], tuple[State, tuple[int, ...]] | None] = {
    (NR, Command.SHUTDOWN): None,
    (NR, Command.SWITCH_ON): None,
    (NR, Command.ENABLE_OPERATION): None,
    (NR, Command.DISABLE_VOLTAGE): None,
    (NR, Command.QUICK_STOP): None,
    (SOD, Command.SHUTDOWN): (RTSO, (2,)),
    (SOD, Command.SWITCH_ON): None,
    (SOD, Command.ENABLE_OPERATION): None,
    (SOD, Command.DISABLE_VOLTAGE): None,
    (SOD, Command.QUICK_STOP): None,
    (RTSO, Command.SHUTDOWN): None,
    (RTSO, Command.SWITCH_ON): (SO, (3,)),
    (RTSO, Command.ENABLE_OPERATION): (OE, (3, 4)),
    (RTSO, Command.DISABLE_VOLTAGE): (SOD, (7,)),
    (RTSO, Command.QUICK_STOP): (SOD, (7,)),
    (SO, Command.SHUTDOWN): (RTSO, (6,)),
    (SO, Command.SWITCH_ON): None,
    (SO, Command.ENABLE_OPERATION): (OE, (4,)),
    (SO, Command.DISABLE_VOLTAGE): (SOD, (10,)),
    (SO, Command.QUICK_STOP): (SOD, (10,)),
    (OE, Command.SHUTDOWN): (RTSO, (8,)),
    (OE, Command.SWITCH_ON): (SO, (5,)),
    (OE, Command.ENABLE_OPERATION): None,
    (OE, Command.DISABLE_VOLTAGE): (SOD, (9,)),
    (OE, Command.QUICK_STOP): (QSA, (11,)),
    (QSA, Command.SHUTDOWN): None,
    (QSA, Command.SWITCH_ON): None,
    (QSA, Command.ENABLE_OPERATION): None,  # Under options 0…4; 5…8: 16, below.
    (QSA, Command.DISABLE_VOLTAGE): (SOD, (12,)),
    (QSA, Command.QUICK_STOP): None,
    (FRA, Command.SHUTDOWN): None,
    (FRA, Command.SWITCH_ON): None,
    (FRA, Command.ENABLE_OPERATION): None,
    (FRA, Command.DISABLE_VOLTAGE): None,
    (FRA, Command.QUICK_STOP): None,
    (F, Command.SHUTDOWN): None,
    (F, Command.SWITCH_ON): None,
    (F, Command.ENABLE_OPERATION): None,
    (F, Command.DISABLE_VOLTAGE): None,
    (F, Command.QUICK_STOP): None,
}


def _result(t: sm.Transition | None) -> tuple[State, tuple[int, ...]] | None:
    return None if t is None else (t.target, t.numbers)


def test_the_table_covers_every_pair() -> None:
    assert set(EXPECTED) == {(s, c) for s in State for c in Command}


@pytest.mark.parametrize(("state", "command"), sorted(EXPECTED, key=lambda k: (k[0].value, k[1].value)))
def test_controlword_transition(state: State, command: Command) -> None:
    """Each command in each state, with and without don't-care bits (4–6, 8–15) set, bit 7 steady."""
    cw = CONTROLWORDS[command]
    assert sm.decode(cw) is command
    for extra in (0x0000, 0x0070, 0xFF70):
        for bit7 in (0, sm.CW_FAULT_RESET) if state is not F else (0,):
            word = cw | extra | bit7
            assert _result(sm.on_controlword(state, word, word, 2)) == EXPECTED[(state, command)], hex(word)


@pytest.mark.parametrize("option", range(9))
def test_enable_operation_leaves_quick_stop_only_under_staying_options(option: int) -> None:
    t = sm.on_controlword(QSA, 0x0F, 0x02, option)
    assert _result(t) == ((OE, (16,)) if option >= 5 else None)
    assert _result(sm.on_quick_stop_done(QSA, option)) == (None if option >= 5 else (SOD, (12,)))


def test_fault_reset_acts_on_the_rising_edge_of_bit_7_in_fault_only() -> None:
    assert _result(sm.on_controlword(F, 0x80, 0x00, 2)) == (SOD, (15,))
    assert _result(sm.on_controlword(F, 0x86, 0x06, 2)) == (SOD, (15,))
    assert sm.on_controlword(F, 0x80, 0x80, 2) is None  # Held, not an edge.
    assert sm.on_controlword(F, 0x00, 0x80, 2) is None  # Falling edge.
    assert sm.on_controlword(FRA, 0x80, 0x00, 2) is None  # The reaction runs to its end first.


@pytest.mark.parametrize("state", list(State))
def test_event_transitions(state: State) -> None:
    """1 (ready), 13 (fault from anywhere but the fault states), 14 (reaction done), 12 (quick stop done)."""
    assert _result(sm.on_ready(state)) == ((SOD, (1,)) if state is NR else None)
    assert _result(sm.on_fault(state)) == (None if state in (FRA, F) else (FRA, (13,)))
    assert _result(sm.on_fault_reaction_done(state)) == ((F, (14,)) if state is FRA else None)
    if state is not QSA:
        assert sm.on_quick_stop_done(state, 2) is None


@pytest.mark.parametrize("state", list(State))
def test_statusword_patterns_are_canopens(state: State) -> None:
    """The state bits match canopen's masks (an independent reading of the standard) and decode back."""
    mask, value = State402.SW_MASK[state.value]
    bits = sm.state_bits(state)
    assert bits & mask == value
    assert sm.decode_statusword(bits | sm.SW_REMOTE | sm.SW_TARGET_REACHED) is state
    assert bool(bits & sm.SW_VOLTAGE_ENABLED) == (state in (RTSO, SO, OE, QSA, FRA))


def test_canopens_transition_commands_take_its_transitions() -> None:
    """Every controlword canopen's BaseNode402 sends for a transition takes that transition here."""
    for (source, target), cw in State402.TRANSITIONTABLE.items():
        if source == "START" or (cw == 0 and source in ("NOT READY TO SWITCH ON", "FAULT REACTION ACTIVE")):
            continue  # Automatic transitions (0, 1, 14): events, not controlwords.
        t = sm.on_controlword(State(source), cw, 0x00, 6 if source == "QUICK STOP ACTIVE" else 2)
        assert t is not None and t.target is State(target), (source, target, hex(cw))
