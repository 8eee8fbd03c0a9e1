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

from .._jit import tick_jit

KIND_PEAK = 0
KIND_GAP = 1


@njit(cache=True, nogil=True, inline="always")
def advance(v: float, a: float, s: float, t: float) -> tuple[float, float, float]:
    """Exact displacement, velocity and acceleration after holding jerk ``s`` for ``t`` (third-order integrator)."""
    dp = t * (v + t * (0.5 * a + t * (s / 6.0)))
    return dp, v + t * (a + 0.5 * s * t), a + s * t


@tick_jit
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


@tick_jit
def _rule_desc(v: float, a: float, dv: float, up: float, dn: float) -> tuple[float, float, float, float, float, bool]:
    """Fastest velocity change by dv < a|a|/2 (a pushed down, then back to 0) under the direction-relative rule.

    Bounds (normalised, positive): |a| <= up while speeding up (a·v > 0), |a| <= dn while slowing down.
    Phases: jerk -1 for t1, plateau t2 (at -dn), jerk j3 for t3, plateau t4 (at -up), jerk +1 for t5;
    j3 = -1 when ``more`` (the bound widens at the v = 0 crossing: keep ramping down after it) and +1 when
    it tightens (the deceleration is eased to -up exactly as v reaches 0).  Without a crossing this is the
    fixed-box change (t3 = t4 = 0).
    """
    am = min(a, 0.0)
    vq = v + 0.5 * a * a if a > 0.0 else v  # velocity once a is back at 0 (start of the descent)
    ve = v + dv
    bound = dn
    if vq > 0.0 and ve < 0.0:
        # the descent crosses v = 0: from there on the bound is up (speeding up in reverse)
        cross2 = am * am + 2.0 * vq  # a² where a straight ramp from am reaches v = 0
        if up >= dn:
            if cross2 <= dn * dn:
                bound = up  # the ramp reaches v = 0 before -dn: the whole descent is the wider box
            elif ve < -0.5 * dn * dn:
                # plateau at -dn until v = 0, ramp on to -a2 (at most -up), plateau at -up, ramp back to 0
                p1 = max((vq - 0.5 * (dn * dn - am * am)) / dn, 0.0)
                a2sq = 0.5 * dn * dn - ve
                if a2sq <= up * up:
                    a2 = math.sqrt(a2sq)
                    return max(a + dn, 0.0), p1, max(a2 - dn, 0.0), 0.0, a2, True
                return max(a + dn, 0.0), p1, up - dn, max((0.5 * dn * dn - up * up - ve) / up, 0.0), up, True
        elif cross2 <= up * up:
            bound = up  # crossing at a >= -up, then the tighter box all the way
        elif ve < -0.5 * up * up:
            # reach v = 0 with a = -up exactly (ramp down to -a1 or -dn, ease back), plateau at -up, ramp back
            # a1sq < am² only from a start that cannot ease in time (or one on that edge by rounding): ease
            # at once; the crossing then breaks the rule by that start's excess, which the caller checks
            a1 = math.sqrt(max(0.5 * (am * am + up * up + 2.0 * vq), am * am))
            p2 = max((-0.5 * up * up - ve) / up, 0.0)
            if a1 <= dn:
                return max(a + a1, 0.0), 0.0, max(a1 - up, 0.0), p2, up, False
            p1 = max((vq + 0.5 * (am * am + up * up) - dn * dn) / dn, 0.0)
            return max(a + dn, 0.0), p1, dn - up, p2, up, False
    elif vq <= 0.0:
        bound = up
    sq = 0.5 * a * a - dv
    ap = math.sqrt(sq) if sq > 0.0 else 0.0
    if ap <= bound:
        return max(ap + a, 0.0), 0.0, 0.0, 0.0, ap, True
    return max(a + bound, 0.0), max((sq - bound * bound) / bound, 0.0), 0.0, 0.0, bound, True


@tick_jit
def rule_block(
    v: float, a: float, dv: float, up: float, dn: float, vtol: float,
) -> tuple[float, float, float, float, float, float, float]:
    """Fastest change from (v, a) by dv ending at a = 0 under the rule: (s, t1, t2, j3, t3, t4, t5).

    Jerks of the five phases are (s, 0, j3, 0, -s); the upward change is the mirror (v, a, dv negated).
    """
    dvs = 0.5 * a * abs(a)
    if abs(dv - dvs) <= vtol:
        return (1.0 if a < 0.0 else -1.0), abs(a), 0.0, 1.0, 0.0, 0.0, 0.0
    if dv < dvs:
        t1, t2, t3, t4, t5, more = _rule_desc(v, a, dv, up, dn)
        return -1.0, t1, t2, (-1.0 if more else 1.0), t3, t4, t5
    t1, t2, t3, t4, t5, more = _rule_desc(-v, -a, -dv, up, dn)
    return 1.0, t1, t2, (1.0 if more else -1.0), t3, t4, t5


@tick_jit
def vchange_dist(
    v: float, a: float, dv: float, lo: float, hi: float, vtol: float, rule: bool,
) -> tuple[float, float, float]:
    """Distance, duration and d(distance)/d(dv) of the fastest velocity change from (v, a) by dv, ending at a = 0.

    ``rule``: [lo, hi] = [-dn, up] are the direction-relative bounds (see ``rule_block``), else a fixed box.
    The derivative: dv moves either the point where the final ramp (jerk -s, length tf) leaves, or the
    plateau before it (at |a| = tf); both give tf + s·vf/tf with vf the velocity where the final ramp
    starts (NaN when there is no final ramp: the caller then bisects).
    """
    if rule:
        s, t1, t2, j3, t3, t4, t5 = rule_block(v, a, dv, hi, -lo, vtol)
        d1, v1, a1 = advance(v, a, s, t1)
        d2, v2, a2 = advance(v1, a1, 0.0, t2)
        d3, v3, a3 = advance(v2, a2, j3, t3)
        d4, v4, a4 = advance(v3, a3, 0.0, t4)
        d5, _v5, _a5 = advance(v4, a4, -s, t5)
        g = t5 + s * v4 / t5 if t5 > 0.0 else math.nan
        return d1 + d2 + d3 + d4 + d5, t1 + t2 + t3 + t4 + t5, g
    s, t1, t2, t3 = vchange(dv, a, lo, hi, vtol)
    d1, v1, a1 = advance(v, a, s, t1)
    d2, v2, a2 = advance(v1, a1, 0.0, t2)
    d3, _v3, _a3 = advance(v2, a2, -s, t3)
    g = t3 + s * v2 / t3 if t3 > 0.0 else math.nan
    return d1 + d2 + d3, t1 + t2 + t3, g


@tick_jit
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


@tick_jit
def chain_eval(
    kind: int, x: float, v: float, a: float, vt: float, lo: float, hi: float, vtol: float, vb: float, rule: bool,
) -> tuple[float, float, float]:
    """Distance, duration and d(distance)/dx of a chain member: peak/valley velocity vb + x (KIND_PEAK) or gap
    ramp end a1 = x (KIND_GAP, derivative not provided: 0).

    The peak is an offset x from a base velocity vb so that tiny excursions are resolved to full precision.
    """
    if kind == KIND_PEAK:
        b1, b2 = peak_bases(v, a, vt, vtol, vb)
        d1, t1, g1 = vchange_dist(v, a, b1 + x, lo, hi, 0.0, rule)
        d2, t2, g2 = vchange_dist(vb + x, 0.0, b2 - x, lo, hi, 0.0, rule)
        # raising the peak lengthens the first change and lifts the whole second one (by t2) but shortens it
        g = g1 + t2 - g2
        if not math.isfinite(g):
            g = 0.0
        return d1 + d2, t1 + t2, g
    s = 1.0 if x >= a else -1.0
    tr = abs(x - a)
    dr, vr, _ar = advance(v, a, s, tr)
    d2, t2, _g = vchange_dist(vr, x, (vt - v) - tr * (a + 0.5 * s * tr), lo, hi, vtol, rule)
    return dr + d2, tr + t2, 0.0


@tick_jit
def peak_root(
    x0: float, x1: float, f0: float, f1: float, g0: float, g1: float, target: float,
    v: float, a: float, vt: float, lo: float, hi: float, vtol: float, vb: float, rule: bool,
) -> float:
    """Safeguarded Newton for the peak chain: chain_eval(PEAK, x) = target on the bracket [x0, x1].

    Starts from the root of a parabola fitted to the ends; a Newton step that leaves the bracket (or a missing
    derivative) bisects instead.  Stops after a Newton step below 1e-9 of x (quadratic convergence leaves
    an error far below rounding) or once the bracket is a few ulp wide.
    """
    if f0 == 0.0:
        return x0
    if f1 == 0.0:
        return x1
    xa, fa, xb, fb = x0, f0, x1, f1
    if (abs(f0) <= abs(f1) and g0 != 0.0) or g1 == 0.0:
        x, f, g = x0, f0, g0
    else:
        x, f, g = x1, f1, g1
    # first guess: the root of the parabola through both ends with the slope at the end that has one (Newton
    # from an end alone crawls, halving its step, when the distance is nearly quadratic and the root is near
    # the other end)
    h = x1 - x0
    if g1 != 0.0:  # f0 + b u + c u² in u = (x - x0) / h
        c = g1 * h - (f1 - f0)
        b = (f1 - f0) - c
    else:
        c = (f1 - f0) - g0 * h
        b = g0 * h
    disc = b * b - 4.0 * c * f0
    if disc >= 0.0:
        qq = -0.5 * (b + math.copysign(math.sqrt(disc), b))  # the roots are f0 / qq and qq / c
        u = f0 / qq if qq != 0.0 else -1.0
        if not (0.0 < u < 1.0):
            u = qq / c if c != 0.0 else -1.0
        if 0.0 < u < 1.0:
            x = x0 + u * h
            d, _t, g = chain_eval(KIND_PEAK, x, v, a, vt, lo, hi, vtol, vb, rule)
            f = d - target
            if f == 0.0:
                return x
            if (f < 0.0) == (fa < 0.0):
                xa, fa = x, f
            else:
                xb, fb = x, f
    for _ in range(100):
        xn = x - f / g if g != 0.0 else xa
        if abs(xn - x) <= 1e-9 * abs(xn):
            return xn  # the error after this step is ~(1e-9)² of x
        if not (min(xa, xb) < xn < max(xa, xb)):
            xn = 0.5 * (xa + xb)
        x = xn
        d, _t, g = chain_eval(KIND_PEAK, x, v, a, vt, lo, hi, vtol, vb, rule)
        f = d - target
        if f == 0.0:
            return x
        if (f < 0.0) == (fa < 0.0):
            xa, fa = x, f
        else:
            xb, fb = x, f
        if abs(xb - xa) <= 4.0e-16 * abs(x) + 1e-300:
            return xb if abs(fb) < abs(fa) else xa
    return x


@tick_jit
def chain_root(
    kind: int, x0: float, x1: float, f0: float, f1: float, target: float,
    v: float, a: float, vt: float, lo: float, hi: float, vtol: float, vb: float, rule: bool,
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
        fs = chain_eval(kind, s, v, a, vt, lo, hi, vtol, vb, rule)[0] - target
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
