"""Time-optimal jerk-limited online trajectory generator (Type IV: target acceleration 0), numba-compiled.

Direction-relative acceleration limits: a_min <= a <= a_max while v >= 0 and -a_max <= a <= -a_min
while v < 0 (a_max limits speeding up, |a_min| slowing down).  Kernels (``plan_into``,
``sample_into``, ``profile_duration``) run without allocation inside other numba code; ``plan``,
``plan_batch`` and ``sample_batch`` are the Python API.  The velocity interface (``plan_velocity_into``,
``plan_velocity``) plans the time-optimal change to a target velocity into the same profile layout.

Fastest single plan from Python: a reusable ``Planner`` (it returns a trajectory it owns and overwrites on the
next call, like Ruckig's ``calculate(input, trajectory)``)::

    planner = Planner()
    traj = planner.plan(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max)
    p, v, a, j = traj.at(t)

Underneath it, ``fast_plan_into()`` returns ``plan_into`` compiled for ten floats and a
profile from ``new_profile()``, skipping numba's per-call type dispatch (the caller guarantees the types)::

    plan_fast = fast_plan_into()
    profile = new_profile()
    status = plan_fast(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max, profile)
    t_end = profile_duration(profile)        # sample with Trajectory(profile).at(t) or sample_into
"""

from __future__ import annotations

from ._kernels import plan_batch_into, plan_into, profile_duration, sample_batch_into, sample_into
from ._profile import MAX_PHASES, PROFILE_SIZE
from ._trajectory import (
    BatchPlan,
    Planner,
    Status,
    Trajectory,
    fast_plan_into,
    fast_plan_velocity_into,
    new_profile,
    plan,
    plan_batch,
    plan_velocity,
    sample_batch,
)
from ._velocity import plan_velocity_into

__all__ = [
    "MAX_PHASES",
    "PROFILE_SIZE",
    "BatchPlan",
    "Planner",
    "Status",
    "Trajectory",
    "fast_plan_into",
    "fast_plan_velocity_into",
    "new_profile",
    "plan",
    "plan_batch",
    "plan_batch_into",
    "plan_into",
    "plan_velocity",
    "plan_velocity_into",
    "profile_duration",
    "sample_batch",
    "sample_batch_into",
    "sample_into",
]
