"""Simulated servo joints with Webots Servo semantics, for running and testing the servo node without hardware.

``Joint``/``JointParams`` reproduce the Webots Servo node on a 1-DOF joint (position, velocity and force control,
soft limits, hard stops, spring, damper, static friction, motor force feedback); ``JointArray`` steps many joints,
including a motor joint carrying a spring-damper joint, in one numba call.  The numerics live in
``sim_plant._kernels`` (documented array layout and ``@njit`` command helpers callable from other numba code).
``sim_plant.arm`` is the coupled 3-DOF arm of the Webots paper (A(q)·q̈ + C + g = Q, its control laws).
Pure numerics: numpy and numba only, no Cyphal and no event loop (tests/test_layering.py checks it).
"""

from sim_plant._joint import JOINT_FIELD_CONSTRAINTS as JOINT_FIELD_CONSTRAINTS
from sim_plant._joint import Joint as Joint
from sim_plant._joint import JointArray as JointArray
from sim_plant._joint import JointKind as JointKind
from sim_plant._joint import JointParams as JointParams
from sim_plant._joint import make_arrays as make_arrays
