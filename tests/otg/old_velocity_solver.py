"""The control loop's former velocity-change solver, kept as the baseline the OTG's velocity interface must beat.

Jerk-limited velocity change: from (p0, v0, a0) to velocity vt with zero acceleration, then cruise at vt.

Used for velocity mode (a ±inf target position) and for the stop after expiry or readiness loss (vt = 0).
The profile is at most three constant-jerk phases: ramp the acceleration toward a peak, hold it, ramp it back to
zero, with the peak chosen so the velocity lands exactly on vt (time-optimal for a single acceleration bound).

The acceleration bound follows the direction-relative rule where the change does not cross v = 0 (speeding up:
a_max, slowing down: |a_min|); a change that crosses zero uses the tighter of the two for the whole change, which
is safe and at most slightly slower than optimal.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

VP_P0, VP_V0, VP_A0 = 0, 1, 2
VP_D = 3  # Three phase durations [second] at VP_D..VP_D+2.
VP_J = 6  # Three phase jerks at VP_J..VP_J+2.
VP_DURATION = 9
VP_VT = 10
VP_SIZE = 11
"""Layout of a velocity profile (float64[VP_SIZE], caller-owned)."""


@njit(cache=True, nogil=True)
def plan_velocity_into(
    p0: float, v0: float, a0: float, vt: float, a_min: float, a_max: float, j_max: float, vp: np.ndarray
) -> None:
    """Write the profile reaching velocity ``vt`` with a = 0 under the bounds; see the module docstring."""
    vp[VP_P0] = p0
    vp[VP_V0] = v0
    vp[VP_A0] = a0
    vp[VP_VT] = vt
    # Velocity reached if the acceleration is ramped to zero at once decides the direction of the change.
    v_settle = v0 + a0 * abs(a0) / (2.0 * j_max)
    s = 1.0 if vt >= v_settle else -1.0
    if s * vt >= 0.0 and s * v0 >= 0.0:
        bound = a_max  # Speeding up in direction s.
    elif s * vt <= 0.0 and s * v0 <= 0.0:
        bound = -a_min  # Slowing down without crossing zero.
    else:
        bound = min(a_max, -a_min)
    a0s = s * a0
    dv = s * (vt - v0)
    # Peak acceleration without a plateau: (2·ap² − a0²)/(2j) = dv when ap ≥ a0 (ramp up, then down).
    ap_sq = (2.0 * j_max * dv + a0s * a0s) / 2.0
    ap = math.sqrt(max(ap_sq, 0.0))
    if a0s > ap:
        # Already accelerating more than needed: ramp straight down; the velocity gained doing so is the change.
        ap = a0s
    plateau = 0.0
    if ap > bound:
        ap = bound
        ramp = 1.0 if ap >= a0s else -1.0
        gain1 = ramp * (ap * ap - a0s * a0s) / (2.0 * j_max)
        gain3 = ap * ap / (2.0 * j_max)
        plateau = max((dv - gain1 - gain3) / ap, 0.0)
    d1 = abs(ap - a0s) / j_max
    vp[VP_D] = d1
    vp[VP_D + 1] = plateau
    vp[VP_D + 2] = ap / j_max
    vp[VP_J] = s * j_max * (1.0 if ap >= a0s else -1.0)
    vp[VP_J + 1] = 0.0
    vp[VP_J + 2] = -s * j_max
    vp[VP_DURATION] = vp[VP_D] + vp[VP_D + 1] + vp[VP_D + 2]


@njit(cache=True, nogil=True)
def sample_velocity_into(vp: np.ndarray, t: float, out: np.ndarray) -> None:
    """Write (p, v, a, j) at time t ≥ 0 into ``out[0:4]``; after the profile the velocity stays at vt."""
    p = vp[VP_P0]
    v = vp[VP_V0]
    a = vp[VP_A0]
    remaining = max(t, 0.0)
    for k in range(3):
        d = vp[VP_D + k]
        jk = vp[VP_J + k]
        h = min(d, remaining)
        p += h * (v + h * (a / 2.0 + h * jk / 6.0))
        v += h * (a + h * jk / 2.0)
        a += h * jk
        remaining -= h
        if remaining <= 0.0 and h < d:
            out[0] = p
            out[1] = v
            out[2] = a
            out[3] = jk
            return
    # Cruise: the acceleration is zero by construction; pin velocity to vt against rounding.
    v = vp[VP_VT]
    out[0] = p + v * remaining
    out[1] = v
    out[2] = 0.0
    out[3] = 0.0
