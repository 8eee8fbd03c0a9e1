"""The drive's units: what one count of its position (0x6064, 0x607A) and velocity (0x606C, 0x60FF) objects is in
the servo's units (rad or m, and per second), and where that came from.

In order, the first that says:

1. ``servo.drive.canopen.counts_per_unit`` when set (> 0): position counts per unit, velocity counts/s per unit/s.
2. SI units 0x60A8 (position) and 0x60A9 (velocity), read from the drive: CiA 402's code of a prefix (10^n, bits
   24-31), a unit (bits 16-23: metre 0x01, radian 0x10, degree 0x41, revolution 0xB4) and, for velocity, a time
   (bits 8-15: second 0x03, minute 0x47). Nanotec's 0xFF410000 is 0.1°, 0x00B44700 rpm. An angle is in rad, a
   length in m. Without a usable 0x60A9 a velocity count is a position count per second.
3. The factor group: the feed constant 0x6092 (feed per driving-shaft revolution) makes ``feed`` position counts one
   output revolution, 2π units, whatever the encoder (0x608F) and the gear (0x6091) are: the drive converts between
   them itself. Without 0x6092, a drive that counts encoder increments: 0x608F (increments per motor revolution)
   times the gear ratio 0x6091 per output revolution. Without 0x60A8 the factor group is taken as a rotary joint.
4. None of them: :data:`DEFAULT_COUNTS_PER_UNIT`, with a warning (the emulated drive's own default).

A derived scale coarser than :data:`MIN_COUNTS_PER_UNIT` is refused, naming the objects (a factor group of 1/1/1
makes one count a revolution: the servo cannot hold a position with that; the register is the remedy).
"""

from __future__ import annotations

import math
from typing import Any

from . import _dictionary as od
from ._bringup import BringUpError, Scale, Settings, optional, read

DEFAULT_COUNTS_PER_UNIT = 10000.0
"""Counts per unit for a drive that says nothing of its units and a register left unset (0)."""

MIN_COUNTS_PER_UNIT = 100.0
"""The coarsest position scale the servo takes from the drive: a count of at most 0.01 unit."""

UNITS = {0x01: ("m", 1.0), 0x10: ("rad", 1.0), 0x41: ("°", math.pi / 180.0), 0xB4: ("rev", 2.0 * math.pi)}
"""SI unit codes: (symbol, size in m or rad)."""
TIMES = {0x00: ("", 1.0), 0x03: ("/s", 1.0), 0x47: ("/min", 60.0)}


def si_unit(code: int) -> tuple[float, str] | None:
    """(units (rad or m, per second for a velocity) of one count, its name) of a 0x60A8/0x60A9 value; None: a code
    this does not know (0: none set)."""
    prefix = code >> 24
    prefix = prefix - 256 if prefix >= 128 else prefix
    unit, time = (code >> 16) & 0xFF, (code >> 8) & 0xFF
    if unit not in UNITS or time not in TIMES:
        return None
    (symbol, size), (per, seconds) = UNITS[unit], TIMES[time]
    scale = 10.0**prefix
    return scale * size / seconds, f"{scale:g} {symbol}{per}"


def _ratio(node: Any, index: int) -> tuple[float, str] | None:
    subs = []
    for sub in (1, 2):
        got, value = optional(f"0x{index:04X}:{sub}", read, node, index, sub)
        if not got or not isinstance(value, int) or value <= 0:
            return None
        subs.append(value)
    return subs[0] / subs[1], f"0x{index:04X} = {subs[0]}/{subs[1]}"


def derive(node: Any, s: Settings) -> tuple[Scale, str | None]:
    """The scale (see the module docstring) and a warning to say (None: nothing to say).

    :raises BringUpError: the drive's objects give a scale coarser than :data:`MIN_COUNTS_PER_UNIT`."""
    if s.counts_per_unit > 0.0:
        k = s.counts_per_unit
        return Scale(k, k, "servo.drive.canopen.counts_per_unit"), None
    got, code = optional("SI unit position 0x60A8", read, node, od.SI_POSITION)
    position = si_unit(int(code)) if got and code else None
    if position is not None:
        got, code = optional("SI unit velocity 0x60A9", read, node, od.SI_VELOCITY)
        velocity = si_unit(int(code)) if got and code else None
        kv = 1.0 / velocity[0] if velocity else 1.0 / position[0]
        source = f"0x60A8 ({position[1]})" + (f", 0x60A9 ({velocity[1]})" if velocity else "")
        return _checked(Scale(1.0 / position[0], kv, source), "0x60A8"), None
    feed = _ratio(node, od.FEED_CONSTANT)
    if feed is not None:
        k = feed[0] / (2.0 * math.pi)
        return _checked(Scale(k, k, f"the factor group ({feed[1]} per revolution)"), feed[1]), None
    encoder = _ratio(node, od.ENCODER_RESOLUTION)
    if encoder is not None:
        gear = _ratio(node, od.GEAR_RATIO)
        k = encoder[0] * (gear[0] if gear else 1.0) / (2.0 * math.pi)
        what = encoder[1] + (f", {gear[1]}" if gear else "")
        return _checked(Scale(k, k, f"the factor group ({what})"), what), None
    k = DEFAULT_COUNTS_PER_UNIT
    return Scale(k, k, f"default {k:g}"), (
        f"the drive has no unit objects (0x60A8, 0x6092, 0x608F): {k:g} counts per unit assumed; set "
        "servo.drive.canopen.counts_per_unit")


def _checked(scale: Scale, objects: str) -> Scale:
    if scale.position < MIN_COUNTS_PER_UNIT:
        raise BringUpError(f"{objects} gives {scale.position:.3g} counts per unit (< {MIN_COUNTS_PER_UNIT:g}): set "
                           "servo.drive.canopen.counts_per_unit")
    return scale
