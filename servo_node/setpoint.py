"""Setpoint in: turn a received ``zubax.telega.ServoCommand.1.0`` into a validated :class:`Setpoint` or a rejection.

Semantics follow the Telega servo command: a zero profile pair (or a zero jerk) selects the register default,
a non-positive force selects the default torque limit, a ±inf target position selects velocity mode.
Anything else that is not finite, or limits of the wrong sign, reject the whole message: it never changes motion.
A ``uavcan.primitive.scalar.Real32`` published on the same subject reads as a target position with everything
else zero, by the implicit zero extension rule.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum


@dataclass(frozen=True)
class ProfileLimits:
    """Motion limits of one setpoint, in SI units (m or rad based)."""

    v_min: float
    v_max: float
    a_min: float
    a_max: float
    j_max: float

    def as_tuple(self) -> tuple[float, float, float, float, float]:
        """(v_min, v_max, a_min, a_max, j_max), the order the OTG takes."""
        return (self.v_min, self.v_max, self.a_min, self.a_max, self.j_max)


@dataclass(frozen=True)
class Setpoint:
    """An accepted setpoint: where to go, how fast at most, and with what force limit."""

    target_position: float
    """Finite in position mode; ±inf in velocity mode."""
    target_velocity: float
    limits: ProfileLimits
    force_limit: float
    velocity_mode: bool = False

    def summary(self) -> dict[str, object]:
        """Compact JSON-ready description for ``sys.status`` (which must fit in 256 bytes)."""
        lim = self.limits
        return {
            "mode": "velocity" if self.velocity_mode else "position",
            "target": [_json_float(self.target_position), _json_float(self.target_velocity)],
            "v_lim": [_json_float(lim.v_min), _json_float(lim.v_max)],
            "a_lim": [_json_float(lim.a_min), _json_float(lim.a_max)],
            "j_lim": _json_float(lim.j_max),
            "f_lim": _json_float(self.force_limit),
        }


class Rejection(IntEnum):
    """Why a setpoint was rejected."""

    NOT_A_NUMBER = 1
    INFINITE = 2
    VELOCITY_LIMITS = 3
    ACCELERATION_LIMITS = 4
    JERK_LIMIT = 5
    BELOW_MINIMUM = 6
    """A limit so small the motion (or its stop) would take practically forever: refused, not followed."""


@dataclass(frozen=True)
class Floors:
    """The smallest velocity, acceleration and jerk limits and force limit a setpoint may ask for (magnitudes; a
    reverse velocity limit of exactly 0, no motion backwards, is allowed)."""

    velocity: float = 0.0
    acceleration: float = 0.0
    jerk: float = 0.0
    force: float = 0.0

    @staticmethod
    def of_envelope(velocity: float, acceleration: float, jerk: float, force: float) -> Floors:
        """The floors of a node whose envelope is (|v|, |a|, |j|, force): :data:`FLOOR_FRACTION` of each."""
        k = FLOOR_FRACTION
        return Floors(k * velocity, k * acceleration, k * jerk, k * force)


FLOOR_FRACTION = 1e-4
"""A setpoint's velocity, acceleration, jerk and force limits must be at least this fraction of the envelope's:
below it a motion would take practically forever (a jerk of 1e-45 plans a stop of 1e46 s, a velocity limit of
1e-30 a move of 1e30 s) — such setpoints are refused."""


def _floored(limits: ProfileLimits, floors: Floors, force_limit: float) -> tuple[tuple[str, float, float], ...]:
    """Every limit with its floor (a reverse velocity limit of 0 has none)."""
    return (
        ("profile velocity forward", limits.v_max, floors.velocity),
        ("profile velocity reverse", -limits.v_min if limits.v_min != 0.0 else math.inf, floors.velocity),
        ("profile deceleration", -limits.a_min, floors.acceleration),
        ("profile acceleration", limits.a_max, floors.acceleration),
        ("profile jerk", limits.j_max, floors.jerk),
        ("force limit", force_limit, floors.force),
    )


def below_floor(limits: ProfileLimits, floors: Floors, force_limit: float = math.inf) -> str | None:
    """Why ``limits`` (and ``force_limit``) are below ``floors``, as a node refuses them, or None: the node's rule,
    and a coordinator's check that the limits it plans will be accepted."""
    for name, x, lo in _floored(limits, floors, force_limit):
        if x < lo:
            return f"{name} {x:.3g} is below the minimum {lo:.3g}"
    return None


def floor_margin(limits: ProfileLimits, floors: Floors) -> float:
    """The smallest ratio of a limit to its floor (below 1: refused; inf: no floor)."""
    return min((x / lo for _, x, lo in _floored(limits, floors, math.inf) if lo > 0.0), default=math.inf)


@dataclass(frozen=True)
class Rejected:
    """A rejected setpoint: the code and a text a user can act on."""

    code: Rejection
    reason: str


SERVO_COMMAND_PREFIXES = (4, 8, 12, 20, 28, 32)
"""Serialized sizes [byte] of ``zubax.telega.ServoCommand.1.0``'s structural supertypes: the target position
(``Real32``), + velocity, + force, + the velocity limit pair, + the acceleration pair, + the jerk (the whole
message). A payload of another size is not a setpoint: a ``String``, an ``Empty``, a heartbeat."""

SERVO_COMMAND_EXTENT = 63
"""The type's extent [byte]: longer payloads (future extensions) are truncated to it by the transport."""

ServoCommandFields = tuple[float, float, float, tuple[float, float], tuple[float, float], float]
"""A ServoCommand's fields: target position, velocity and force; the velocity pair {reverse, forward}, the
acceleration pair {deceleration, acceleration}, the jerk."""

_SERVO_COMMAND = struct.Struct("<8f")
"""``zubax.telega.ServoCommand.1.0`` as serialized: eight little-endian float32 (its nested types are sealed), in the
order of :data:`ServoCommandFields`; 32 bytes, the last of :data:`SERVO_COMMAND_PREFIXES`."""


def servo_command_fields(payload: bytes) -> ServoCommandFields:
    """The fields of a ServoCommand payload, bit for bit what the DSDL deserializer gives (tested against it), at a
    twentieth of its cost: a prefix is zero-extended (Cyphal's implicit zero extension), a longer payload (a newer
    minor version) read for its first 32 bytes. Judge the size first (:func:`payload_rejection`)."""
    size = _SERVO_COMMAND.size
    data = payload[:size] if len(payload) >= size else payload + bytes(size - len(payload))
    p, v, f, v_reverse, v_forward, deceleration, acceleration, jerk = _SERVO_COMMAND.unpack(data)
    return p, v, f, (v_reverse, v_forward), (deceleration, acceleration), jerk


def payload_rejection(payload: bytes | memoryview, zero_padded: bool) -> str | None:
    """Why a raw payload on the setpoint subject is not a setpoint, or None if it is one.

    Accepted: exactly one of :data:`SERVO_COMMAND_PREFIXES`, or at least the whole message (a newer minor
    version). ``zero_padded`` (CAN FD, which pads a frame to the next DLC size with zeros): a prefix size followed
    only by zero bytes is accepted too.
    """
    n = len(payload)
    if n in SERVO_COMMAND_PREFIXES or n >= SERVO_COMMAND_PREFIXES[-1]:
        return None
    if zero_padded:
        data = bytes(payload)
        for size in reversed(SERVO_COMMAND_PREFIXES):
            if size < n and not any(data[size:]):
                return None
    return f"payload of {n} bytes is no ServoCommand prefix ({', '.join(map(str, SERVO_COMMAND_PREFIXES))} or more)"


def _json_float(x: float) -> float | str:
    return float(f"{x:.7g}") if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def interpret(
    position: float,
    velocity: float,
    force: float,
    velocity_reverse_forward: Sequence[float],
    deceleration_acceleration: Sequence[float],
    jerk: float,
    defaults: ProfileLimits,
    default_force_limit: float,
    floors: Floors = Floors(),
    zero_velocity_holds: bool = False,
) -> Setpoint | Rejected:
    """Validate the fields of a servo command and fill the defaults; see the module docstring for the rules.

    Limits above the envelope are the loop's to clip; limits below ``floors`` are rejected here. In velocity mode
    (±inf position) a zero target velocity means the profile's speed in that direction (Telega), unless
    ``zero_velocity_holds`` (UDRAL: velocity 0 is a velocity to reach).
    """
    vr, vf = (float(x) for x in velocity_reverse_forward)
    dec, acc = (float(x) for x in deceleration_acceleration)
    values = {
        "target position": float(position),
        "target velocity": float(velocity),
        "force": float(force),
        "profile velocity reverse": vr,
        "profile velocity forward": vf,
        "profile deceleration": dec,
        "profile acceleration": acc,
        "profile jerk": float(jerk),
    }
    for name, x in values.items():
        if math.isnan(x):
            return Rejected(Rejection.NOT_A_NUMBER, f"{name} is NaN")
        if math.isinf(x) and name != "target position":
            return Rejected(Rejection.INFINITE, f"{name} is infinite; only the target position may be ±inf")

    v_min, v_max = defaults.v_min, defaults.v_max
    if vr != 0.0 or vf != 0.0:
        if not (vr <= 0.0 < vf):
            return Rejected(Rejection.VELOCITY_LIMITS, f"velocity limits {{{vr}, {vf}}} must be {{<= 0, > 0}}")
        v_min, v_max = vr, vf
    a_min, a_max = defaults.a_min, defaults.a_max
    if dec != 0.0 or acc != 0.0:
        if not (dec < 0.0 < acc):
            return Rejected(Rejection.ACCELERATION_LIMITS, f"acceleration limits {{{dec}, {acc}}} must be {{< 0, > 0}}")
        a_min, a_max = dec, acc
    j_max = defaults.j_max
    if jerk != 0.0:
        if not jerk > 0.0:
            return Rejected(Rejection.JERK_LIMIT, f"jerk limit {jerk} must be > 0 (or 0 for the default)")
        j_max = float(jerk)
    limits = ProfileLimits(v_min, v_max, a_min, a_max, j_max)
    force_limit = float(force) if force > 0.0 else default_force_limit
    low = below_floor(limits, floors, force_limit)
    if low is not None:
        return Rejected(Rejection.BELOW_MINIMUM, low)

    position = float(position)
    velocity = float(velocity)
    if math.isinf(position):
        # Velocity mode: the sign comes from the target velocity, or from the infinity with the profile's limit.
        if velocity == 0.0 and not zero_velocity_holds:
            velocity = v_max if position > 0 else v_min
        return Setpoint(position, velocity, limits, force_limit, velocity_mode=True)
    return Setpoint(position, velocity, limits, force_limit)
