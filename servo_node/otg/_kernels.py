"""Numba kernels of the online trajectory generator: plan into a profile, sample it, read its duration.

All hot functions take plain floats and a caller-owned float64 profile (see ``_profile``), never
allocate, and can be called from other ``@njit(nogil=True)`` code (the control loop).

Why one module of ~430 lines: the plan's entry points and their candidate selection inline into each other;
the closed forms live in ``_families``, the brake in ``_brake``, the velocity interface in ``_velocity``.
"""

from __future__ import annotations

import math

from numba import njit, prange

from .._jit import runtime, tick_jit
from ._brake import brake, push_phase
from ._families import (
    KIND_GAP,
    KIND_PEAK,
    advance,
    chain_eval,
    chain_root,
    peak_bases,
    peak_root,
    rule_block,
    vchange,
    vchange_dist,
)
from ._profile import (
    BRAKE_COUNT,
    COUNT,
    DURATION,
    END_A,
    END_P,
    END_V,
    HEADER,
    INFEASIBLE,
    NUMERICAL_FAILURE,
    OK,
    PH_A,
    PH_J,
    PH_P,
    PH_T,
    PH_V,
    PHASE_STRIDE,
    PROFILE_SIZE,
    REPAIRED,
    STATUS,
)

__all__ = ["PROFILE_SIZE", "plan_batch_into", "plan_into", "profile_duration", "sample_batch_into", "sample_into"]


@tick_jit
def _push_vchange(  # type: ignore[no-untyped-def]
    prof, n: int, v: float, dv: float, a: float, lo: float, hi: float, vtol: float, rule: bool,
) -> int:
    """Append the phases of the fastest velocity change from (v, a) by dv ending at a = 0."""
    if rule:
        s, t1, t2, j3, t3, t4, t5 = rule_block(v, a, dv, hi, -lo, vtol)
        n = push_phase(prof, n, s, t1)
        n = push_phase(prof, n, 0.0, t2)
        n = push_phase(prof, n, j3, t3)
        n = push_phase(prof, n, 0.0, t4)
        return push_phase(prof, n, -s, t5)
    s, t1, t2, t3 = vchange(dv, a, lo, hi, vtol)
    n = push_phase(prof, n, s, t1)
    n = push_phase(prof, n, 0.0, t2)
    return push_phase(prof, n, -s, t3)


@tick_jit
def _push_chain(  # type: ignore[no-untyped-def]
    prof, n: int, kind: int, x: float, tc: float, v: float, a: float, w: float, lo: float, hi: float,
    vtol: float, vb: float, rule: bool,
) -> int:
    """Append the phases of one chain member (see ``_families``): peak/valley vb + x with cruise tc, or gap."""
    if kind == KIND_PEAK:
        b1, b2 = peak_bases(v, a, w, vtol, vb)
        n = _push_vchange(prof, n, v, b1 + x, a, lo, hi, 0.0, rule)
        n = push_phase(prof, n, 0.0, tc)
        return _push_vchange(prof, n, vb + x, b2 - x, 0.0, lo, hi, 0.0, rule)
    s = 1.0 if x >= a else -1.0
    tr = abs(x - a)
    n = push_phase(prof, n, s, tr)
    dvr = tr * (a + 0.5 * s * tr)
    return _push_vchange(prof, n, v + dvr, (w - v) - dvr, x, lo, hi, vtol, rule)


@tick_jit
def _plan_normalised(  # type: ignore[no-untyped-def]
    D: float, v: float, a: float, w: float, vmn: float, vmx: float, lo: float, hi: float, pnoise: float,
    vtol: float, prof, n: int, rule: bool,
) -> tuple[int, int]:
    """Time-optimal box plan from a recoverable state: first chain member whose distance is D.

    Returns (status, phase count).  Distances above the direct velocity change's are reached by
    the peak chain (gap chain first when a < 0 points away), distances below by the valley chain.
    Peaks are searched as offsets from the chain's lowest (highest) member for full precision.
    """
    vs = v + 0.5 * a * abs(a)
    vs = min(max(vs, vmn), vmx)
    d_dir, t_dir, _g = vchange_dist(v, a, w - v, lo, hi, vtol, rule)
    err = D - d_dir
    # rounding of the direct change's computed distance (its velocities times its duration); with D's own
    # rounding and the position resolution (pnoise) it is the tolerance on reaching D
    dnoise = 1e-14 * (abs(d_dir) + (abs(v) + abs(w) + 1.0) * t_dir)
    tol = 1e-14 * abs(D) + dnoise + pnoise
    if abs(err) <= tol:
        return OK, _push_vchange(prof, n, v, w - v, a, lo, hi, vtol, rule)
    if err > 0.0:
        if a < 0.0 and w < vs:
            d_gap, _t, _g = chain_eval(KIND_PEAK, 0.0, v, a, w, lo, hi, vtol, vs, rule)
            if D <= d_gap:
                x = chain_root(KIND_GAP, a, 0.0, -err, d_gap - D, D, v, a, w, lo, hi, vtol, 0.0, rule)
                return OK, _push_chain(prof, n, KIND_GAP, x, 0.0, v, a, w, lo, hi, vtol, 0.0, rule)
            vlo = vs
        else:
            vlo = max(vs, w)
        vlo = min(vlo, vmx)
        top = vmx - vlo
        d_end, _t, g_end = chain_eval(KIND_PEAK, top, v, a, w, lo, hi, vtol, vlo, rule)
        if D <= d_end:
            d_lo, _t, g_lo = chain_eval(KIND_PEAK, 0.0, v, a, w, lo, hi, vtol, vlo, rule)
            x = peak_root(0.0, top, d_lo - D, d_end - D, g_lo, g_end, D, v, a, w, lo, hi, vtol, vlo, rule)
            return OK, _push_chain(prof, n, KIND_PEAK, x, 0.0, v, a, w, lo, hi, vtol, vlo, rule)
        return OK, _push_chain(prof, n, KIND_PEAK, top, (D - d_end) / vmx, v, a, w, lo, hi, vtol, vlo, rule)
    if a > 0.0 and w > vs:
        d_gap, _t, _g = chain_eval(KIND_PEAK, 0.0, v, a, w, lo, hi, vtol, vs, rule)
        if D >= d_gap:
            x = chain_root(KIND_GAP, a, 0.0, -err, d_gap - D, D, v, a, w, lo, hi, vtol, 0.0, rule)
            return OK, _push_chain(prof, n, KIND_GAP, x, 0.0, v, a, w, lo, hi, vtol, 0.0, rule)
        vhi = vs
    else:
        vhi = min(vs, w)
    vhi = max(vhi, vmn)
    bottom = vmn - vhi
    d_end, _t, g_end = chain_eval(KIND_PEAK, bottom, v, a, w, lo, hi, vtol, vhi, rule)
    if D >= d_end:
        d_hi, _t, g_hi = chain_eval(KIND_PEAK, 0.0, v, a, w, lo, hi, vtol, vhi, rule)
        x = peak_root(0.0, bottom, d_hi - D, d_end - D, g_hi, g_end, D, v, a, w, lo, hi, vtol, vhi, rule)
        return OK, _push_chain(prof, n, KIND_PEAK, x, 0.0, v, a, w, lo, hi, vtol, vhi, rule)
    if vmn < 0.0:
        return OK, _push_chain(prof, n, KIND_PEAK, bottom, (D - d_end) / vmn, v, a, w, lo, hi, vtol, vhi, rule)
    if d_end - D <= tol + 9.0 * dnoise:
        # short by noise only: ten times the computed distance's rounding, the resolution once (a start at rest has
        # no computed distance: a target behind it by more than the resolution is infeasible, not a jump onto pt)
        return OK, _push_chain(prof, n, KIND_PEAK, bottom, 0.0, v, a, w, lo, hi, vtol, vhi, rule)
    return INFEASIBLE, n


@tick_jit
def _finish(  # type: ignore[no-untyped-def]
    prof, n: int, p0: float, v0: float, a0: float, pt: float, vt: float, tau: float, j: float, amax: float,
    vmin: float, vmax: float, alo: float, ahi: float, check_end: bool,
) -> int:
    """Turn normalised (jerk sign, duration) slots into real phases with start times and states.

    A phase without jerk is a cruise at a velocity limit (a = 0) or a plateau at an acceleration bound (alo,
    ahi or, past v = 0 under the rule, their negatives): its start state is snapped onto that limit, so the
    rounding residue of the ramps before it (~ulp of the accelerations) does not grow over a long phase."""
    t = 0.0
    p = p0
    v = v0
    a = a0
    a_snap = 1e-12 * (abs(a0) + ahi - alo)
    for k in range(n):
        base = HEADER + k * PHASE_STRIDE
        dt = prof[base + PH_T] * tau
        jj = prof[base + PH_J] * j
        if jj == 0.0 and abs(a) < 1e-9 * amax:
            # a cruise: a long one would otherwise drift away from the distance the planner solved for
            a = 0.0
            v = vmax if abs(v - vmax) < abs(v - vmin) else vmin
        elif jj == 0.0:
            for bound in (ahi, alo, -ahi, -alo):
                if abs(a - bound) <= a_snap:
                    a = bound
                    break
        prof[base + PH_T] = t
        prof[base + PH_P] = p
        prof[base + PH_V] = v
        prof[base + PH_A] = a
        prof[base + PH_J] = jj
        dp, v, a = advance(v, a, jj, dt)
        p += dp
        t += dt
    prof[COUNT] = n
    prof[DURATION] = t
    prof[END_P] = pt
    prof[END_V] = vt
    prof[END_A] = 0.0
    if not math.isfinite(t) or not math.isfinite(p):
        return NUMERICAL_FAILURE
    if check_end and (abs(p - pt) > 1e-7 * (abs(p0) + abs(pt) + (vmax - vmin) * t + amax * tau * tau)
                      or abs(v - vt) > 1e-7 * (vmax - vmin + amax * tau)):
        return NUMERICAL_FAILURE  # a rule-aware candidate from an edge state that did not close: not used
    return OK


@tick_jit
def _solve_box(  # type: ignore[no-untyped-def]
    p0: float, v0: float, a0: float, pt: float, vt: float, vmin: float, vmax: float,
    alo: float, ahi: float, j: float, prof, rule: bool,
) -> int:
    """Brake-then-plan in units where the jerk is 1: under the fixed box [alo, ahi], or, with ``rule``, under
    the direction-relative rule with ahi = a_max and -alo = |a_min| (velocity changes across v = 0 switch
    bounds; the brake uses the box of the starting velocity's sign)."""
    amax = max(ahi, -alo)
    tau = amax / j
    vu = amax * tau
    pu = vu * tau
    v = v0 / vu
    a = a0 / amax
    w = vt / vu
    lo = alo / amax
    hi = ahi / amax
    vmn = vmin / vu
    vmx = vmax / vu
    D = (pt - p0) / pu
    tolv = 1e-12 * (abs(v) + 0.5 * a * a + vmx - vmn)
    blo, bhi = (-hi, -lo) if rule and v < 0.0 else (lo, hi)
    n, dpb, v, a = brake(v, a, blo, bhi, vmn, vmx, tolv, prof, 0)
    prof[BRAKE_COUNT] = n
    a = min(max(a, blo), bhi)
    pnoise = 1e-13 * (abs(p0) + abs(pt)) / pu  # rounding noise of absolute positions (sampled online states)
    # a velocity within vtol of a one-ramp landing is snapped to it (scale of the limits, never shrinking)
    vtol = 1.5e-14 * (vmx - vmn + abs(w))
    # distances a velocity snap cannot resolve (~vtol^1.5) count as noise too
    pnoise += 4.0 * vtol * math.sqrt(vtol)
    status, n = _plan_normalised(D - dpb, v, a, w, vmn, vmx, lo, hi, pnoise, vtol, prof, n, rule)
    if status != OK:
        prof[COUNT] = 0
        prof[DURATION] = 0.0
        return status
    return _finish(prof, n, p0, v0, a0, pt, vt, tau, j, amax, vmin, vmax, alo, ahi, rule)


@tick_jit
def _rule_ok(prof, k0: int, a_up: float, a_dn: float, vtol: float) -> bool:  # type: ignore[no-untyped-def]
    """Check the direction-relative acceleration rule on every phase from k0, split at v = 0 crossings.

    Pieces where |v| stays within vtol (a rounding-level touch of v = 0) may use either side's bounds.
    """
    n = int(prof[COUNT])
    tol = 1e-9 * max(a_up, a_dn)
    for k in range(k0, n):
        base = HEADER + k * PHASE_STRIDE
        t0 = prof[base + PH_T]
        t1 = prof[base + PHASE_STRIDE + PH_T] if k + 1 < n else prof[DURATION]
        dt = t1 - t0
        v = prof[base + PH_V]
        a = prof[base + PH_A]
        jj = prof[base + PH_J]
        last = k + 1 >= n
        a_end = a if last else prof[base + PHASE_STRIDE + PH_A]  # exact: planned from the phase's own duration
        # v(τ) = v + a τ + jj τ²/2: zero crossings split the phase into sign-constant pieces
        r1 = dt
        r2 = dt
        if jj != 0.0:
            disc = a * a - 2.0 * jj * v
            if disc >= 0.0:
                sq = math.sqrt(disc)
                q = -(a + math.copysign(sq, a)) if a != 0.0 else sq
                ra = q / jj
                rb = (2.0 * v / q) if q != 0.0 else dt
                r1 = min(ra, rb)
                r2 = max(ra, rb)
        elif a != 0.0:
            r1 = -v / a
        cuts0 = 0.0
        for piece in range(3):
            ce = r1 if piece == 0 else (r2 if piece == 1 else dt)
            ce = min(max(ce, cuts0), dt)
            if ce > cuts0 or (piece == 2 and dt == 0.0):
                tm = 0.5 * (cuts0 + ce)
                vm = v + tm * (a + 0.5 * jj * tm)
                v_a = v + cuts0 * (a + 0.5 * jj * cuts0)
                v_b = v + ce * (a + 0.5 * jj * ce)
                if max(abs(vm), abs(v_a), abs(v_b)) <= vtol:
                    lo_b = -max(a_up, a_dn)
                    hi_b = max(a_up, a_dn)
                elif vm >= 0.0:
                    lo_b = -a_dn
                    hi_b = a_up
                else:
                    lo_b = -a_up
                    hi_b = a_dn
                for te in (cuts0, ce):
                    ae = a + jj * te
                    tq = tol
                    if te == dt and not last:
                        ae = a_end
                    elif te == dt:
                        # start times are absolute: the duration carries ~ulp(t) error, which moves a by |j|·ulp
                        # (only the last phase's end is known this way; every other acceleration is exact, so a
                        # plan ~1e16 s long cannot pass off a broken bound as that rounding)
                        tq = tol + 1e-15 * t1 * abs(jj)
                    if ae > hi_b + tq or ae < lo_b - tq:
                        return False
            cuts0 = max(cuts0, ce)
    return True


@tick_jit
def plan_into(  # type: ignore[no-untyped-def]
    p0: float, v0: float, a0: float, pt: float, vt: float,
    v_min: float, v_max: float, a_min: float, a_max: float, j_max: float, profile,
) -> int:
    """Plan the time-optimal motion to (pt, vt, 0) into ``profile``; return status 0/1/2, never raise.

    Invalid input (non-finite values, v_min > 0, v_max <= 0, a_min >= 0, a_max <= 0, j_max <= 0)
    gives status 1.  An infeasible vt is clamped to the nearest feasible value and flagged repaired.
    """
    profile[COUNT] = 0
    profile[DURATION] = 0.0
    profile[END_P] = p0
    profile[END_V] = 0.0
    profile[END_A] = 0.0
    profile[REPAIRED] = 0.0
    profile[BRAKE_COUNT] = 0.0
    # 0 * x is NaN exactly when x is not finite, so one sum checks all inputs
    ok = math.isfinite(0.0 * p0 + 0.0 * v0 + 0.0 * a0 + 0.0 * pt + 0.0 * vt + 0.0 * v_min + 0.0 * v_max
                       + 0.0 * a_min + 0.0 * a_max + 0.0 * j_max)
    if not ok or v_min > 0.0 or v_max <= 0.0 or a_min >= 0.0 or a_max <= 0.0 or j_max <= 0.0:
        profile[STATUS] = INFEASIBLE
        return INFEASIBLE
    w = min(max(vt, v_min), v_max)
    if pt > p0 and w < 0.0:
        w = 0.0
    elif pt < p0 and w > 0.0:
        w = 0.0
    profile[REPAIRED] = 1.0 if w != vt else 0.0
    a_up = a_max
    a_dn = -a_min
    if a_up == a_dn:
        status = _solve_box(p0, v0, a0, pt, w, v_min, v_max, a_min, a_max, j_max, profile, runtime(False))
    else:
        status = _plan_rule(p0, v0, a0, pt, w, v_min, v_max, a_up, a_dn, j_max, profile)
    profile[STATUS] = status
    return status


@tick_jit
def _box_of(c: int, a_up: float, a_dn: float) -> tuple[float, float]:
    """Fallback acceleration boxes for the direction-relative rule: forward, reverse, tight."""
    if c == 0:
        return -a_dn, a_up
    if c == 1:
        return -a_up, a_dn
    m = min(a_up, a_dn)
    return -m, m


@tick_jit
def _plan_rule(  # type: ignore[no-untyped-def]
    p0: float, v0: float, a0: float, pt: float, vt: float, v_min: float, v_max: float,
    a_up: float, a_dn: float, j_max: float, profile,
) -> int:
    """Direction-relative limits: the rule-aware plan (velocity changes whose bound switches at v = 0).

    It is time-optimal whenever it obeys the rule phase by phase (always, except from starts that cannot
    obey it: a deceleration too strong to ease before v reaches 0).  Otherwise, and from starts outside the
    limits (where brake-then-plan depends on the box), the fastest candidate that obeys the rule is used:
    forward box (exact for v >= 0 motions), reverse box (v <= 0), and the tight box, which always obeys it.
    """
    if v0 >= 0.0:
        outside = a0 > a_up or a0 < -a_dn
    else:
        outside = a0 > a_dn or a0 < -a_up
    vtol = 1e-10 * (v_max - v_min)
    st = _solve_box(p0, v0, a0, pt, vt, v_min, v_max, -a_dn, a_up, j_max, profile, runtime(True))
    best = -1
    best_t = math.inf
    last = 3
    if st == OK and _rule_ok(profile, int(profile[BRAKE_COUNT]) if outside else 0, a_up, a_dn, vtol):
        if not outside and profile[BRAKE_COUNT] == 0.0:
            return OK
        # from a start outside the limits brake-then-plan is not exactly optimal, and the boxes brake
        # differently: keep the fastest of all
        best = 3
        best_t = profile[DURATION]
    for c in range(3):
        lo, hi = _box_of(c, a_up, a_dn)
        st = _solve_box(p0, v0, a0, pt, vt, v_min, v_max, lo, hi, j_max, profile, runtime(False))
        last = c
        if st != OK:
            continue
        k0 = int(profile[BRAKE_COUNT]) if outside else 0
        d = profile[DURATION]
        if d < best_t and (c == 2 or _rule_ok(profile, k0, a_up, a_dn, vtol)):
            best = c
            best_t = d
    if best < 0:
        return INFEASIBLE
    if best != last:
        lo, hi = _box_of(best, a_up, a_dn)
        if best == 3:
            lo, hi = -a_dn, a_up
        return _solve_box(p0, v0, a0, pt, vt, v_min, v_max, lo, hi, j_max, profile, best == 3)
    return OK


@tick_jit
def profile_duration(profile) -> float:  # type: ignore[no-untyped-def]
    """Duration of the planned motion in seconds (after it the motion continues at v = vt, a = 0)."""
    return profile[DURATION]


@tick_jit
def sample_into(profile, t: float, out) -> None:  # type: ignore[no-untyped-def]
    """Write (p, v, a, j) at time t >= 0 after the plan start into out[0:4]."""
    n = int(profile[COUNT])
    dur = profile[DURATION]
    if n == 0 or t >= dur:
        dt = t - dur
        out[0] = profile[END_P] + profile[END_V] * dt
        out[1] = profile[END_V]
        out[2] = 0.0
        out[3] = 0.0
        return
    k = n - 1
    while k > 0 and profile[HEADER + k * PHASE_STRIDE + PH_T] > t:
        k -= 1
    base = HEADER + k * PHASE_STRIDE
    tau = max(t - profile[base + PH_T], 0.0)
    v = profile[base + PH_V]
    a = profile[base + PH_A]
    jj = profile[base + PH_J]
    out[0] = profile[base + PH_P] + tau * (v + tau * (0.5 * a + tau * (jj / 6.0)))
    out[1] = v + tau * (a + 0.5 * jj * tau)
    out[2] = a + jj * tau
    out[3] = jj


@njit(cache=True, nogil=True, parallel=True)
def plan_batch_into(  # type: ignore[no-untyped-def]
    p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max, profiles, durations, statuses, repaired,
) -> None:
    """Plan many independent problems (equal-length float64 arrays) into profiles[i]."""
    for i in prange(p0.shape[0]):
        prof = profiles[i]
        st = plan_into(p0[i], v0[i], a0[i], pt[i], vt[i], v_min[i], v_max[i], a_min[i], a_max[i], j_max[i], prof)
        statuses[i] = st
        durations[i] = prof[DURATION]
        repaired[i] = prof[REPAIRED] != 0.0


@njit(cache=True, nogil=True, parallel=True)
def sample_batch_into(profiles, times, out) -> None:  # type: ignore[no-untyped-def]
    """Sample profiles[i] at times[i, k] into out[i, k, 0:4]."""
    for i in prange(times.shape[0]):
        prof = profiles[i]
        for k in range(times.shape[1]):
            sample_into(prof, times[i, k], out[i, k])
