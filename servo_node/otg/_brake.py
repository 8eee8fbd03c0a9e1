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

from .._jit import tick_jit
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


@tick_jit
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


@tick_jit
def brake_rule_acc(  # type: ignore[no-untyped-def]
    v: float, a: float, up: float, dn: float, prof, n: int,
) -> tuple[int, float, float]:
    """Append phases bringing a inside the direction-relative bounds at full jerk; return (phase count, v, a).

    Bounds (normalised, positive up/dn): [-dn, up] while moving forward (v > 0, or v = 0 with a >= 0),
    [-up, dn] while moving backward.  The ramp towards the box stops where v crosses 0 (the bounds switch
    there) and, if a is still outside the other side's box, goes on against that one.  A state inside its box
    that must still cross v = 0 with a beyond the other side's bound (slowing at |a| > up too close to v = 0 to
    ease to up in time) keeps the jerk at its limit until |a| = up: the least violation there is.
    Acceleration only (no velocity limits): the start of a velocity change.
    """
    for _ in range(2):
        sg = 1.0 if (v > 0.0 or (v == 0.0 and a >= 0.0)) else -1.0
        vm = sg * v  # mirrored so that the motion is forward
        am = sg * a
        if am > up:
            s = -1.0
            t = am - up
            edge = up
        elif am < -dn:
            s = 1.0
            t = -dn - am
            edge = -dn
        else:
            break
        crossed = False
        if s > 0.0 and am < 0.0 and vm > 0.0:
            # raising a negative acceleration: v falls and may reach 0 before a reaches the box
            disc = am * am - 2.0 * vm
            if disc >= 0.0:
                tc = 2.0 * vm / (-am + math.sqrt(disc))
                if tc < t:
                    t = tc
                    crossed = True
        n = push_phase(prof, n, s * sg, t)
        _d, v, a = advance(v, a, s * sg, t)
        if not crossed:
            a = sg * edge
            break
        v = 0.0
    sg = 1.0 if (v > 0.0 or (v == 0.0 and a >= 0.0)) else -1.0
    vm = sg * v
    am = sg * a
    if am < -up and am * am - 2.0 * vm > up * up:
        t = -up - am
        n = push_phase(prof, n, sg, t)
        _d, v, a = advance(v, a, sg, t)
        a = -sg * up
    return n, v, a
