"""The joints' arrays, a documented contract (other numba code, e.g. the servo node's nogil control loop, uses it
directly): ``params[n_joints, N_PARAMS]``, the constant description of each joint, indexed by the ``P_*``
constants; ``state[n_joints, N_STATE]``, the mutable state and commands of each joint, indexed by ``S_*``.

Units: rotational joints use rad, rad/s, rad/s², N·m, kg·m²; linear joints m, m/s, m/s², N, kg. The maths is the same.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

FloatArray = npt.NDArray[np.float64]

# ---- params columns -------------------------------------------------------------------------------------------
P_KIND = 0  # 0 = rotational (rad, N·m), 1 = linear (m, N); metadata only
P_INERTIA = 1  # [kg·m²] or [kg], > 0
P_MAX_VELOCITY = 2  # velocity limit [rad/s] or [m/s]; set velocities are clipped to it
P_MAX_FORCE = 3  # largest available motor force [N·m] or [N]
P_CONTROL_P = 4  # initial P gain [1/s]
P_ACCELERATION = 5  # initial acceleration limit A [rad/s²] or [m/s²]; −1 = unlimited
P_POSITION = 6  # initial position
P_MIN_POSITION = 7  # soft limits (clip the target); both zero = off
P_MAX_POSITION = 8
P_MIN_STOP = 9  # hard stops (≤ 0 and ≥ 0); both zero = off
P_MAX_STOP = 10
P_SPRING_CONSTANT = 11  # K [N·m/rad] or [N/m]; rest position 0
P_DAMPING_CONSTANT = 12  # B [N·m·s/rad] or [N·s/m]
P_STATIC_FRICTION = 13  # [N·m] or [N]
P_LOAD = 14  # constant external force on the body [N·m] or [N]
P_GRAVITY_LOAD = 15  # amplitude G of the load G·sin(x) on the body, x its absolute coordinate [N·m] or [N]
P_PARENT = 16  # index of the joint carrying this one, −1 = ground
P_CHILD = 17  # index of the joint carried by this one, −1 = none (derived from P_PARENT by the wrapper)
N_PARAMS = 18

# ---- state columns --------------------------------------------------------------------------------------------
S_POSITION = 0
S_VELOCITY = 1
S_ACCELERATION = 2  # mean acceleration over the last internal substep
S_MOTOR_FORCE_FEEDBACK = 3  # force the motor used in the last substep (0 in force control / passive)
S_CONTROL_MODE = 4  # MODE_POSITION, MODE_VELOCITY or MODE_FORCE
S_TARGET_POSITION = 5  # Pt (±inf in velocity control)
S_TARGET_VELOCITY = 6  # Vd, signed (sign used in velocity control, |Vd| caps Vc in position control)
S_ACCELERATION_LIMIT = 7  # A, −1 = unlimited
S_MOTOR_FORCE = 8  # currently available motor force Fm (≤ max_force)
S_CONTROL_P = 9  # P
S_FORCE_COMMAND = 10  # force of set_force (force control)
S_VC = 11  # current motor target velocity Vc (the controller's output of the last substep)
S_TIME = 12  # simulated time [s]
S_CACHE_H = 13  # substep length of the cached transition matrices; 0 = invalid (set 0 after editing params)
S_CACHE = 14  # private: Φ (row-major, 2×2 or 4×4) then Γ (2×1 or 4×2) of the exact integrator
N_CACHE = 24
S_WORK = S_CACHE + N_CACHE  # private: the exact integrator's work space (four 6×6 matrices, row-major)
N_WORK = 4 * 36
N_STATE = S_WORK + N_WORK

MODE_POSITION = 0.0
MODE_VELOCITY = 1.0
MODE_FORCE = 2.0

MAX_SUBSTEP_S = 1e-3  # internal substep bound [s]
PARALLEL_BLOCK = 256  # joints per block of step_joints_parallel
SUBSTEP_P_MAX = 0.1  # P·h ≤ this
SUBSTEP_OMEGA_MAX = 0.5  # ω·h ≤ this keeps the motor's velocity response positive and accurate



@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def clip(x: float, lo: float, hi: float) -> float:
    """Clip x into [lo, hi]."""
    return lo if x < lo else (hi if x > hi else x)

