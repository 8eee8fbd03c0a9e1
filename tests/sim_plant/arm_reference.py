"""Independent references for the arm: Euler–Lagrange by sympy from 3-D link kinematics, and scipy integration.

The symbolic model builds every link's pose from rotation matrices (yaw about z, then the shoulder and elbow about
the link frame's y axis, which tilts +z toward +x), takes angular velocities from Rᵀ·Ṙ and translational ones by
differentiation, and forms T and Π with the full inertia tensors; A = ∂²T/∂q̇², C = Σ ∂(∂T/∂q̇)/∂q·q̇ − ∂T/∂q and
g = ∂Π/∂q. Nothing of ``sim_plant.arm``'s hand derivation is reused. Derived once per test session.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy as sp

from sim_plant.arm import ArmParams

_PARAM_NAMES = [f.name for f in dataclasses.fields(ArmParams)]


def _flat(p: ArmParams) -> list[float]:
    """ArmParams as the flat argument list of the lambdified functions."""
    out: list[float] = []
    for name in _PARAM_NAMES:
        v = getattr(p, name)
        out += list(v) if isinstance(v, tuple) else [v]
    return out


@functools.cache
def _derived() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Lambdified (A, C, g, energy) of (q1..3, q̇1..3, *params)."""
    q = sp.symbols("q1:4")
    w = sp.symbols("w1:4")
    t = sp.Symbol("t")
    g, i0, m1, l1, a1, m2, l2, a2, mh, d = sp.symbols("g i0 m1 l1 a1 m2 l2 a2 mh d")
    i1 = sp.symbols("i1j i1a i1t")
    i2 = sp.symbols("i2j i2a i2t")
    params = [g, i0, m1, l1, a1, *i1, m2, l2, a2, *i2, mh, d]

    def rz(a: sp.Expr) -> sp.Matrix:
        return sp.Matrix([[sp.cos(a), -sp.sin(a), 0], [sp.sin(a), sp.cos(a), 0], [0, 0, 1]])

    def ry(a: sp.Expr) -> sp.Matrix:
        return sp.Matrix([[sp.cos(a), 0, sp.sin(a)], [0, 1, 0], [-sp.sin(a), 0, sp.cos(a)]])

    qt = [sp.Function(f"q{i}")(t) for i in (1, 2, 3)]
    to_sym = {**{sp.Derivative(qt[i], t): w[i] for i in range(3)}, **{qt[i]: q[i] for i in range(3)}}
    ez = sp.Matrix([0, 0, 1])
    r0 = rz(qt[0])
    r1 = r0 * ry(qt[1])
    r2 = r1 * ry(qt[2])
    elbow = l1 * r1 * ez
    com1, com2, hand = a1 * r1 * ez, elbow + a2 * r2 * ez, elbow + d * r2 * ez

    def omega_body(r: sp.Matrix) -> sp.Matrix:
        s = r.T * r.diff(t)
        return sp.Matrix([s[2, 1], s[0, 2], s[1, 0]])

    def speed2(p: sp.Matrix) -> sp.Expr:
        v = p.diff(t)
        return (v.T * v)[0]

    # Body axes: x third, y joint axis, z along the link.
    inertia1 = sp.diag(i1[2], i1[0], i1[1])
    inertia2 = sp.diag(i2[2], i2[0], i2[1])
    o0, o1, o2 = omega_body(r0), omega_body(r1), omega_body(r2)
    kin = (sp.Rational(1, 2) * i0 * o0[2] ** 2
           + sp.Rational(1, 2) * ((o1.T * inertia1 * o1)[0] + m1 * speed2(com1))
           + sp.Rational(1, 2) * ((o2.T * inertia2 * o2)[0] + m2 * speed2(com2))
           + sp.Rational(1, 2) * mh * speed2(hand))
    pot = g * (m1 * com1[2] + m2 * com2[2] + mh * hand[2])
    kin = kin.subs(to_sym)
    pot = pot.subs(to_sym)
    a = sp.Matrix(3, 3, lambda i, j: sp.diff(kin, w[i], w[j]))
    dtdw = [sp.diff(kin, w[i]) for i in range(3)]
    c = sp.Matrix([sum(sp.diff(dtdw[i], q[j]) * w[j] for j in range(3)) - sp.diff(kin, q[i]) for i in range(3)])
    grav = sp.Matrix([sp.diff(pot, q[i]) for i in range(3)])
    args = [*q, *w, *params]
    return (sp.lambdify(args, a, "numpy"), sp.lambdify(args, c, "numpy"), sp.lambdify(args, grav, "numpy"),
            sp.lambdify(args, kin + pot, "numpy"))


def reference_terms(p: ArmParams, q: np.ndarray, qdot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(A, C, g, energy) of the symbolic model at (q, q̇)."""
    fa, fc, fg, fe = _derived()
    args = [*q, *qdot, *_flat(p)]
    return (np.array(fa(*args), dtype=float), np.array(fc(*args), dtype=float).reshape(3),
            np.array(fg(*args), dtype=float).reshape(3), float(fe(*args)))
