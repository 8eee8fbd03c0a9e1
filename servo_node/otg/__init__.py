"""Time-optimal jerk-limited online trajectory generator (Type IV: target acceleration 0), numba-compiled.

Direction-relative acceleration limits: a_min <= a <= a_max while v >= 0 and -a_max <= a <= -a_min
while v < 0 (a_max limits speeding up, |a_min| slowing down).  Kernels (``plan_into``,
``sample_into``, ``profile_duration``) run without allocation inside other numba code; ``plan``,
``plan_batch`` and ``sample_batch`` are the Python API.
"""

from __future__ import annotations

from ._kernels import plan_batch_into, plan_into, profile_duration, sample_batch_into, sample_into
from ._profile import MAX_PHASES, PROFILE_SIZE
from ._trajectory import Status, Trajectory, plan, plan_batch, sample_batch

__all__ = [
    "MAX_PHASES",
    "PROFILE_SIZE",
    "Status",
    "Trajectory",
    "plan",
    "plan_batch",
    "plan_batch_into",
    "plan_into",
    "profile_duration",
    "sample_batch",
    "sample_batch_into",
    "sample_into",
]
