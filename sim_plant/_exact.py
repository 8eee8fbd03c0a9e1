"""The exact linear integrator: spring, damper and inertia of a joint (or a parent-child pair) integrated per
substep with the matrix exponential, cached per joint and substep length.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._layout import P_DAMPING_CONSTANT, P_INERTIA, P_SPRING_CONSTANT, S_CACHE, S_CACHE_H, FloatArray


# ---- exact linear integrator --------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _matmul(a: FloatArray, b: FloatArray, out: FloatArray) -> None:
    """out = a @ b for small square matrices (no BLAS needed)."""
    n = a.shape[0]
    for r in range(n):
        for c in range(n):
            s = 0.0
            for k in range(n):
                s += a[r, k] * b[k, c]
            out[r, c] = s


@njit(cache=True, nogil=True, error_model="numpy")
def _expm(a: FloatArray) -> FloatArray:
    """Matrix exponential by scaling and squaring of a Taylor series (accurate to round-off for small matrices)."""
    n = a.shape[0]
    norm = 0.0
    for r in range(n):
        s = 0.0
        for c in range(n):
            s += abs(a[r, c])
        norm = max(norm, s)
    squarings = 0
    while norm > 0.125:
        norm *= 0.5
        squarings += 1
    x = a * (0.5**squarings)
    result = np.eye(n)
    term = np.eye(n)
    tmp = np.empty((n, n))
    for k in range(1, 19):
        _matmul(term, x, tmp)
        term[:, :] = tmp / k
        result += term
    for _ in range(squarings):
        _matmul(result, result, tmp)
        result[:, :] = tmp
    return result


@njit(cache=True, nogil=True, error_model="numpy")
def update_cache_single(params: FloatArray, state: FloatArray, i: int, h: float) -> None:
    """Cache Φ = exp(A·h), Γ = ∫exp(A·s)ds·b of J·q'' = −K·q − B·q' + f for joint i, with 1/Γ_v and 1/h."""
    inv_j = 1.0 / params[i, P_INERTIA]
    aug = np.zeros((3, 3))
    aug[0, 1] = h
    aug[1, 0] = -params[i, P_SPRING_CONSTANT] * inv_j * h
    aug[1, 1] = -params[i, P_DAMPING_CONSTANT] * inv_j * h
    aug[1, 2] = inv_j * h
    e = _expm(aug)
    c = S_CACHE
    state[i, c + 0] = e[0, 0]
    state[i, c + 1] = e[0, 1]
    state[i, c + 2] = e[1, 0]
    state[i, c + 3] = e[1, 1]
    state[i, c + 4] = e[0, 2]
    state[i, c + 5] = e[1, 2]
    state[i, c + 6] = 1.0 / e[1, 2] if e[1, 2] > 0.0 else 0.0  # 0: no motor/friction (cannot happen for h > 0)
    state[i, c + 7] = 1.0 / h
    state[i, S_CACHE_H] = h


@njit(cache=True, nogil=True, error_model="numpy")
def update_cache_pair(params: FloatArray, state: FloatArray, p: int, c: int, h: float) -> None:
    """Cache the 4×4 Φ and 4×2 Γ of the parent p / child c chain on the parent's state row."""
    jp = params[p, P_INERTIA]
    jc = params[c, P_INERTIA]
    # M⁻¹ of M = [[jp + jc, jc], [jc, jc]]
    minv = np.array([[1.0 / jp, -1.0 / jp], [-1.0 / jp, 1.0 / jp + 1.0 / jc]])
    k = (params[p, P_SPRING_CONSTANT], params[c, P_SPRING_CONSTANT])
    b = (params[p, P_DAMPING_CONSTANT], params[c, P_DAMPING_CONSTANT])
    aug = np.zeros((6, 6))
    aug[0, 2] = h
    aug[1, 3] = h
    for r in range(2):
        for col in range(2):
            aug[2 + r, col] = -minv[r, col] * k[col] * h
            aug[2 + r, 2 + col] = -minv[r, col] * b[col] * h
            aug[2 + r, 4 + col] = minv[r, col] * h
    e = _expm(aug)
    base = S_CACHE
    for r in range(4):
        for col in range(4):
            state[p, base + 4 * r + col] = e[r, col]
    for r in range(4):
        for col in range(2):
            state[p, base + 16 + 2 * r + col] = e[r, 4 + col]
    state[p, S_CACHE_H] = h

