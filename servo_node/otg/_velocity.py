"""Velocity interface of the generator: the time-optimal jerk-limited change to a target velocity.

From any (p0, v0, a0) to velocity vt with a = 0, under the direction-relative acceleration rule, written into
an ordinary profile (``sample_into``/``profile_duration`` work on it; after the end the motion continues at
v = vt, a = 0).  Used for velocity mode (an infinitely far target) and for stops (vt = 0).

The change is one rule-aware block (``_families.rule_block``, see docs/otg.md): bang-bang jerk whose
acceleration plateau switches level where v crosses 0 (a_max bounds speeding up, |a_min| slowing down).
A start outside the rule (a beyond its bound, or a deceleration too strong to ease before v reaches 0) is
first brought inside at full jerk (``_brake.brake_rule_acc``).
"""

from __future__ import annotations

import math

from .._jit import tick_jit
from ._brake import brake_rule_acc
from ._families import advance
from ._kernels import _finish, _push_vchange
from ._profile import (
    BRAKE_COUNT,
    COUNT,
    DURATION,
    END_A,
    END_P,
    END_V,
    HEADER,
    INFEASIBLE,
    PH_A,
    PH_J,
    PH_P,
    PH_T,
    PH_V,
    PHASE_STRIDE,
    REPAIRED,
    STATUS,
)


@tick_jit
def plan_velocity_into(  # type: ignore[no-untyped-def]
    p0: float, v0: float, a0: float, vt: float, a_min: float, a_max: float, j_max: float, profile,
) -> int:
    """Plan the time-optimal change from (p0, v0, a0) to velocity vt with a = 0 into ``profile``; return the status.

    Units: p [m or rad], v [/s], a [/s²], j_max [/s³]; a_min < 0 < a_max are direction-relative (a_max
    limits speeding up, |a_min| slowing down, switching at v = 0).  Writes the phases, DURATION (time to
    reach vt [s]), END_P (position at that time), END_V = vt and END_A = 0, so sampling after the end
    continues at constant velocity vt.  Status 0 ok; 1 invalid input (a non-finite value, a_min >= 0,
    a_max <= 0, j_max <= 0), then the profile holds still at p0 with v = 0; 2 numerical failure (overflow).
    Never allocates; callable from other ``@njit(nogil=True)`` code.
    """
    profile[COUNT] = 0
    profile[DURATION] = 0.0
    profile[END_P] = p0
    profile[END_V] = 0.0
    profile[END_A] = 0.0
    profile[REPAIRED] = 0.0
    profile[BRAKE_COUNT] = 0.0
    # 0 * x is NaN exactly when x is not finite, so one sum checks all inputs
    ok = math.isfinite(0.0 * p0 + 0.0 * v0 + 0.0 * a0 + 0.0 * vt + 0.0 * a_min + 0.0 * a_max + 0.0 * j_max)
    if not ok or a_min >= 0.0 or a_max <= 0.0 or j_max <= 0.0:
        profile[STATUS] = INFEASIBLE
        return INFEASIBLE
    up = a_max
    dn = -a_min
    # normalised units: jerk 1, larger acceleration bound 1
    amax = max(up, dn)
    tau = amax / j_max
    vu = amax * tau
    upn = up / amax
    dnn = dn / amax
    v = v0 / vu
    a = a0 / amax
    w = vt / vu
    n, v, a = brake_rule_acc(v, a, upn, dnn, profile, 0)
    profile[BRAKE_COUNT] = n
    # a change within vtol of a single ramp's landing is snapped to it (no sqrt-sized rounding ramp)
    vtol = 1.5e-14 * (abs(v) + abs(w) + 1.0)
    n = _push_vchange(profile, n, v, w - v, a, -dnn, upn, vtol, up != dn)
    # no velocity cruise here: amax = 0 turns off _finish's snapping of near-zero accelerations onto a cruise
    status = _finish(profile, n, p0, v0, a0, p0, vt, tau, j_max, 0.0, vt, vt, a_min, a_max, False)
    if n > 0:
        base = HEADER + (n - 1) * PHASE_STRIDE
        dp, _v, _a = advance(profile[base + PH_V], profile[base + PH_A], profile[base + PH_J],
                             profile[DURATION] - profile[base + PH_T])
        profile[END_P] = profile[base + PH_P] + dp
    profile[STATUS] = status
    return status
