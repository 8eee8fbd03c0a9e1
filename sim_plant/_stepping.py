"""Stepping the joints: the lean path for the common case, the general path (substeps, cache refresh, chains)
for the rest, serial and over numba threads; every path gives the same results bit for bit."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ._exact import update_cache_pair, update_cache_single
from ._layout import (
    MAX_SUBSTEP_S,
    MODE_FORCE,
    P_CHILD,
    P_GRAVITY_LOAD,
    P_INERTIA,
    P_LOAD,
    P_MAX_POSITION,
    P_MAX_STOP,
    P_MIN_POSITION,
    P_MIN_STOP,
    P_PARENT,
    P_SPRING_CONSTANT,
    P_STATIC_FRICTION,
    PARALLEL_BLOCK,
    S_ACCELERATION,
    S_ACCELERATION_LIMIT,
    S_CACHE,
    S_CACHE_H,
    S_CONTROL_MODE,
    S_CONTROL_P,
    S_FORCE_COMMAND,
    S_MOTOR_FORCE,
    S_MOTOR_FORCE_FEEDBACK,
    S_POSITION,
    S_TARGET_POSITION,
    S_TARGET_VELOCITY,
    S_TIME,
    S_VC,
    S_VELOCITY,
    SUBSTEP_OMEGA_MAX,
    SUBSTEP_P_MAX,
    FloatArray,
    clip,
)
from ._motor import hard_stop, motor_constraint, stop_scalar, substep_count, substep_length, webots_vc


# ---- stepping -----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _solve_box2(
    g00: float, g01: float, g10: float, g11: float, r0: float, r1: float, lim0: float, lim1: float
) -> tuple[float, float]:
    """Solve G·u = r for u within the boxes |u_j| ≤ lim_j (lim 0 = inactive), complementary at the bounds.

    A bounded component must push the way its residual wants (mixed LCP of the two velocity constraints); the 9
    active-set combinations are tried in order, free ones first.
    """
    best0 = 0.0
    best1 = 0.0
    best_err = math.inf
    for s0 in (0, -1, 1):
        if lim0 <= 0.0 and s0 != 0:
            continue
        for s1 in (0, -1, 1):
            if lim1 <= 0.0 and s1 != 0:
                continue
            u0 = 0.0
            u1 = 0.0
            if lim0 > 0.0 and s0 != 0:
                u0 = s0 * lim0
            if lim1 > 0.0 and s1 != 0:
                u1 = s1 * lim1
            free0 = lim0 > 0.0 and s0 == 0
            free1 = lim1 > 0.0 and s1 == 0
            if free0 and free1:
                det = g00 * g11 - g01 * g10
                if det == 0.0:
                    continue
                u0 = (r0 * g11 - g01 * r1) / det
                u1 = (g00 * r1 - g10 * r0) / det
            elif free0:
                u0 = (r0 - g01 * u1) / g00
            elif free1:
                u1 = (r1 - g10 * u0) / g11
            # feasibility: free components within their box; bounded ones pushing the way the residual wants
            res0 = r0 - g00 * u0 - g01 * u1
            res1 = r1 - g10 * u0 - g11 * u1
            err = 0.0
            if free0:
                err += max(0.0, abs(u0) - lim0) / lim0
            elif s0 != 0:
                err += max(0.0, -s0 * res0) / (abs(r0) + g00 * lim0)
            if free1:
                err += max(0.0, abs(u1) - lim1) / lim1
            elif s1 != 0:
                err += max(0.0, -s1 * res1) / (abs(r1) + g11 * lim1)
            if err < best_err:
                best_err = err
                best0 = u0
                best1 = u1
                if err <= 1e-12:
                    return clip(best0, -lim0, lim0), clip(best1, -lim1, lim1)
    return clip(best0, -lim0, lim0), clip(best1, -lim1, lim1)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _row(state: FloatArray, p: int, r: int, z0: float, z1: float, z2: float, z3: float, u0: float, u1: float) -> float:
    """Row r of Φ·z + Γ·u from the pair cache on state row p."""
    b = S_CACHE + 4 * r
    g = S_CACHE + 16 + 2 * r
    return (
        state[p, b] * z0
        + state[p, b + 1] * z1
        + state[p, b + 2] * z2
        + state[p, b + 3] * z3
        + state[p, g] * u0
        + state[p, g + 1] * u1
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _step_pair(params: FloatArray, state: FloatArray, p: int, c: int, dt: float) -> None:
    """Advance the chain of parent joint p carrying child joint c by dt [s] (exact coupled linear part)."""
    jp = params[p, P_INERTIA]
    jc = params[c, P_INERTIA]
    omega2 = params[p, P_SPRING_CONSTANT] / jp + params[c, P_SPRING_CONSTANT] * (1.0 / jp + 1.0 / jc)
    n_p, _h = substep_length(params, state, p, omega2, dt)
    n_c, _h = substep_length(params, state, c, omega2, dt)
    n = max(n_p, n_c)
    h = dt / n
    if state[p, S_CACHE_H] != h:
        update_cache_pair(params, state, p, c, h)
    base = S_CACHE
    z0 = state[p, S_POSITION]
    z1 = state[c, S_POSITION]
    z2 = state[p, S_VELOCITY]
    z3 = state[c, S_VELOCITY]
    vp_prev = z2
    vc_prev = z3
    fb_p = 0.0
    fb_c = 0.0
    # velocity response of the joint velocities (rows 2, 3 of Γ) to the two joint forces
    g00 = state[p, base + 20]
    g01 = state[p, base + 21]
    g10 = state[p, base + 22]
    g11 = state[p, base + 23]
    for _ in range(n):
        fcmd_p, vt_p, lim_p, on_p = motor_constraint(params, state, p, z0, h)
        fcmd_c, vt_c, lim_c, on_c = motor_constraint(params, state, c, z1, h)
        ext_p = params[p, P_LOAD]
        if params[p, P_GRAVITY_LOAD] != 0.0:
            ext_p += params[p, P_GRAVITY_LOAD] * math.sin(z0)
        ext_c = params[c, P_LOAD]
        if params[c, P_GRAVITY_LOAD] != 0.0:
            ext_c += params[c, P_GRAVITY_LOAD] * math.sin(z0 + z1)
        # generalised forces: a force on the child body acts on both coordinates
        u0 = fcmd_p + ext_p + ext_c
        u1 = fcmd_c + ext_c
        n0 = _row(state, p, 0, z0, z1, z2, z3, u0, u1)
        n1 = _row(state, p, 1, z0, z1, z2, z3, u0, u1)
        n2 = _row(state, p, 2, z0, z1, z2, z3, u0, u1)
        n3 = _row(state, p, 3, z0, z1, z2, z3, u0, u1)
        m0, m1 = _solve_box2(g00, g01, g10, g11, vt_p - n2, vt_c - n3, lim_p, lim_c)
        n0 += state[p, base + 16] * m0 + state[p, base + 17] * m1
        n1 += state[p, base + 18] * m0 + state[p, base + 19] * m1
        n2 += g00 * m0 + g01 * m1
        n3 += g10 * m0 + g11 * m1
        # hard stops: child first (inelastic, momentum conserving), then parent (ground absorbs), child again
        q1, v1, hit = hard_stop(params, c, n1, n3)
        if hit and v1 != n3:
            n2 = (jp * n2 + jc * (n2 + n3)) / (jp + jc)
        n1 = q1
        n3 = v1
        q0, v0, hit = hard_stop(params, p, n0, n2)
        if hit and v0 != n2:
            n3 += n2 - v0  # the child keeps its absolute velocity
        n0 = q0
        n2 = v0
        n1, n3, hit = hard_stop(params, c, n1, n3)
        vp_prev = z2
        vc_prev = z3
        z0, z1, z2, z3 = n0, n1, n2, n3
        fb_p = clip(m0, -state[p, S_MOTOR_FORCE], state[p, S_MOTOR_FORCE]) if on_p else 0.0
        fb_c = clip(m1, -state[c, S_MOTOR_FORCE], state[c, S_MOTOR_FORCE]) if on_c else 0.0
    state[p, S_POSITION] = z0
    state[c, S_POSITION] = z1
    state[p, S_VELOCITY] = z2
    state[c, S_VELOCITY] = z3
    state[p, S_ACCELERATION] = (z2 - vp_prev) / h
    state[c, S_ACCELERATION] = (z3 - vc_prev) / h
    state[p, S_MOTOR_FORCE_FEEDBACK] = fb_p
    state[c, S_MOTOR_FORCE_FEEDBACK] = fb_c
    state[p, S_TIME] += dt
    state[c, S_TIME] += dt


@njit(cache=True, nogil=True, error_model="numpy")
def _step_single(params: FloatArray, state: FloatArray, i: int, dt: float) -> None:
    """Advance uncoupled joint i by dt [s]: the general path (any substep count, cache refresh, gravity load)."""
    inertia = params[i, P_INERTIA]
    force_mode = state[i, S_CONTROL_MODE] == MODE_FORCE
    p = state[i, S_CONTROL_P]
    spring = params[i, P_SPRING_CONSTANT]
    p_active = 0.0 if force_mode else p
    n = 1
    h = dt
    if not (
        dt <= MAX_SUBSTEP_S
        and p_active * dt <= SUBSTEP_P_MAX
        and spring * dt * dt <= SUBSTEP_OMEGA_MAX * SUBSTEP_OMEGA_MAX * inertia
    ):
        n = substep_count(dt, p_active, spring / inertia)
        h = dt / n
    if state[i, S_CACHE_H] != h:
        update_cache_single(params, state, i, h)
    c = S_CACHE
    f00 = state[i, c + 0]
    f01 = state[i, c + 1]
    f10 = state[i, c + 2]
    f11 = state[i, c + 3]
    g0 = state[i, c + 4]
    g1 = state[i, c + 5]
    inv_g1 = state[i, c + 6]
    inv_h = state[i, c + 7]
    load = params[i, P_LOAD]
    gravity = params[i, P_GRAVITY_LOAD]
    fm = state[i, S_MOTOR_FORCE]
    fs = params[i, P_STATIC_FRICTION]
    f_cmd = clip(state[i, S_FORCE_COMMAND], -fm, fm) if force_mode else 0.0
    motor_on = fm > 0.0 and not force_mode
    limit = max(fm, fs) if motor_on else fs
    target = state[i, S_TARGET_POSITION]
    vd = state[i, S_TARGET_VELOCITY]
    lo = params[i, P_MIN_POSITION]
    hi = params[i, P_MAX_POSITION]
    a = state[i, S_ACCELERATION_LIMIT]
    stop_lo = params[i, P_MIN_STOP]
    stop_hi = params[i, P_MAX_STOP]
    vc = state[i, S_VC]
    q = state[i, S_POSITION]
    v = state[i, S_VELOCITY]
    v_prev = v
    u = 0.0
    for _ in range(n):
        f = f_cmd + load
        if gravity != 0.0:
            f += gravity * math.sin(q)
        v_target = 0.0
        if not force_mode:
            vc = webots_vc(target, vd, lo, hi, p, a, vc, q, h)
            if motor_on:
                v_target = vc
        q_new = f00 * q + f01 * v + g0 * f
        v_new = f10 * q + f11 * v + g1 * f
        u = 0.0
        if limit > 0.0:
            u = clip((v_target - v_new) * inv_g1, -limit, limit)
            q_new += g0 * u
            v_new += g1 * u
        v_prev = v
        q, v = stop_scalar(stop_lo, stop_hi, q_new, v_new)
    state[i, S_POSITION] = q
    state[i, S_VELOCITY] = v
    state[i, S_VC] = vc
    state[i, S_ACCELERATION] = (v - v_prev) * inv_h
    state[i, S_MOTOR_FORCE_FEEDBACK] = clip(u, -fm, fm) if motor_on else 0.0
    state[i, S_TIME] += dt


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _lean_ok(
    parent: float, child: float, gravity: float, cache_h: float, mode: float, p: float, k: float, j: float, dt: float
) -> bool:
    """Whether an uncoupled joint takes the lean path for dt: one substep, cache valid for h = dt, no gravity load.

    Its inputs (params, mode, P, cached h) are not changed by stepping, so the answer is the same before and after
    the joint's lean step; ``_step_rest`` relies on that to find the joints the lean loop left.  Scalar arguments on
    purpose: a numba-inlined helper taking the arrays costs an NRT incref/decref pair per call.
    """
    p_active = 0.0 if mode == MODE_FORCE else p
    return (
        parent < 0.0
        and child < 0.0
        and gravity == 0.0
        and cache_h == dt
        and dt <= MAX_SUBSTEP_S
        and p_active * dt <= SUBSTEP_P_MAX
        and k * dt * dt <= SUBSTEP_OMEGA_MAX * SUBSTEP_OMEGA_MAX * j
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _step_lean(params: FloatArray, state: FloatArray, start: int, stop: int, dt: float) -> bool:
    """Advance the joints start..stop−1 that are ``_lean_ok`` by dt [s]; True if any other joint is in the range.

    The loop body is ``_step_single``'s arithmetic for n = 1, bit for bit, written inline and free of calls: a
    possible call, even a rare one, makes the compiler spill the loop's live values around it, and numba-inlined
    helpers taking the arrays add reference counting per joint.  This loop is the plant's hot path.
    """
    rest = False
    for i in range(start, stop):
        mode = state[i, S_CONTROL_MODE]
        p = state[i, S_CONTROL_P]
        if not _lean_ok(
            params[i, P_PARENT],
            params[i, P_CHILD],
            params[i, P_GRAVITY_LOAD],
            state[i, S_CACHE_H],
            mode,
            p,
            params[i, P_SPRING_CONSTANT],
            params[i, P_INERTIA],
            dt,
        ):
            rest = True
            continue
        force_mode = mode == MODE_FORCE
        c = S_CACHE
        f00 = state[i, c + 0]
        f01 = state[i, c + 1]
        f10 = state[i, c + 2]
        f11 = state[i, c + 3]
        g0 = state[i, c + 4]
        g1 = state[i, c + 5]
        inv_g1 = state[i, c + 6]
        inv_h = state[i, c + 7]
        fm = state[i, S_MOTOR_FORCE]
        fs = params[i, P_STATIC_FRICTION]
        f = (clip(state[i, S_FORCE_COMMAND], -fm, fm) if force_mode else 0.0) + params[i, P_LOAD]
        motor_on = fm > 0.0 and not force_mode
        limit = max(fm, fs) if motor_on else fs
        vc = state[i, S_VC]
        q = state[i, S_POSITION]
        v = state[i, S_VELOCITY]
        v_target = 0.0
        if not force_mode:
            vc = webots_vc(
                state[i, S_TARGET_POSITION],
                state[i, S_TARGET_VELOCITY],
                params[i, P_MIN_POSITION],
                params[i, P_MAX_POSITION],
                p,
                state[i, S_ACCELERATION_LIMIT],
                vc,
                q,
                dt,
            )
            if motor_on:
                v_target = vc
        q_new = f00 * q + f01 * v + g0 * f
        v_new = f10 * q + f11 * v + g1 * f
        u = 0.0
        if limit > 0.0:
            u = clip((v_target - v_new) * inv_g1, -limit, limit)
            q_new += g0 * u
            v_new += g1 * u
        q_new, v_new = stop_scalar(params[i, P_MIN_STOP], params[i, P_MAX_STOP], q_new, v_new)
        state[i, S_POSITION] = q_new
        state[i, S_VELOCITY] = v_new
        state[i, S_VC] = vc
        state[i, S_ACCELERATION] = (v_new - v) * inv_h
        state[i, S_MOTOR_FORCE_FEEDBACK] = clip(u, -fm, fm) if motor_on else 0.0
        state[i, S_TIME] += dt
    return rest


@njit(cache=True, nogil=True, error_model="numpy")
def _step_rest(params: FloatArray, state: FloatArray, start: int, stop: int, dt: float) -> None:
    """Advance the joints start..stop−1 that ``_step_lean`` left (a chain with its root) by dt: the general path."""
    for i in range(start, stop):
        if params[i, P_PARENT] >= 0.0 or _lean_ok(
            params[i, P_PARENT],
            params[i, P_CHILD],
            params[i, P_GRAVITY_LOAD],
            state[i, S_CACHE_H],
            state[i, S_CONTROL_MODE],
            state[i, S_CONTROL_P],
            params[i, P_SPRING_CONSTANT],
            params[i, P_INERTIA],
            dt,
        ):
            continue  # a child (stepped with its parent) or already stepped by _step_lean
        child = int(params[i, P_CHILD])
        if child >= 0:
            _step_pair(params, state, i, child, dt)
        else:
            _step_single(params, state, i, dt)


@njit(cache=True, nogil=True, error_model="numpy")
def step_joints_general(params: FloatArray, state: FloatArray, dt: float) -> None:
    """``step_joints`` with the general path for every joint (no lean loop): the reference the fast paths match."""
    if not dt > 0.0:
        return
    for i in range(params.shape[0]):
        if params[i, P_PARENT] >= 0.0:
            continue
        child = int(params[i, P_CHILD])
        if child >= 0:
            _step_pair(params, state, i, child, dt)
        else:
            _step_single(params, state, i, dt)


@njit(cache=True, nogil=True, error_model="numpy")
def step_joints(params: FloatArray, state: FloatArray, dt: float) -> None:
    """Advance every joint (serial chains together) by dt [s]; dt ≤ 0 does nothing.

    Two passes: a call-free loop over the common case (``_lean_ok``: uncoupled, one substep, valid cache, no gravity
    load), then, only if some joint did not qualify, the general path for the others (substeps, cache refresh, sin,
    chains).  Joints are independent apart from chains, so the order changes no result.  Serial, for the control
    loop's ``nogil`` thread; ``step_joints_parallel`` spreads large arrays over threads.
    """
    if not dt > 0.0:
        return
    n = params.shape[0]
    if _step_lean(params, state, 0, n, dt):
        _step_rest(params, state, 0, n, dt)


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def step_joints_parallel(params: FloatArray, state: FloatArray, dt: float) -> None:
    """``step_joints`` spread over numba's threads in blocks of ``PARALLEL_BLOCK`` joints; the same results bit for bit.

    A chain is stepped by the block holding its root, wherever the child's row is, so no row is touched by two
    blocks.  Worth it for large arrays only (a parallel launch costs microseconds); numba's thread count, not this
    kernel, decides how many blocks run at once, and any threading layer (workqueue included) works.
    """
    if not dt > 0.0:
        return
    n = params.shape[0]
    blocks = (n + PARALLEL_BLOCK - 1) // PARALLEL_BLOCK
    rest = np.zeros(blocks, dtype=np.bool_)
    for b in prange(blocks):
        rest[b] = _step_lean(params, state, b * PARALLEL_BLOCK, min(n, (b + 1) * PARALLEL_BLOCK), dt)
    if rest.any():
        for b in prange(blocks):
            if rest[b]:
                _step_rest(params, state, b * PARALLEL_BLOCK, min(n, (b + 1) * PARALLEL_BLOCK), dt)

