"""Register validation, environment overrides and persistence of the servo registry."""

from pathlib import Path

import pytest
from pycyphal.application.register import Bit, Real32, String, Value

from servo_node.registers import RefusedWriteError, ServoRegistry


def real(*x: float) -> Value:
    return Value(real32=Real32(list(x)))


def test_defaults_and_environment() -> None:
    reg = ServoRegistry(None, {"SERVO__PROFILE__JERK": "123", "SERVO__PROFILE__VELOCITY": "-2 3"})
    assert reg.real("servo.profile.jerk") == pytest.approx(123)
    assert reg.reals("servo.profile.velocity") == pytest.approx((-2, 3))
    assert reg.real("servo.deadman_timeout") == pytest.approx(0.5)
    reg.shutdown()


def test_invalid_environment_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"servo\.profile\.jerk"):
        ServoRegistry(None, {"SERVO__PROFILE__JERK": "-1"})


@pytest.mark.parametrize(
    "name, bad",
    [
        ("servo.profile.velocity", real(1, 2)),
        ("servo.profile.velocity", real(-1, 0)),
        ("servo.profile.acceleration", real(0, 1)),
        ("servo.profile.acceleration", real(-1, float("nan"))),
        ("servo.profile.jerk", real(0)),
        ("servo.profile.jerk", real(float("inf"))),
        ("servo.deadman_timeout", real(-0.1)),
        ("servo.drive.mode", Value(string=String("warp"))),
    ],
)
def test_refused_writes_keep_the_old_value(name: str, bad: Value) -> None:
    refused: list[tuple[str, str]] = []
    reg = ServoRegistry(None, {}, on_refused=lambda n, r: refused.append((n, r)))
    before = repr(reg[name].value)
    with pytest.raises(RefusedWriteError):
        reg[name] = bad
    assert repr(reg[name].value) == before
    assert reg.refused_writes == 1 and refused[0][0] == name
    reg.shutdown()


def test_valid_write_and_persistence(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    reg = ServoRegistry(path, {})
    reg["servo.profile.acceleration"] = real(-300, 3.14)
    reg.shutdown()
    reg = ServoRegistry(path, {})
    assert reg.reals("servo.profile.acceleration") == pytest.approx((-300, 3.14))
    reg.shutdown()


def test_values_read_again_after_every_write_and_reset() -> None:
    """The typed reads are remembered between writes (a setpoint reads the profile defaults), never past one."""
    reg = ServoRegistry(None, {"SERVO__AXES": "left"})
    reg.declare()
    reg.setdefault("left.servo.profile.velocity", real(-10, 10))
    assert reg.reals("left.servo.profile.velocity") == pytest.approx((-10, 10))
    reg["left.servo.profile.velocity"] = real(-3, 4)
    assert reg.reals("left.servo.profile.velocity") == pytest.approx((-3, 4))
    with pytest.raises(RefusedWriteError):
        reg["left.servo.profile.velocity"] = real(1, 2)
    assert reg.reals("left.servo.profile.velocity") == pytest.approx((-3, 4))
    assert reg.text("servo.drive.mode") == "velocity"
    reg["servo.drive.mode"] = Value(string=String("torque"))
    assert reg.text("servo.drive.mode") == "torque"
    assert reg.flag("servo.stop.disengage_immediately") is False
    reg["servo.stop.disengage_immediately"] = Value(bit=Bit([True]))
    assert reg.flag("servo.stop.disengage_immediately") is True
    reg.factory_reset()
    reg.declare()
    assert reg.text("servo.drive.mode") == "velocity" and reg.flag("servo.stop.disengage_immediately") is False
    reg.shutdown()
