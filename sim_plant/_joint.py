"""Typed Python wrappers around the numba kernels: validated parameters, one joint, and arrays of joints."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numba
import numpy as np

from sim_plant import _kernels as k

JointKind = Literal["rotational", "linear"]
_UNITS: dict[str, tuple[str, str]] = {"rotational": ("rad", "N·m"), "linear": ("m", "N")}
PARALLEL_MIN_JOINTS = 8192
"""``JointArray.step`` uses ``step_joints_parallel`` from this many joints on (if numba has more than one thread).

Measured on 2 shared cores: the serial lean loop steps 1 000 joints in ~13 µs, while a parallel launch alone costs
several µs (workqueue layer: tens of µs when the other core is busy), so below a few thousand joints serial wins.
"""


JOINT_FIELD_CONSTRAINTS: Mapping[str, tuple[Callable[[float], bool], str]] = {
    "inertia": (lambda x: x > 0.0, "> 0"),
    "max_velocity": (lambda x: x >= 0.0, ">= 0"),
    "max_force": (lambda x: x >= 0.0, ">= 0"),
    "control_p": (lambda x: x >= 0.0, ">= 0"),
    "spring_constant": (lambda x: x >= 0.0, ">= 0"),
    "damping_constant": (lambda x: x >= 0.0, ">= 0"),
    "static_friction": (lambda x: x >= 0.0, ">= 0"),
    "acceleration": (lambda x: x >= 0.0 or x == -1.0, ">= 0 or -1 (unlimited)"),
    "min_stop": (lambda x: x <= 0.0, "<= 0"),
    "max_stop": (lambda x: x >= 0.0, ">= 0"),
}
"""Constraints of single numeric :class:`JointParams` fields, beyond being finite: (predicate, text for errors).

Fields not listed take any finite value; constraints between fields (soft-limit order, initial position within
the stops) are checked by :class:`JointParams` itself. Register tables derive their write checks from this.
"""


@dataclasses.dataclass(frozen=True)
class JointParams:
    """Parameters of one simulated joint, Webots Servo field names in snake_case.

    Rotational joints use rad, rad/s, N·m and kg·m²; linear joints m, m/s, N and kg.  ``position`` is the initial
    position.  Soft limits (``min_position``/``max_position``) clip the target, hard stops (``min_stop`` ≤ 0 ≤
    ``max_stop``) can never be passed; for both pairs "both zero" means off.  ``load`` is a constant external
    force on the moved body and ``gravity_load`` the amplitude G of an extra load G·sin(q) (e.g. m·g·l of a link
    whose q = 0 points straight up).  Invalid values raise ValueError naming the field.
    """

    kind: JointKind = "rotational"
    inertia: float = 1.0
    max_velocity: float = 10.0
    max_force: float = 10.0
    control_p: float = 10.0
    acceleration: float = -1.0
    position: float = 0.0
    min_position: float = 0.0
    max_position: float = 0.0
    min_stop: float = 0.0
    max_stop: float = 0.0
    spring_constant: float = 0.0
    damping_constant: float = 0.0
    static_friction: float = 0.0
    load: float = 0.0
    gravity_load: float = 0.0

    def __post_init__(self) -> None:
        """Validate every field; the error names the offending field."""
        if self.kind not in _UNITS:
            raise ValueError(f"kind must be 'rotational' or 'linear', got {self.kind!r}")
        for f in dataclasses.fields(self):
            if f.name == "kind":
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{f.name} must be a real number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{f.name} must be finite, got {value!r}")
        for name, (ok, text) in JOINT_FIELD_CONSTRAINTS.items():
            if not ok(getattr(self, name)):
                raise ValueError(f"{name} must be {text}, got {getattr(self, name)!r}")
        if self.min_position > self.max_position:
            raise ValueError(f"min_position ({self.min_position!r}) must be <= max_position ({self.max_position!r})")
        if (self.min_stop != 0.0 or self.max_stop != 0.0) and not self.min_stop <= self.position <= self.max_stop:
            raise ValueError(f"position ({self.position!r}) must lie within [min_stop, max_stop]")

    @property
    def units(self) -> tuple[str, str]:
        """(position unit, force unit) of this joint kind."""
        return _UNITS[self.kind]

    def to_row(self) -> np.ndarray:
        """The kernel params row of this joint (parent/child set to none)."""
        row = np.zeros(k.N_PARAMS)
        row[k.P_KIND] = 0.0 if self.kind == "rotational" else 1.0
        row[k.P_INERTIA] = self.inertia
        row[k.P_MAX_VELOCITY] = self.max_velocity
        row[k.P_MAX_FORCE] = self.max_force
        row[k.P_CONTROL_P] = self.control_p
        row[k.P_ACCELERATION] = self.acceleration
        row[k.P_POSITION] = self.position
        row[k.P_MIN_POSITION] = self.min_position
        row[k.P_MAX_POSITION] = self.max_position
        row[k.P_MIN_STOP] = self.min_stop
        row[k.P_MAX_STOP] = self.max_stop
        row[k.P_SPRING_CONSTANT] = self.spring_constant
        row[k.P_DAMPING_CONSTANT] = self.damping_constant
        row[k.P_STATIC_FRICTION] = self.static_friction
        row[k.P_LOAD] = self.load
        row[k.P_GRAVITY_LOAD] = self.gravity_load
        row[k.P_PARENT] = -1.0
        row[k.P_CHILD] = -1.0
        return row


def _check_finite(name: str, value: float, allow_inf: bool = False) -> float:
    """Return value as float or raise ValueError naming the argument."""
    x = float(value)
    if math.isnan(x) or (not allow_inf and math.isinf(x)):
        raise ValueError(f"{name} must be {'a number' if allow_inf else 'finite'}, got {value!r}")
    return x


def make_arrays(joints: Sequence[JointParams], parents: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Build the (params, state) kernel arrays of the joints; parents[i] is the joint carrying joint i or −1.

    Supported chains: a root joint carries at most one child, which carries none (see ``_kernels``).
    """
    n = len(joints)
    if n == 0:
        raise ValueError("joints must not be empty")
    params = np.zeros((n, k.N_PARAMS))
    for i, jp in enumerate(joints):
        if not isinstance(jp, JointParams):
            raise ValueError(f"joints[{i}] must be JointParams, got {type(jp).__name__}")
        params[i] = jp.to_row()
    if parents is not None:
        if len(parents) != n:
            raise ValueError(f"parents must have {n} entries, got {len(parents)}")
        for i, p in enumerate(parents):
            if p == -1:
                continue
            if not 0 <= p < n or p == i:
                raise ValueError(f"parents[{i}] = {p} is not another joint's index or -1")
            if parents[p] != -1:
                raise ValueError(f"parents[{i}] = {p}: only chains of depth two are supported (joint {p} has a parent)")
            if params[p, k.P_CHILD] >= 0:
                raise ValueError(f"parents[{i}] = {p}: joint {p} already carries joint {int(params[p, k.P_CHILD])}")
            params[i, k.P_PARENT] = p
            params[p, k.P_CHILD] = i
    state = np.zeros((n, k.N_STATE))
    for i in range(n):
        k.reset_state(params, state, i)
    return params, state


class JointArray:
    """Many joints stepped together by one kernel call; commands take the joint index first."""

    def __init__(self, joints: Sequence[JointParams], parents: Sequence[int] | None = None) -> None:
        """Create the joints at rest at their initial positions, under position control holding them."""
        self.joints: tuple[JointParams, ...] = tuple(joints)
        self.params, self.state = make_arrays(self.joints, parents)
        # Same results either way; threads pay off only for large arrays (a parallel launch costs microseconds and a
        # preempted worker stalls the whole step on a busy machine).
        self._parallel = len(self.joints) >= PARALLEL_MIN_JOINTS and numba.get_num_threads() > 1

    def __len__(self) -> int:
        """Number of joints."""
        return self.params.shape[0]

    def _index(self, i: int) -> int:
        """Validate a joint index."""
        if not 0 <= i < len(self):
            raise IndexError(f"joint index {i} out of range 0..{len(self) - 1}")
        return i

    def set_position(self, i: int, position: float) -> None:
        """Target position of joint i (±inf: velocity control); restores position control after set_force."""
        k.command_position(self.params, self.state, self._index(i), _check_finite("position", position, True))

    def set_velocity(self, i: int, velocity: float) -> None:
        """Desired velocity Vd of joint i (clipped to ±max_velocity); the sign matters only in velocity control."""
        k.set_desired_velocity(self.params, self.state, self._index(i), _check_finite("velocity", velocity))

    def set_acceleration(self, i: int, acceleration: float) -> None:
        """Acceleration limit A of joint i; −1 means unlimited."""
        a = _check_finite("acceleration", acceleration)
        if a < 0.0 and a != -1.0:
            raise ValueError(f"acceleration must be >= 0 or -1 (unlimited), got {acceleration!r}")
        k.command_acceleration(self.params, self.state, self._index(i), a)

    def set_motor_force(self, i: int, force: float) -> None:
        """Available motor force of joint i, clipped to [0, max_force]."""
        f = _check_finite("motor_force", force)
        if f < 0.0:
            raise ValueError(f"motor_force must be >= 0, got {force!r}")
        k.command_motor_force(self.params, self.state, self._index(i), f)

    def set_control_p(self, i: int, p: float) -> None:
        """P gain of joint i's position controller."""
        x = _check_finite("control_p", p)
        if x < 0.0:
            raise ValueError(f"control_p must be >= 0, got {p!r}")
        k.command_control_p(self.params, self.state, self._index(i), x)

    def set_force(self, i: int, force: float) -> None:
        """Force control of joint i: apply force (clipped to the current motor force) with P-controller and motor off.

        As in Webots the force stays applied on every following step until ``set_position`` restores position
        control; it need not be repeated each step.
        """
        k.command_force(self.params, self.state, self._index(i), _check_finite("force", force))

    def step(self, dt: float) -> None:
        """Advance simulated time by dt [s] (internally sub-stepped as accuracy needs)."""
        x = _check_finite("dt", dt)
        if x < 0.0:
            raise ValueError(f"dt must be >= 0, got {dt!r}")
        if self._parallel:
            k.step_joints_parallel(self.params, self.state, x)
        else:
            k.step_joints(self.params, self.state, x)

    @property
    def positions(self) -> np.ndarray:
        """Positions [rad or m] of all joints (read-only view)."""
        return self._view(k.S_POSITION)

    @property
    def velocities(self) -> np.ndarray:
        """Velocities [rad/s or m/s] of all joints (read-only view)."""
        return self._view(k.S_VELOCITY)

    @property
    def accelerations(self) -> np.ndarray:
        """Mean accelerations over the last internal substep [rad/s² or m/s²] (read-only view)."""
        return self._view(k.S_ACCELERATION)

    @property
    def motor_force_feedbacks(self) -> np.ndarray:
        """Force each motor used in the last substep [N·m or N] (read-only view)."""
        return self._view(k.S_MOTOR_FORCE_FEEDBACK)

    def _view(self, column: int) -> np.ndarray:
        """A read-only view of one state column."""
        v = self.state[:, column]
        v.flags.writeable = False
        return v


class Joint:
    """One simulated joint with the Webots Servo API (a thin wrapper owning 1-row kernel arrays)."""

    def __init__(self, params: JointParams) -> None:
        """Create the joint at rest at ``params.position``, under position control holding it."""
        if not isinstance(params, JointParams):
            raise ValueError(f"params must be JointParams, got {type(params).__name__}")
        self.params = params
        self._params, self._state = make_arrays([params])

    @staticmethod
    def warm_up(params: JointParams) -> None:
        """Compile or load every numba kernel a joint's commands and steps use, on a scratch joint (slow on a cold
        cache): a process calls it before its first real step, ``servo-node warmup`` to fill the cache."""
        j = Joint(params)
        j.set_position(math.inf)
        j.set_velocity(0.0)
        j.set_motor_force(params.max_force)
        j.set_acceleration(params.acceleration)
        j.set_control_p(params.control_p)
        j.step(1e-3)
        j.set_force(0.0)
        j.step(1e-3)
        j.set_position(params.position)
        j.step(1e-3)

    def __repr__(self) -> str:
        """Position, velocity and feedback with the units of the joint kind."""
        pu, fu = self.params.units
        return (
            f"Joint({self.params.kind}, position={self.position:.6g} {pu}, velocity={self.velocity:.6g} {pu}/s, "
            f"motor_force_feedback={self.motor_force_feedback:.6g} {fu})"
        )

    def set_position(self, position: float) -> None:
        """Target position (±inf: velocity control); restores position control after set_force."""
        k.command_position(self._params, self._state, 0, _check_finite("position", position, True))

    def set_velocity(self, velocity: float) -> None:
        """Desired velocity Vd (clipped to ±max_velocity); its sign matters only in velocity control."""
        k.set_desired_velocity(self._params, self._state, 0, _check_finite("velocity", velocity))

    def set_acceleration(self, acceleration: float) -> None:
        """Acceleration limit A of the controller's target velocity; −1 means unlimited."""
        a = _check_finite("acceleration", acceleration)
        if a < 0.0 and a != -1.0:
            raise ValueError(f"acceleration must be >= 0 or -1 (unlimited), got {acceleration!r}")
        k.command_acceleration(self._params, self._state, 0, a)

    def set_motor_force(self, force: float) -> None:
        """Available motor force, clipped to [0, max_force]; 0 makes the joint passive."""
        f = _check_finite("motor_force", force)
        if f < 0.0:
            raise ValueError(f"motor_force must be >= 0, got {force!r}")
        k.command_motor_force(self._params, self._state, 0, f)

    def set_control_p(self, p: float) -> None:
        """P gain of the position controller."""
        x = _check_finite("control_p", p)
        if x < 0.0:
            raise ValueError(f"control_p must be >= 0, got {p!r}")
        k.command_control_p(self._params, self._state, 0, x)

    def set_force(self, force: float) -> None:
        """Force control: apply force (clipped to the current motor force); P-controller and motor off.

        As in Webots the force stays applied on every following step until ``set_position`` restores position
        control; it need not be repeated each step.
        """
        k.command_force(self._params, self._state, 0, _check_finite("force", force))

    def step(self, dt: float) -> None:
        """Advance simulated time by dt [s] (internally sub-stepped as accuracy needs)."""
        if not dt >= 0.0 or dt == math.inf:
            raise ValueError(f"dt must be finite and >= 0, got {dt!r}")
        k.step_joints(self._params, self._state, dt)

    @property
    def position(self) -> float:
        """Position [rad or m]."""
        return float(self._state[0, k.S_POSITION])

    @property
    def velocity(self) -> float:
        """Velocity [rad/s or m/s]."""
        return float(self._state[0, k.S_VELOCITY])

    @property
    def acceleration(self) -> float:
        """Mean acceleration over the last internal substep [rad/s² or m/s²]."""
        return float(self._state[0, k.S_ACCELERATION])

    @property
    def motor_force_feedback(self) -> float:
        """Force the motor used in the last substep [N·m or N]; not spring, damper or set_force (0 then)."""
        return float(self._state[0, k.S_MOTOR_FORCE_FEEDBACK])

    @property
    def time(self) -> float:
        """Simulated time [s] since creation."""
        return float(self._state[0, k.S_TIME])
