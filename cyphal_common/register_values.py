"""What a register's type can take: the checks pycyphal's value conversion does not make before it converts.

pycyphal converts a numeric value into an integer register with ``round`` and numpy's integer arrays: NaN, ±inf, a
negative number into a natural, or a number beyond the type's range (1e30, 2⁶³ into ``natural16``) raised
``ValueError``/``OverflowError`` from inside the conversion, and the register server answered nothing. A fraction
was rounded silently (2.5 → 2). Into a bit, any non-zero number became true (NaN, inf, −1, 0.5). Here each of those
is a reason, so a write of it is refused like any other (counted, reported, the old value kept).
"""

from __future__ import annotations

import math

import numpy as np
from pycyphal.application.register import RelaxedValue, Value, ValueConversionError, ValueProxy

INTEGER_RANGES: dict[str, tuple[int, int]] = {
    **{f"natural{n}": (0, 2**n - 1) for n in (8, 16, 32, 64)},
    **{f"integer{n}": (-(2 ** (n - 1)), 2 ** (n - 1) - 1) for n in (8, 16, 32, 64)},
}
"""The whole numbers each integer type of ``uavcan.register.Value`` holds."""

REAL_MAX = {"real16": float(np.finfo(np.float16).max), "real32": float(np.finfo(np.float32).max)}
"""The largest finite magnitude of the narrower real types (a larger finite value would become infinite)."""

_NUMERIC = ("bit", *INTEGER_RANGES, "real16", "real32", "real64")


def option(value: Value) -> str:
    """The selected option of a ``uavcan.register.Value`` (``empty``, ``string``, ``natural16``, …)."""
    for name in ("empty", "string", "unstructured", *_NUMERIC):
        if getattr(value, name, None) is not None:
            return name
    return "unknown"


def _elements(value: Value, name: str) -> list[bool | int | float]:
    return list(getattr(value, name).value.tolist())


def _shown(x: bool | int | float) -> str:
    return str(x).lower() if isinstance(x, bool) else f"{x:.7g}" if isinstance(x, float) else str(x)


def unconvertible(current: ValueProxy, source: RelaxedValue) -> str | None:
    """Why ``source`` cannot be written exactly into a register holding ``current``, or None.

    Only numeric into numeric is judged here (a string into a number is pycyphal's conversion's to refuse, another
    element count the registry's): an integer register takes whole numbers within its type's range, a bit only 0
    or 1 (false or true), a ``real16``/``real32`` no finite number beyond its range.
    """
    to = option(current.value)
    try:
        src = source.value if isinstance(source, ValueProxy) else ValueProxy(source).value
    except (ValueConversionError, TypeError, ValueError, OverflowError):
        return None  # Not a value at all: the conversion itself refuses it.
    frm = option(src)
    if to not in _NUMERIC or frm not in _NUMERIC:
        return None
    xs = _elements(src, frm)
    if to == "bit":
        bad = [x for x in xs if not (x == 0 or x == 1)]  # NaN is neither.
        return f"a bit takes 0 or 1 (false or true), got {_shown(bad[0])}" if bad else None
    if to in INTEGER_RANGES:
        lo, hi = INTEGER_RANGES[to]
        for x in xs:
            if isinstance(x, float):
                if math.isnan(x):
                    return f"{frm} nan is not a number; {to} takes whole numbers {lo}..{hi}"
                if math.isinf(x):
                    return f"{frm} {_shown(x)} is infinite; {to} takes whole numbers {lo}..{hi}"
                if x != math.floor(x):
                    return f"{_shown(x)} is not a whole number; {to} takes whole numbers {lo}..{hi}"
            if not lo <= x <= hi:
                return f"{_shown(x)} is out of range {lo}..{hi} of {to}"
        return None
    top = REAL_MAX.get(to)
    if top is not None:
        big = [x for x in xs if not isinstance(x, bool) and math.isfinite(x) and abs(x) > top]
        if big:
            return f"{_shown(big[0])} is out of range of {to} (|x| ≤ {top:.7g})"
    return None
