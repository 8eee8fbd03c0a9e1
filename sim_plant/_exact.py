"""The exact linear integrator: spring, damper and inertia of a joint (or a parent-child pair) integrated per
substep with the matrix exponential, cached per joint and substep length.
"""

from __future__ import annotations

from numba import njit

from ._layout import N_WORK, P_DAMPING_CONSTANT, P_INERTIA, P_SPRING_CONSTANT, S_CACHE, S_CACHE_H, S_WORK, FloatArray

# ---- exact linear integrator --------------------------------------------------------------------------------
# The matrices live in the joint's private work space (``S_WORK``), row-major: a change of substep length (every
# tick of a loop on a real clock) recomputes the cache without allocating.
_X, _RESULT, _TERM, _TMP = (S_WORK + N_WORK // 4 * k for k in range(4))


@njit(cache=True, nogil=True, error_model="numpy")
def _matmul(w: FloatArray, i: int, a: int, b: int, out: int, n: int) -> None:
    """out = a @ b for n×n matrices in row ``i`` of ``w`` at offsets a, b, out (no BLAS needed)."""
    for r in range(n):
        for c in range(n):
            s = 0.0
            for k in range(n):
                s += w[i, a + r * n + k] * w[i, b + k * n + c]
            w[i, out + r * n + c] = s


@njit(cache=True, nogil=True, error_model="numpy")
def _expm(w: FloatArray, i: int, n: int) -> None:
    """exp(X) of the n×n matrix X at ``_X`` of row ``i`` into ``_RESULT`` (X is scaled in place), by scaling and
    squaring of a Taylor series (accurate to round-off for small matrices)."""
    norm = 0.0
    for r in range(n):
        s = 0.0
        for c in range(n):
            s += abs(w[i, _X + r * n + c])
        norm = max(norm, s)
    squarings = 0
    while norm > 0.125:
        norm *= 0.5
        squarings += 1
    scale = 0.5**squarings
    for k in range(n * n):
        w[i, _X + k] *= scale
        w[i, _RESULT + k] = 0.0
        w[i, _TERM + k] = 0.0
    for r in range(n):
        w[i, _RESULT + r * n + r] = 1.0
        w[i, _TERM + r * n + r] = 1.0
    for k in range(1, 19):
        _matmul(w, i, _TERM, _X, _TMP, n)
        for m in range(n * n):
            w[i, _TERM + m] = w[i, _TMP + m] / k
            w[i, _RESULT + m] += w[i, _TERM + m]
    for _ in range(squarings):
        _matmul(w, i, _RESULT, _RESULT, _TMP, n)
        for m in range(n * n):
            w[i, _RESULT + m] = w[i, _TMP + m]


@njit(cache=True, nogil=True, error_model="numpy")
def _clear_x(state: FloatArray, i: int, n: int) -> None:
    """Zero the n×n matrix X of row ``i``'s work space (the caller then sets its nonzero entries)."""
    for k in range(n * n):
        state[i, _X + k] = 0.0


@njit(cache=True, nogil=True, error_model="numpy")
def update_cache_single(params: FloatArray, state: FloatArray, i: int, h: float) -> None:
    """Cache Φ = exp(A·h), Γ = ∫exp(A·s)ds·b of J·q'' = −K·q − B·q' + f for joint i, with 1/Γ_v and 1/h."""
    inv_j = 1.0 / params[i, P_INERTIA]
    _clear_x(state, i, 3)
    state[i, _X + 0 * 3 + 1] = h
    state[i, _X + 1 * 3 + 0] = -params[i, P_SPRING_CONSTANT] * inv_j * h
    state[i, _X + 1 * 3 + 1] = -params[i, P_DAMPING_CONSTANT] * inv_j * h
    state[i, _X + 1 * 3 + 2] = inv_j * h
    _expm(state, i, 3)
    e = _RESULT
    c = S_CACHE
    state[i, c + 0] = state[i, e + 0]
    state[i, c + 1] = state[i, e + 1]
    state[i, c + 2] = state[i, e + 3]
    state[i, c + 3] = state[i, e + 4]
    state[i, c + 4] = state[i, e + 2]
    g_v = state[i, e + 5]
    state[i, c + 5] = g_v
    state[i, c + 6] = 1.0 / g_v if g_v > 0.0 else 0.0  # 0: no motor/friction (cannot happen for h > 0)
    state[i, c + 7] = 1.0 / h
    state[i, S_CACHE_H] = h


@njit(cache=True, nogil=True, error_model="numpy")
def update_cache_pair(params: FloatArray, state: FloatArray, p: int, c: int, h: float) -> None:
    """Cache the 4×4 Φ and 4×2 Γ of the parent p / child c chain on the parent's state row."""
    inv_jp = 1.0 / params[p, P_INERTIA]
    inv_jc = 1.0 / params[c, P_INERTIA]
    # M⁻¹ of M = [[jp + jc, jc], [jc, jc]]
    m00, m01, m10, m11 = inv_jp, -inv_jp, -inv_jp, inv_jp + inv_jc
    k0, k1 = params[p, P_SPRING_CONSTANT], params[c, P_SPRING_CONSTANT]
    b0, b1 = params[p, P_DAMPING_CONSTANT], params[c, P_DAMPING_CONSTANT]
    _clear_x(state, p, 6)
    x = _X
    state[p, x + 0 * 6 + 2] = h
    state[p, x + 1 * 6 + 3] = h
    for r, mr0, mr1 in ((0, m00, m01), (1, m10, m11)):
        row = x + (2 + r) * 6
        state[p, row + 0] = -mr0 * k0 * h
        state[p, row + 1] = -mr1 * k1 * h
        state[p, row + 2] = -mr0 * b0 * h
        state[p, row + 3] = -mr1 * b1 * h
        state[p, row + 4] = mr0 * h
        state[p, row + 5] = mr1 * h
    _expm(state, p, 6)
    e = _RESULT
    base = S_CACHE
    for r in range(4):
        for col in range(4):
            state[p, base + 4 * r + col] = state[p, e + 6 * r + col]
    for r in range(4):
        for col in range(2):
            state[p, base + 16 + 2 * r + col] = state[p, e + 6 * r + 4 + col]
    state[p, S_CACHE_H] = h
