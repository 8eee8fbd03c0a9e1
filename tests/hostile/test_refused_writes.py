"""Issue 10 item 5: every refused register write is counted and reported, whatever layer refused it.

Writes go through the real yakut CLI: ``y r`` (yakut coerces the text to the register's type first, so a wrong *size*
reaches the node) and ``y call uavcan.register.access`` (a wrong *type* reaches the node as sent). pycyphal's register
server refuses those inside its value conversion; before, only validator refusals were counted. Our own Access
server (``cyphal_common.register_access``) also counts writes to unknown and read-only registers, which pycyphal's
ignores without a trace, and element-count changes of pycyphal's own registers, which it would truncate or pad.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

from servo_node.registers import ServoRegistry
from tests.hostile.harness import LoggedNode, logged_servo_node
from tests.procs import RegisterClient, base_env, wait_for, y

NODE = 3716
READER = 3992
_client_ids = itertools.count(3801)  # A fresh client node-ID per yakut call: no transfer-ID clash between calls.


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoggedNode, RegisterClient, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("refused")
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    with logged_servo_node(env, tmp / "servo.db", tmp / "servo.log", NODE) as proc:
        reader = RegisterClient(env, NODE, READER)
        try:
            yield proc, reader, env
        finally:
            reader.close()


def refused(reader: RegisterClient) -> int:
    return int(reader.json("sys.counters")["refused_writes"])


ACCESS = "uavcan.register.access"
UNCHANGED = "unchanged"
"""``after`` of a register whose value is whatever it was before the write (the write must not change it)."""
CASES = [
    # (yakut arguments, register, value afterwards, words in the report)
    (["r", "servo.profile.velocity", "1", "2", "3"], "servo.profile.velocity", [-10.0, 10.0], "must be two values"),
    (
        ["call", ACCESS, "{name: {name: servo.profile.jerk}, value: {string: {value: hello}}}"],
        "servo.profile.jerk",
        [500.0],
        "cannot convert string to real32[1]",
    ),
    (
        ["call", ACCESS, "{name: {name: servo.drive.mode}, value: {natural16: {value: [7]}}}"],
        "servo.drive.mode",
        "velocity",
        "cannot convert natural16[1] to string",
    ),
    (
        ["call", ACCESS, "{name: {name: servo.profile.velocity}, value: {real64: {value: [-1, 2, 3]}}}"],
        "servo.profile.velocity",
        [-10.0, 10.0],
        "needs 2 values, got 3",
    ),
    (
        ["call", ACCESS, "{name: {name: servo.profile.jerk}, value: {real32: {value: [.nan, 1]}}}"],
        "servo.profile.jerk",
        [500.0],
        "needs 1 value, got 2",
    ),
    (["r", "servo.profile.jerk", "nan"], "servo.profile.jerk", [500.0], "not finite"),  # The validator, as before.
    (
        ["call", ACCESS, "{name: {name: no.such.register}, value: {real32: {value: [1]}}}"],
        "no.such.register",
        None,
        "no such register",
    ),
    (
        ["call", ACCESS, "{name: {name: sys.counters}, value: {string: {value: '{}'}}}"],
        "sys.counters",
        UNCHANGED,
        "read-only",
    ),
    (
        ["call", ACCESS, "{name: {name: uavcan.pub.dynamics.id}, value: {natural16: {value: [7, 8]}}}"],
        "uavcan.pub.dynamics.id",
        UNCHANGED,
        "needs 1 value, got 2",
    ),
]


def _access(name: str, value: str) -> list[str]:
    return ["call", str(NODE), ACCESS, f"{{name: {{name: {name}}}, value: {value}}}"]


CONVERSION_CASES = [
    # Issue 49 finding 6: values pycyphal's conversion raised on (no response, no count, no diagnostic), and values a
    # bit took as true. (register, value as sent, words in the report)
    *[
        (name, value, words)
        for name in ("servo.drive.node_id", "uavcan.pub.dynamics.id", "servo.drive.canopen.node_id")
        for value, words in (
            ("{real64: {value: [.nan]}}", "not a number"),
            ("{real64: {value: [.inf]}}", "infinite"),
            ("{real32: {value: [-.inf]}}", "infinite"),
            ("{real64: {value: [-1]}}", "out of range 0..65535"),
            ("{integer64: {value: [-1]}}", "out of range 0..65535"),
            ("{real64: {value: [1e30]}}", "out of range 0..65535"),
            ("{natural64: {value: [9223372036854775808]}}", "out of range 0..65535"),
            ("{real32: {value: [2.5]}}", "not a whole number"),  # Was rounded to 2, silently.
        )
    ],
    ("servo.drive.can.bitrate", "{real64: {value: [1e30]}}", "out of range 0..4294967295"),
    *[
        ("servo.stop.disengage_immediately", value, "a bit takes 0 or 1")
        for value in ("{real64: {value: [.nan]}}", "{real64: {value: [.inf]}}", "{integer8: {value: [-1]}}",
                      "{natural8: {value: [2]}}", "{real32: {value: [0.5]}}")
    ],
]


@pytest.mark.parametrize(("name", "value", "words"), CONVERSION_CASES)
def test_unconvertible_value_is_answered_refused_and_reported(
    name: str, value: str, words: str, node: tuple[LoggedNode, RegisterClient, dict[str, str]]
) -> None:
    """``y call uavcan.register.access`` as sent: the node answers with the value it keeps (the call does not time
    out), counts the refusal and reports it with the reason."""
    proc, reader, env = node
    before, kept = refused(reader), reader.read(name)
    out = y("-j", *_access(name, value), env=env, client_id=next(_client_ids))
    answer = json.loads(out)["384"]["value"]
    assert answer == json.loads(y("-j", *_access(name, "{}"), env=env, client_id=next(_client_ids)))["384"]["value"]
    wait_for(lambda: refused(reader) == before + 1, 10, what=f"refused_writes {before} -> {before + 1}")
    assert reader.read(name) == kept
    wait_for(lambda: f"register write refused: {name}" in proc.text(), 10, what="the refusal in the log")
    line = [ln for ln in proc.text().splitlines() if f"register write refused: {name}" in ln][-1]
    assert words in line, line
    proc.assert_alive_and_clean()


def test_a_bit_takes_zero_one_false_true(node: tuple[LoggedNode, RegisterClient, dict[str, str]]) -> None:
    """What a bit does take, from any numeric type: 0/1 and false/true; each write answered with the new value."""
    _, reader, env = node
    before = refused(reader)
    name = "servo.stop.disengage_immediately"
    for value, expect in (("{real64: {value: [1]}}", [1.0]), ("{natural8: {value: [0]}}", [0.0]),
                          ("{bit: {value: [true]}}", [1.0]), ("{integer64: {value: [0]}}", [0.0])):
        y(*_access(name, value), env=env, client_id=next(_client_ids))
        assert reader.read(name) == expect, value
    assert refused(reader) == before


@pytest.mark.parametrize(("args", "name", "after", "words"), CASES)
def test_refused_write_is_counted_and_reported(
    args: list[str], name: str, after: object, words: str, node: tuple[LoggedNode, RegisterClient, dict[str, str]]
) -> None:
    proc, reader, env = node
    before = refused(reader)
    if after == UNCHANGED and name != "sys.counters":
        after = reader.read(name)
    verb, *rest = args
    y(verb, str(NODE), *rest, env=env, client_id=next(_client_ids))
    wait_for(lambda: refused(reader) == before + 1, 10, what=f"refused_writes {before} -> {before + 1}")
    if after != UNCHANGED:  # sys.counters has just changed by the refusal itself.
        assert reader.read(name) == after
    wait_for(lambda: f"register write refused: {name}" in proc.text(), 10, what="the refusal in the log")
    line = [ln for ln in proc.text().splitlines() if f"register write refused: {name}" in ln][-1]
    assert words in line, line
    proc.assert_alive_and_clean()


Node = tuple[LoggedNode, RegisterClient, dict[str, str]]


def test_yakut_refuses_text_for_a_number_before_sending(node: Node) -> None:
    """``y r … servo.profile.jerk hello``: yakut's own coercion fails (exit code 100); nothing reaches the node."""
    _, reader, env = node
    before = refused(reader)
    out = y("r", str(NODE), "servo.profile.jerk", "hello", env=env, client_id=next(_client_ids), check=False)
    assert json.loads(out or "null") in (500.0, None)
    assert refused(reader) == before and reader.read("servo.profile.jerk") == [500.0]


def test_direct_writes_of_the_wrong_type_are_counted() -> None:
    seen: list[tuple[str, str]] = []
    reg = ServoRegistry(None, {}, on_refused=lambda n, r: seen.append((n, r)))
    from pycyphal.application.register import ValueConversionError

    with pytest.raises(ValueConversionError):
        reg["servo.profile.jerk"] = "hello"
    with pytest.raises(ValueConversionError):
        reg["servo.profile.velocity"] = [1.0, 2.0, 3.0]
    with pytest.raises(ValueConversionError):
        reg["servo.profile.jerk"] = -1.0
    assert reg.refused_writes == 3
    assert [n for n, _ in seen] == ["servo.profile.jerk", "servo.profile.velocity", "servo.profile.jerk"]
    reg["servo.profile.jerk"] = 42.0  # A good write is not counted.
    assert reg.refused_writes == 3 and reg.real("servo.profile.jerk") == 42.0
    reg.shutdown()


def test_overflowing_real64_write_is_refused_quietly() -> None:
    """Fuzz finding: real64 1e300 into a real32 register printed numpy's overflow RuntimeWarning on stderr."""
    import warnings

    from pycyphal.application.register import Real64, Value, ValueConversionError

    reg = ServoRegistry(None, {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proxy = reg["servo.profile.jerk"]
        with pytest.raises(ValueConversionError, match="out of range of real32"):
            proxy.assign(Value(real64=Real64([1e300])))  # What the register server does first: refused there.
        with pytest.raises(ValueConversionError, match="out of range of real32"):
            reg["servo.profile.jerk"] = Value(real64=Real64([1e300]))  # A direct write.
    assert reg.refused_writes == 2 and reg.real("servo.profile.jerk") == 500.0
    reg.shutdown()
