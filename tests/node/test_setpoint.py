"""Setpoint semantics of the Telega servo command: defaults, velocity mode, rejection of bad values."""

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servo_node.setpoint import (
    SERVO_COMMAND_EXTENT,
    SERVO_COMMAND_PREFIXES,
    ProfileLimits,
    Rejected,
    Rejection,
    Setpoint,
    interpret,
    servo_command_fields,
)

DEFAULTS = ProfileLimits(-10.0, 10.0, -50.0, 50.0, 500.0)
FORCE = 100.0


def cmd(
    p: float = 1.0,
    v: float = 0.0,
    f: float = 0.0,
    vel: tuple[float, float] = (0.0, 0.0),
    acc: tuple[float, float] = (0.0, 0.0),
    j: float = 0.0,
) -> Setpoint | Rejected:
    return interpret(p, v, f, vel, acc, j, DEFAULTS, FORCE)


def test_scalar_position_takes_every_default() -> None:
    sp = cmd(100.0)
    assert isinstance(sp, Setpoint)
    assert (sp.target_position, sp.target_velocity, sp.velocity_mode) == (100.0, 0.0, False)
    assert sp.limits == DEFAULTS
    assert sp.force_limit == FORCE


def test_pairs_and_jerk_default_independently() -> None:
    sp = cmd(500.0, acc=(-300.0, 3.14))
    assert isinstance(sp, Setpoint)
    assert sp.limits == ProfileLimits(-10.0, 10.0, -300.0, 3.14, 500.0)
    sp = cmd(5.0, vel=(-1.0, 2.0), j=7.0, f=3.0)
    assert isinstance(sp, Setpoint)
    assert sp.limits == ProfileLimits(-1.0, 2.0, -50.0, 50.0, 7.0)
    assert sp.force_limit == 3.0


def test_reverse_velocity_zero_is_a_valid_limit() -> None:
    sp = cmd(5.0, vel=(0.0, 2.0))
    assert isinstance(sp, Setpoint) and sp.limits.v_min == 0.0


def test_non_positive_force_selects_default() -> None:
    for f in (0.0, -5.0):
        sp = cmd(f=f)
        assert isinstance(sp, Setpoint) and sp.force_limit == FORCE


@pytest.mark.parametrize(
    "kwargs, code",
    [
        ({"p": math.nan}, Rejection.NOT_A_NUMBER),
        ({"v": math.nan}, Rejection.NOT_A_NUMBER),
        ({"f": math.nan}, Rejection.NOT_A_NUMBER),
        ({"vel": (math.nan, 1.0)}, Rejection.NOT_A_NUMBER),
        ({"acc": (-1.0, math.nan)}, Rejection.NOT_A_NUMBER),
        ({"j": math.nan}, Rejection.NOT_A_NUMBER),
        ({"v": math.inf}, Rejection.INFINITE),
        ({"f": math.inf}, Rejection.INFINITE),
        ({"vel": (-math.inf, 1.0)}, Rejection.INFINITE),
        ({"acc": (-1.0, math.inf)}, Rejection.INFINITE),
        ({"j": math.inf}, Rejection.INFINITE),
        ({"vel": (1.0, 2.0)}, Rejection.VELOCITY_LIMITS),
        ({"vel": (-1.0, 0.0)}, Rejection.VELOCITY_LIMITS),
        ({"acc": (0.0, 2.0)}, Rejection.ACCELERATION_LIMITS),
        ({"acc": (1.0, 2.0)}, Rejection.ACCELERATION_LIMITS),
        ({"acc": (-1.0, -2.0)}, Rejection.ACCELERATION_LIMITS),
        ({"j": -1.0}, Rejection.JERK_LIMIT),
    ],
)
def test_rejections(kwargs: dict[str, object], code: Rejection) -> None:
    res = cmd(**kwargs)  # type: ignore[arg-type]
    assert isinstance(res, Rejected), res
    assert res.code is code
    assert res.reason


def test_infinite_target_selects_velocity_mode() -> None:
    sp = cmd(math.inf)
    assert isinstance(sp, Setpoint) and sp.velocity_mode and sp.target_velocity == DEFAULTS.v_max
    sp = cmd(-math.inf)
    assert isinstance(sp, Setpoint) and sp.velocity_mode and sp.target_velocity == DEFAULTS.v_min
    sp = cmd(math.inf, v=-3.0)  # The sign comes from the velocity when it is given.
    assert isinstance(sp, Setpoint) and sp.velocity_mode and sp.target_velocity == -3.0


def test_summary_is_json_ready() -> None:
    sp = cmd(-math.inf)
    assert isinstance(sp, Setpoint)
    assert sp.summary()["target"] == ["-inf", -10.0]


def test_payload_sizes_that_are_setpoints() -> None:
    """Only ServoCommand's structural supertypes (its prefixes) or longer are setpoints; CAN FD zero padding is
    accepted after a prefix boundary, anything else (a String, an Empty, a heartbeat, one byte) is refused."""
    from servo_node.setpoint import SERVO_COMMAND_PREFIXES, payload_rejection

    for n in (*SERVO_COMMAND_PREFIXES, 33, 63):
        assert payload_rejection(bytes(n), zero_padded=False) is None, n
    for n in (0, 1, 2, 3, 5, 7, 16, 24, 31):
        assert payload_rejection(b"\x01" * n, zero_padded=False), n
    hello = b"\x05\x00hello"  # uavcan.primitive.String("hello")
    assert payload_rejection(hello, zero_padded=False) and payload_rejection(hello, zero_padded=True)
    padded = b"\x01" * 20 + b"\x00" * 3  # 20-byte prefix in a 24-byte CAN FD frame (tail byte aside)
    assert payload_rejection(padded, zero_padded=True) is None
    assert payload_rejection(padded, zero_padded=False)
    assert payload_rejection(b"\x01" * 20 + b"\x00\x01\x00", zero_padded=True)  # Not only zeros after the prefix.


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.integers(0, 2**32 - 1), min_size=8, max_size=8),
       size=st.sampled_from((*SERVO_COMMAND_PREFIXES, 33, 48, SERVO_COMMAND_EXTENT)),
       tail=st.binary(min_size=SERVO_COMMAND_EXTENT - 32, max_size=SERVO_COMMAND_EXTENT - 32))
def test_the_fixed_layout_decoder_reads_what_the_dsdl_deserializer_reads(words: list[int], size: int,
                                                                         tail: bytes) -> None:
    """Any bit patterns (NaNs, infinities, subnormals, −0), every prefix size and longer payloads (a newer minor
    version): :func:`servo_command_fields` gives the generated deserializer's values."""
    import pycyphal.dsdl
    import zubax.telega

    payload = (struct.pack("<8I", *words) + tail)[:size]
    ours = servo_command_fields(payload)
    msg = pycyphal.dsdl.deserialize(zubax.telega.ServoCommand_1_0, [memoryview(payload)])
    assert msg is not None
    kin = msg.target.kinematics
    theirs = (kin.position, kin.velocity, msg.target.force, *msg.profile_velocity_reverse_forward,
              *msg.profile_deceleration_acceleration, msg.profile_jerk)
    flat = (*ours[:3], *ours[3], *ours[4], ours[5])
    for a, b in zip(flat, map(float, theirs), strict=True):
        assert (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
