"""Closed forms for the profile families, in normalised units (jerk limit 1, box [lo, hi] on a).

The time-optimal motion to (D, vt, 0) is the first member of an *extremal chain* whose travelled
distance equals D.  For a fixed duration, the reachable distances form an interval (linear
dynamics, convex constraints); its upper end is reached by the "peak" chain (rise to a peak
velocity vp, optionally cruise at v_max, fall to vt) and its lower end by the mirrored "valley"
chain.  When a0 points the "wrong" way, a "gap" chain (one ramp to a1, then the direct change)
joins the direct velocity change to the first peak member.  Every chain member is built from the
same block: the fastest jerk-limited velocity change that ends with zero acceleration.
"""

from __future__ import annotations

import math

from numba import njit

KIND_PEAK = 0
KIND_GAP = 1


@njit(cache=True, nogil=True, inline="always")
def advance(v: float, a: float, s: float, t: float) -> tuple[float, float, float]:
    """Exact displacement, velocity and acceleration after holding jerk ``s`` for ``t`` (third-order integrator)."""
    dp = t * (v + t * (0.5 * a + t * (s / 6.0)))
    return dp, v + t * (a + 0.5 * s * t), a + s * t


@njit(cache=True, nogil=True)
def vchange(dv: float, a: float, lo: float, hi: float, vtol: float) -> tuple[float, float, float, float]:
    """Fastest velocity change by dv ending at a = 0: jerk s for t1, plateau t2, jerk -s for t3 (bang-bang).

    Only the velocity *difference* enters, so a tiny change of a large velocity keeps full precision.
    """
    dvs = 0.5 * a * abs(a)  # change reached by ramping a straight to zero
    if abs(dv - dvs) <= vtol:
        # dv is where a single ramp of a to zero lands: snap, or a rounding error would open a sqrt-sized
        # second ramp (the boundary state on which other generators fail)
        return (1.0 if a < 0.0 else -1.0), abs(a), 0.0, 0.0
    if dv >= dvs:
        sq = dv + 0.5 * a * a
        ap = math.sqrt(sq) if sq > 0.0 else 0.0
        if ap <= hi:
            return 1.0, max(ap - a, 0.0), 0.0, ap
        return 1.0, max(hi - a, 0.0), max((sq - hi * hi) / hi, 0.0), hi
    sq = 0.5 * a * a - dv
    ap = math.sqrt(sq) if sq > 0.0 else 0.0
    if ap <= -lo:
        return -1.0, max(ap + a, 0.0), 0.0, ap
    return -1.0, max(a - lo, 0.0), max((sq - lo * lo) / (-lo), 0.0), -lo


@njit(cache=True, nogil=True)
def vchange_dist(v: float, a: float, dv: float, lo: float, hi: float, vtol: float) -> tuple[float, float]:
    """Distance and duration of the fastest velocity change from (v, a) by dv, ending at a = 0."""
    s, t1, t2, t3 = vchange(dv, a, lo, hi, vtol)
    d1, v1, a1 = advance(v, a, s, t1)
    d2, v2, a2 = advance(v1, a1, 0.0, t2)
    d3, _v3, _a3 = advance(v2, a2, -s, t3)
    return d1 + d2 + d3, t1 + t2 + t3


@njit(cache=True, nogil=True)
def peak_bases(v: float, a: float, vt: float, vtol: float, vb: float) -> tuple[float, float]:
    """Velocity differences start -> base and base -> target, snapped where only rounding separates them.

    Snapping the bases (not the searched offset) removes noise-sized sqrt ramps yet keeps tiny real peaks.
    """
    b1 = vb - v
    dvs = 0.5 * a * abs(a)
    if abs(b1 - dvs) <= vtol:
        b1 = dvs
    b2 = vt - vb
    if abs(b2) <= vtol:
        b2 = 0.0
    return b1, b2


@njit(cache=True, nogil=True)
def chain_eval(
    kind: int, x: float, v: float, a: float, vt: float, lo: float, hi: float, vtol: float, vb: float,
) -> tuple[float, float]:
    """Distance and duration of a chain member: peak/valley velocity vb + x (KIND_PEAK) or gap ramp end a1 = x.

    The peak is an offset x from a base velocity vb so that tiny excursions are resolved to full precision.
    """
    if kind == KIND_PEAK:
        b1, b2 = peak_bases(v, a, vt, vtol, vb)
        d1, t1 = vchange_dist(v, a, b1 + x, lo, hi, 0.0)
        d2, t2 = vchange_dist(vb + x, 0.0, b2 - x, lo, hi, 0.0)
        return d1 + d2, t1 + t2
    s = 1.0 if x >= a else -1.0
    tr = abs(x - a)
    dr, vr, _ar = advance(v, a, s, tr)
    d2, t2 = vchange_dist(vr, x, (vt - v) - tr * (a + 0.5 * s * tr), lo, hi, vtol)
    return dr + d2, tr + t2


@njit(cache=True, nogil=True)
def chain_root(
    kind: int, x0: float, x1: float, f0: float, f1: float, target: float,
    v: float, a: float, vt: float, lo: float, hi: float, vtol: float, vb: float,
) -> float:
    """Brent's method (bisection, secant and inverse quadratic steps) for chain_eval(x) = target on [x0, x1]."""
    if f0 == 0.0:
        return x0
    if f1 == 0.0:
        return x1
    xa, xb, fa, fb = x0, x1, f0, f1
    if abs(fa) < abs(fb):
        xa, xb, fa, fb = xb, xa, fb, fa
    xc, fc = xa, fa
    xd = xc
    bisected = True
    for _ in range(200):
        if fa != fc and fb != fc:
            s = (xa * fb * fc / ((fa - fb) * (fa - fc)) + xb * fa * fc / ((fb - fa) * (fb - fc))
                 + xc * fa * fb / ((fc - fa) * (fc - fb)))
        else:
            s = xb - fb * (xb - xa) / (fb - fa)
        m = 0.25 * (3.0 * xa + xb)
        tol = 2.0e-16 * abs(xb) + 1e-300
        lo_ok = (s - m) * (s - xb) < 0.0
        if (not lo_ok or (bisected and abs(s - xb) >= 0.5 * abs(xb - xc))
                or (not bisected and abs(s - xb) >= 0.5 * abs(xc - xd))
                or (bisected and abs(xb - xc) < tol) or (not bisected and abs(xc - xd) < tol)):
            s = 0.5 * (xa + xb)
            bisected = True
        else:
            bisected = False
        fs = chain_eval(kind, s, v, a, vt, lo, hi, vtol, vb)[0] - target
        xd = xc
        xc, fc = xb, fb
        if fa * fs < 0.0:
            xb, fb = s, fs
        else:
            xa, fa = s, fs
        if abs(fa) < abs(fb):
            xa, xb, fa, fb = xb, xa, fb, fa
        if fb == 0.0 or abs(xb - xa) <= 4.0e-16 * abs(xb) + 1e-300:
            break
    return xb
