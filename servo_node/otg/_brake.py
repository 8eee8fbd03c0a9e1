"""Brake pre-trajectory: bring a state that breaks the limits back into the recoverable set.

Recoverable means a inside [lo, hi] and the velocity reached by ramping a to zero at full jerk
(v + a|a|/2) inside [v_min, v_max].  Outside it, the jerk is held at its limit (then the
acceleration at its limit) exactly until the state becomes recoverable; this is the fastest way
back and the same prefix a brake-then-plan generator uses, so the total is never slower.
Normalised units: jerk limit 1.
"""

from __future__ import annotations

import math

from numba import njit

from ._families import advance
from ._profile import HEADER, PH_J, PH_T, PHASE_STRIDE


@njit(cache=True, nogil=True, inline="always")
def push_phase(prof, n: int, s: float, t: float) -> int:  # type: ignore[no-untyped-def]
    """Append a (jerk, normalised duration) phase to the profile scratch slots; skip empty phases."""
    if t > 0.0:
        k = HEADER + n * PHASE_STRIDE
        prof[k + PH_T] = t
        prof[k + PH_J] = s
        return n + 1
    return n


@njit(cache=True, nogil=True)
def brake(  # type: ignore[no-untyped-def]
    v: float, a: float, lo: float, hi: float, vmin: float, vmax: float, tolv: float, prof, n: int,
) -> tuple[int, float, float, float]:
    """Append brake phases for (v, a); return (phase count, displacement, v, a) after braking."""
    dp = 0.0
    if a > hi:
        t = a - hi
        n = push_phase(prof, n, -1.0, t)
        d, v, a = advance(v, a, -1.0, t)
        dp += d
        a = hi
    elif a < lo:
        t = lo - a
        n = push_phase(prof, n, 1.0, t)
        d, v, a = advance(v, a, 1.0, t)
        dp += d
        a = lo
    vs = v + 0.5 * a * abs(a)
    if vs > vmax + tolv:
        vz = v + 0.5 * a * a  # velocity where a ramp from a = 0 at full -jerk would pass through this state
        s = math.sqrt(max(vz - vmax, 0.0))
        if s <= -lo:
            t = max(a + s, 0.0)
            n = push_phase(prof, n, -1.0, t)
            d, v, a = advance(v, a, -1.0, t)
            dp += d
        else:
            t = max(a - lo, 0.0)
            n = push_phase(prof, n, -1.0, t)
            d, v, a = advance(v, a, -1.0, t)
            dp += d
            a = lo
            tp = max((vz - lo * lo - vmax) / (-lo), 0.0)
            n = push_phase(prof, n, 0.0, tp)
            d, v, a = advance(v, a, 0.0, tp)
            dp += d
    elif vs < vmin - tolv:
        vz = v - 0.5 * a * a
        s = math.sqrt(max(vmin - vz, 0.0))
        if s <= hi:
            t = max(s - a, 0.0)
            n = push_phase(prof, n, 1.0, t)
            d, v, a = advance(v, a, 1.0, t)
            dp += d
        else:
            t = max(hi - a, 0.0)
            n = push_phase(prof, n, 1.0, t)
            d, v, a = advance(v, a, 1.0, t)
            dp += d
            a = hi
            tp = max((vmin - vz - hi * hi) / hi, 0.0)
            n = push_phase(prof, n, 0.0, tp)
            d, v, a = advance(v, a, 0.0, tp)
            dp += d
    return n, dp, v, a
