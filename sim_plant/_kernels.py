"""Numba kernels of the simulated servo joints: plain float64 arrays in, no allocation per step.

This module is the one import for callers (Python and numba): the array contract (:mod:`._layout`), the
commands (:mod:`._commands`) and the steppers (:mod:`._stepping`); the motor (:mod:`._motor`) and the exact
linear integrator (:mod:`._exact`) are their parts.

Model of one joint (a body of inertia J on a 1-DOF joint relative to its parent body or the ground)::

    J·q'' = −K·q − B·q' + u_motor + f_command + load + gravity_load·sin(q)

* Webots position control, evaluated every internal substep h: ``Vc = P·(Pt − q)`` clipped to ±|Vd|; if A ≠ −1 the
  change of Vc per substep is limited to A·h.  Velocity control: target position ±inf, then ``Vc = ±Vd`` (sign of the
  target times the signed set velocity), still subject to A.  Soft limits clip the target.
* The motor (ODE joint-motor semantics) is a velocity constraint: ``u_motor`` is the constant force that makes the
  joint velocity equal Vc at the end of the substep given every other force, clipped to ±max(Fm, static_friction)
  (Webots: "the friction is the larger of maxForce and staticFriction").  A passive joint (Fm = 0, or force
  control) keeps a velocity-0 constraint limited to ±static_friction, i.e. static/Coulomb friction.
* Force control: ``f_command`` clipped to ±Fm is applied as a force; the P-controller and the motor are off.
* Integration: spring, damper and inertia form a linear system that is integrated *exactly* per substep with the
  matrix exponential (cached per joint and substep length); the motor/friction, commanded force, constant load and
  gravity load are held constant over the substep (zero-order hold).  The undamped spring therefore conserves energy
  to round-off and the spring-damper matches its closed-form solution.
* Hard stops: after each substep the position is clipped to [min_stop, max_stop] and velocity into the stop is
  removed (inelastic stop), so no force can pass a stop.

Serial coupling (a joint carried by another, e.g. a motor joint carrying a spring-damper joint): the child coordinate
q_c is relative to the parent body, both move along the same axis, so the absolute coordinates are x_p = q_p and
x_c = q_p + q_c.  The joint-space mass matrix is ``M = [[J_p + J_c, J_c], [J_c, J_c]]`` and
``M·q'' = −K·q − B·q' + u`` with diagonal K, B and u the joint forces (a child joint force reacts on the parent body;
external loads on the child body act on both coordinates).  The 4-dimensional linear part is again integrated exactly
and both motor constraints are solved together (a 2×2 box-constrained problem, solved by enumeration).  Supported
topology: chains of depth two (a root joint with at most one child that has no child); the Python wrapper validates
that and fills ``P_CHILD``.

Stepping paths, all giving the same results bit for bit (``tests/sim_plant/test_fast_paths.py``): ``step_joints``
runs a call-free lean loop over the common case (uncoupled joint, one substep, cached matrices valid for dt, no
gravity load) and the general path (substeps, cache refresh, sin, chains) for the rest; ``step_joints_parallel``
does the same over numba threads in blocks of ``PARALLEL_BLOCK`` joints; ``step_joints_general`` is the general path
for every joint (the reference).

Numba caveat for callers: ``cache=True`` caches are invalidated by changes to the caller's own file only, so a
cached ``@njit`` function elsewhere that calls these kernels keeps stale machine code after this file changes
(clear its ``__pycache__/*.nbi``/``*.nbc`` or bump its source).
"""

from __future__ import annotations

from ._commands import command_acceleration as command_acceleration
from ._commands import command_control_p as command_control_p
from ._commands import command_force as command_force
from ._commands import command_motor_force as command_motor_force
from ._commands import command_position as command_position
from ._commands import command_velocity as command_velocity
from ._commands import reset_state as reset_state
from ._commands import set_desired_velocity as set_desired_velocity
from ._layout import MAX_SUBSTEP_S as MAX_SUBSTEP_S
from ._layout import MODE_FORCE as MODE_FORCE
from ._layout import MODE_POSITION as MODE_POSITION
from ._layout import MODE_VELOCITY as MODE_VELOCITY
from ._layout import N_CACHE as N_CACHE
from ._layout import N_PARAMS as N_PARAMS
from ._layout import N_STATE as N_STATE
from ._layout import N_WORK as N_WORK
from ._layout import P_ACCELERATION as P_ACCELERATION
from ._layout import P_CHILD as P_CHILD
from ._layout import P_CONTROL_P as P_CONTROL_P
from ._layout import P_DAMPING_CONSTANT as P_DAMPING_CONSTANT
from ._layout import P_GRAVITY_LOAD as P_GRAVITY_LOAD
from ._layout import P_INERTIA as P_INERTIA
from ._layout import P_KIND as P_KIND
from ._layout import P_LOAD as P_LOAD
from ._layout import P_MAX_FORCE as P_MAX_FORCE
from ._layout import P_MAX_POSITION as P_MAX_POSITION
from ._layout import P_MAX_STOP as P_MAX_STOP
from ._layout import P_MAX_VELOCITY as P_MAX_VELOCITY
from ._layout import P_MIN_POSITION as P_MIN_POSITION
from ._layout import P_MIN_STOP as P_MIN_STOP
from ._layout import P_PARENT as P_PARENT
from ._layout import P_POSITION as P_POSITION
from ._layout import P_SPRING_CONSTANT as P_SPRING_CONSTANT
from ._layout import P_STATIC_FRICTION as P_STATIC_FRICTION
from ._layout import PARALLEL_BLOCK as PARALLEL_BLOCK
from ._layout import S_ACCELERATION as S_ACCELERATION
from ._layout import S_ACCELERATION_LIMIT as S_ACCELERATION_LIMIT
from ._layout import S_CACHE as S_CACHE
from ._layout import S_CACHE_H as S_CACHE_H
from ._layout import S_CONTROL_MODE as S_CONTROL_MODE
from ._layout import S_CONTROL_P as S_CONTROL_P
from ._layout import S_FORCE_COMMAND as S_FORCE_COMMAND
from ._layout import S_MOTOR_FORCE as S_MOTOR_FORCE
from ._layout import S_MOTOR_FORCE_FEEDBACK as S_MOTOR_FORCE_FEEDBACK
from ._layout import S_POSITION as S_POSITION
from ._layout import S_TARGET_POSITION as S_TARGET_POSITION
from ._layout import S_TARGET_VELOCITY as S_TARGET_VELOCITY
from ._layout import S_TIME as S_TIME
from ._layout import S_VC as S_VC
from ._layout import S_VELOCITY as S_VELOCITY
from ._layout import S_WORK as S_WORK
from ._layout import SUBSTEP_OMEGA_MAX as SUBSTEP_OMEGA_MAX
from ._layout import SUBSTEP_P_MAX as SUBSTEP_P_MAX
from ._layout import FloatArray as FloatArray
from ._stepping import step_joints as step_joints
from ._stepping import step_joints_general as step_joints_general
from ._stepping import step_joints_parallel as step_joints_parallel
