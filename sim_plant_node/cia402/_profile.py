"""What a drive's object dictionary declares, as the emulator follows it: its PDOs and their limits, its modes of
operation, its identity, its units and which communication objects it has.

Pure functions of a canopen ``ObjectDictionary`` (an EDS or DCF as ``canopen.import_od`` reads it): no bus, no
joint. A value is the file's ``ParameterValue`` (a DCF's), else its ``DefaultValue``; an object the file declares
without either has the value a drive of this kind would report (:func:`fill_ins`), never an SDO abort.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from canopen import objectdictionary as odm

MODE_HOMING, MODE_IP, MODE_CSP, MODE_CSV, MODE_CST = 6, 7, 8, 9, 10
IMPLEMENTED_MODES = (MODE_HOMING, MODE_IP, MODE_CSP, MODE_CSV, MODE_CST)
"""The modes of operation the emulator performs on its joint; any other (PP, VL, PV, TQ) is refused even where the
file's 0x6502 declares it."""

MODE_OBJECTS: dict[int, tuple[tuple[int, int, str], ...]] = {
    MODE_CSP: ((0x607A, 0, "rx"), (0x6064, 0, ""), (0x60B1, 0, ""), (0x60B2, 0, "")),
    MODE_CSV: ((0x60FF, 0, "rx"), (0x606C, 0, ""), (0x60B1, 0, "")),
    MODE_CST: ((0x6071, 0, "rx"), (0x6077, 0, ""), (0x60B2, 0, "")),
    MODE_IP: ((0x60C1, 1, "rx"), (0x60C2, 0, ""), (0x6064, 0, "")),
    MODE_HOMING: ((0x6098, 0, ""),),
}
"""For a file whose 0x6502 has no value: the objects a mode needs before the emulator offers it (``rx``: mappable
into an RPDO). The cyclic synchronous modes need their offsets 0x60B1/0x60B2 (which only drives with those modes
have); IP needs its data record 0x60C1:01 and time period 0x60C2; homing its method 0x6098."""

DEVICE_TYPE_SERVO = 0x00020192
"""0x1000 of a CiA 402 servo drive (profile 402, type servo), for a file that gives none."""

UNIT_NUMERATORS = {0x01: ("length", 1.0), 0x10: ("angle", 1.0), 0x41: ("angle", math.pi / 180.0),
                   0xB4: ("angle", 2.0 * math.pi)}
"""CiA 402 SI unit codes (0x60A8/0x60A9 bits 16-23) the emulator and the servo understand: metre, radian, degree,
revolution, with their size in m or rad."""
UNIT_DENOMINATORS = {0x00: 1.0, 0x03: 1.0, 0x47: 60.0}
"""…and the time units of 0x60A9 (bits 8-15): none, second, minute [second]."""


def value_of(od: Any, index: int, sub: int = 0) -> Any:
    """The file's value of an object (ParameterValue, else DefaultValue); None: absent or without a value."""
    var = variable(od, index, sub)
    if var is None:
        return None
    return var.value if var.value is not None else var.default


def variable(od: Any, index: int, sub: int = 0) -> Any:
    """The ``ODVariable`` at ``index``:``sub`` (None: absent)."""
    if index not in od:
        return None
    obj = od[index]
    if isinstance(obj, odm.ODVariable):
        return obj if sub == 0 else None
    return obj[sub] if sub in obj else None


def pdo_numbers(od: Any, communication_base: int) -> tuple[int, ...]:
    """The PDO numbers (1…512) whose communication parameter (0x1400… or 0x1800…) the file declares."""
    return tuple(n for n in range(1, 513) if communication_base + n - 1 in od)


def mapping_capacity(od: Any, index: int) -> int:
    """How many entries a PDO mapping object can hold: the entry sub-indices the file declares (0: none)."""
    if index not in od or isinstance(od[index], odm.ODVariable):
        return 0
    return sum(1 for sub in od[index].subindices if sub > 0)


def offers(od: Any, mode: int) -> bool:
    """Whether the file has what mode ``mode`` needs (:data:`MODE_OBJECTS`)."""
    for index, sub, use in MODE_OBJECTS[mode]:
        if index not in od:
            return False
        if use and (var := variable(od, index, sub)) is not None and not var.pdo_mappable:
            return False
    return True


def supported_modes(od: Any) -> tuple[int, bool]:
    """(0x6502 as the emulator serves it, whether the file gave it): the file's value, else the modes the emulator
    performs for which the file has the objects (:func:`offers`)."""
    declared = value_of(od, 0x6502)
    if declared is not None:
        return int(declared), True
    bits = 0
    for mode in IMPLEMENTED_MODES:
        if offers(od, mode):
            bits |= 1 << (mode - 1)
    return bits, False


def accepted_modes(supported: int) -> tuple[int, ...]:
    """The 0x6060 values a write may set: no mode (0) and the modes both offered and performed."""
    return (0, *(m for m in IMPLEMENTED_MODES if supported & (1 << (m - 1))))


@dataclass(frozen=True)
class Units:
    """What one count of the drive's position and velocity objects means for the joint."""

    position: float
    """0x6064/0x607A counts per joint unit (rad or m)."""
    velocity: float
    """0x606C/0x60FF counts per joint unit/s."""
    source: str


def si_unit(code: int, kind: str) -> float | None:
    """The joint units (rad, or m for a ``linear`` joint) one count of an SI unit code is, per second for a
    velocity; None: a code this does not know, or a quantity of the other kind of joint."""
    prefix = code >> 24
    prefix = prefix - 256 if prefix >= 128 else prefix
    numerator, denominator = (code >> 16) & 0xFF, (code >> 8) & 0xFF
    if numerator not in UNIT_NUMERATORS or denominator not in UNIT_DENOMINATORS:
        return None
    quantity, size = UNIT_NUMERATORS[numerator]
    if quantity != ("length" if kind == "linear" else "angle"):
        return None
    return 10.0**prefix * size / UNIT_DENOMINATORS[denominator]


def units(od: Any, kind: str, counts_per_unit: float, fills: dict[tuple[int, int], Any] | None = None) -> Units:
    """The drive's units: 0x60A8/0x60A9 where they name a unit; else the feed constant 0x6092 (feed per output
    revolution: 2π joint units, whatever the encoder 0x608F and the gear 0x6091 do inside the drive); else the
    encoder resolution 0x608F times the gear ratio 0x6091 (no factor: counts are increments); else
    ``counts_per_unit`` (``sim.canopen.counts_per_unit``). ``fills``: the values of what the file gives none
    (:func:`fill_ins`)."""
    fills = fills or {}

    def value(index: int, sub: int = 0) -> Any:
        x = value_of(od, index, sub)
        return fills.get((index, sub)) if x is None else x

    def ratio(index: int) -> float | None:  # Sub 1 / sub 2 of a factor-group object (None: absent or a zero).
        a, b = value(index, 1), value(index, 2)
        return float(a) / float(b) if a and b else None

    pos_code, vel_code = value(0x60A8), value(0x60A9)
    pos = si_unit(int(pos_code), kind) if pos_code else None
    if pos:
        vel = si_unit(int(vel_code), kind) if vel_code else None
        return Units(1.0 / pos, 1.0 / vel if vel else 1.0 / pos, "0x60A8/0x60A9")
    feed = ratio(0x6092)
    if feed:
        k = feed / (2.0 * math.pi)
        return Units(k, k, "0x6092")
    encoder = ratio(0x608F)
    if encoder:
        k = encoder * (ratio(0x6091) or 1.0) / (2.0 * math.pi)
        return Units(k, k, "0x608F/0x6091")
    return Units(counts_per_unit, counts_per_unit, "sim.canopen.counts_per_unit")


def fill_ins(od: Any, counts_per_unit: float) -> dict[tuple[int, int], Any]:
    """Values for what the file declares without one: device type :data:`DEVICE_TYPE_SERVO`, identity from its
    [DeviceInfo], the device name from its product name, 0x6502 (:func:`supported_modes`), the encoder resolution
    from ``counts_per_unit`` (increments per revolution), every other number 0 and every string empty."""
    info = od.device_information
    named = {
        (0x1000, 0): DEVICE_TYPE_SERVO,
        (0x1008, 0): info.product_name or "",
        (0x1018, 1): info.vendor_number or 0,
        (0x1018, 2): info.product_number or 0,
        (0x1018, 3): info.revision_number or 0,
        (0x6502, 0): supported_modes(od)[0],
        (0x608F, 1): max(1, round(counts_per_unit * 2.0 * math.pi)),
        (0x608F, 2): 1,
    }
    out: dict[tuple[int, int], Any] = {}
    for index in od:
        obj = od[index]
        members = [obj] if isinstance(obj, odm.ODVariable) else [obj[s] for s in obj.subindices]
        for var in members:
            if var.value is not None or var.default is not None:
                continue
            key = (var.index, var.subindex)
            if key in named:
                out[key] = named[key]
            elif var.data_type in odm.NUMBER_TYPES or var.data_type == odm.BOOLEAN:
                out[key] = 0
            elif var.data_type in (odm.VISIBLE_STRING, odm.UNICODE_STRING):
                out[key] = ""
    return out
