"""Layout of a profile: the caller-owned float64 array that fully describes one planned trajectory.

A profile holds a small header (status, repaired flag, phase count, duration, the state after the
end) and up to ``MAX_PHASES`` constant-jerk phases, each stored as (start time, p, v, a, jerk).
Keeping everything in one flat array lets numba code plan and sample without allocating.
"""

from __future__ import annotations

STATUS = 0
REPAIRED = 1
COUNT = 2
DURATION = 3
END_P = 4
END_V = 5
END_A = 6
BRAKE_COUNT = 7
HEADER = 8

MAX_PHASES = 16
PHASE_STRIDE = 5
PH_T = 0
PH_P = 1
PH_V = 2
PH_A = 3
PH_J = 4

PROFILE_SIZE = HEADER + MAX_PHASES * PHASE_STRIDE

OK = 0
INFEASIBLE = 1
NUMERICAL_FAILURE = 2
