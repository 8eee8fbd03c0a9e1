"""Every application register of the servo node, declared in one table, with validation of writes.

Port registers (``uavcan.{pub,sub}.<port>.id``/``.type``) are created by pycyphal when the port is resolved;
the ports are listed in :data:`PORTS`. The standard ``uavcan.*`` transport and node registers are pycyphal's.

=====================================  ============  ==================  ===============================================
Register                               Type          Default             Meaning
=====================================  ============  ==================  ===============================================
``servo.profile.velocity``             real32[2]     [-10, 10]           {v_min ≤ 0, v_max > 0} [m/s or rad/s]
``servo.profile.acceleration``         real32[2]     [-50, 50]           {a_min < 0 (deceleration), a_max > 0
                                                                         (acceleration)} [m/s² or rad/s²]
``servo.profile.jerk``                 real32        500                 jerk limit > 0 [m/s³ or rad/s³]
``servo.torque_limit``                 real32        100                 default force/torque limit > 0 [N or N·m]
``servo.deadman_timeout``              real32        0.5                 setpoint expiry [second], > 0
``servo.loop_rate``                    real32        1000                control loop rate [Hz], 10..10000
``servo.loop_clock``                  string        "monotonic"         ``monotonic``: loop time is the measured clock;
                                                                         ``stepped`` (sim backend): exactly one period
                                                                         per tick, paced by the wall clock (a
                                                                         deterministic simulation)
``servo.loop_priority``               real32        0                   SCHED_FIFO priority 1..99 of the loop thread
                                                                         where permitted (root or CAP_SYS_NICE); 0: off
``servo.arrival_tolerance``            real32        0.001               |p − target| that counts as arrived
                                                                         (``sys.motion`` ``settled``)
``servo.drive.backend``                string        "sim"               ``sim`` (embedded sim_plant) or ``udral``
``servo.drive.mode``                   string        "velocity"          ``velocity`` or ``torque`` command to the drive
``servo.drive.kind``                   string        "rotational"        ``rotational`` (rad, N·m) or ``linear`` (m, N)
``servo.drive.rate``                  real32        200                 udral backend: drive setpoint rate [Hz]
``servo.drive.feedback_timeout``       real32        0.5                 remote drive silence that is an error [second]
``servo.control.velocity_gain``        real32        0                   k_p of v_cmd = v_ref + k_p·e [1/s], ≥ 0;
                                                                         0: 20 (sim), 5 (udral: tolerates ~0.2 s of
                                                                         bus round trip before the loop rings)
``servo.control.torque_gains``         real32[2]     [36, 12]            {K_p, K_d} of τ = J·a_ref + K_p·e + K_d·ė
                                                                         (critically damped for J = 1: K_d² = 4·J·K_p)
``servo.control.inertia``             real32        0                   J of the torque feed-forward; 0: sim.inertia
                                                                         (sim backend) or 1
``servo.stop.acceleration``            real32        0                   stop deceleration magnitude; 0: profile's
``servo.stop.jerk``                    real32        0                   stop jerk; 0: profile's
``servo.stop.disengage_immediately``   bit           false               skip the jerk-limited stop on expiry
``servo.dynamics_rate``                real32        50                  ``dynamics`` publication rate [Hz], > 0
``servo.axes``                         string        ""                  node-wide: axis names of a multi-axis node
                                                                         (e.g. "left right"); each axis's ports and
                                                                         registers then carry its name as a prefix
                                                                         (see :mod:`servo_node.axis_registers`)
``sim.kind``                           string        "rotational"        embedded joint kind
``sim.inertia``                        real32        1                   inertia [kg·m²] or mass [kg], > 0
``sim.max_velocity``                   real32        100                 joint velocity limit, > 0
``sim.max_force``                      real32        100                 motor force/torque limit, ≥ 0
``sim.position``                       real32        0                   initial position
``sim.min_stop``, ``sim.max_stop``     real32        0, 0                hard stops (both zero: none)
``sim.spring_constant``                real32        0                   K ≥ 0
``sim.damping_constant``               real32        0                   B ≥ 0
``sim.static_friction``                real32        0                   ≥ 0
``sys.status``                         string (ro)   —                   JSON: node and servo state, see README
=====================================  ============  ==================  ===============================================

A write that breaks a constraint or is not finite is refused (the old value stays), counted, and reported
through the ``on_refused`` callback (the node turns it into a ``uavcan.diagnostic.Record``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import _dsdl

_dsdl.ensure_compiled()  # pycyphal.application imports the uavcan namespace.

from pycyphal.application import register  # noqa: E402
from pycyphal.application._registry_factory import SimpleRegistry  # noqa: E402
from pycyphal.application.register import Value, ValueConversionError, ValueProxy  # noqa: E402

PORTS: Mapping[str, str] = {
    "uavcan.sub.setpoint_servo": "zubax.telega.ServoCommand.1.0 (or a structural supertype, e.g. Real32)",
    "uavcan.sub.readiness": "zubax.service.Readiness.1.0; unset = no arming gate",
    "uavcan.pub.feedback": "zubax.service.actuator.Feedback.1.0, after each applied setpoint and at 1 Hz",
    "uavcan.pub.status": "zubax.service.actuator.Status.1.0 at 1 Hz",
    "uavcan.pub.dynamics": "zubax.physics.dynamics.DoF3rdTs.1.0 at servo.dynamics_rate",
    "uavcan.pub.drive_setpoint": "udral backend: reg.udral.physics.dynamics.rotation.Planar / translation.Linear",
    "uavcan.pub.drive_readiness": "udral backend: reg.udral.service.common.Readiness",
    "uavcan.sub.drive_dynamics": "udral backend: …PlanarTs / …LinearTs",
    "uavcan.sub.drive_feedback": "udral backend: reg.udral.service.actuator.common.Feedback",
}
"""Every port the node may use and its type; configure with ``uavcan.<pub|sub>.<name>.id`` (65535 = off)."""

Validator = Callable[[ValueProxy], str | None]
"""Returns None if the value is acceptable, else a human-readable reason."""


class RefusedWriteError(ValueConversionError):
    """A register write was refused by its validator; the old value stays."""


def _show(v: ValueProxy) -> str:
    """A register value as a user would type it."""
    if v.value.string is not None:
        return repr(v.value.string.value.tobytes().decode(errors="replace"))
    return str([float(f"{x:.7g}") for x in v.floats])


def _finite(v: ValueProxy) -> str | None:
    return None if all(math.isfinite(x) for x in v.floats) else "not finite"


def _all(*checks: Validator) -> Validator:
    def check(v: ValueProxy) -> str | None:
        for c in checks:
            reason = c(v)
            if reason:
                return reason
        return None

    return check


def _scalar(pred: Callable[[float], bool], text: str) -> Validator:
    def check(v: ValueProxy) -> str | None:
        fl = v.floats
        return None if len(fl) == 1 and pred(fl[0]) else f"must be a single value {text}"

    return _all(_finite, check)


def _pair(pred: Callable[[float, float], bool], text: str) -> Validator:
    def check(v: ValueProxy) -> str | None:
        fl = v.floats
        return None if len(fl) == 2 and pred(fl[0], fl[1]) else f"must be two values {text}"

    return _all(_finite, check)


def _choice(*options: str) -> Validator:
    def check(v: ValueProxy) -> str | None:
        s = v.value.string.value.tobytes().decode(errors="replace")
        return None if s in options else f"must be one of {', '.join(options)}"

    return check


RESERVED_AXIS_NAMES = ("servo", "sim", "sys", "uavcan", "reg", "zubax")
"""Axis names that would collide with unprefixed register namespaces."""


def _axis_list(v: ValueProxy) -> str | None:
    words = [w for w in re.split(r"[\s,]+", v.value.string.value.tobytes().decode(errors="replace")) if w]
    ok = all(re.fullmatch(r"[a-z][a-z0-9_]*", w) and w not in RESERVED_AXIS_NAMES for w in words)
    return None if ok and len(set(words)) == len(words) else "must be distinct names [a-z][a-z0-9_]*, not reserved"


def _real(*x: float) -> Value:
    return Value(real32=register.Real32(list(x)))


def _string(s: str) -> Value:
    return Value(string=register.String(s))


@dataclass(frozen=True)
class RegisterSpec:
    """One application register: default value and write constraint."""

    default: Value
    validator: Validator


_POSITIVE = _scalar(lambda x: x > 0, "> 0")
_NONNEGATIVE = _scalar(lambda x: x >= 0, ">= 0")
_ANY_FINITE = _scalar(lambda x: True, "(finite)")

SPECS: Mapping[str, RegisterSpec] = {
    "servo.profile.velocity": RegisterSpec(_real(-10, 10), _pair(lambda a, b: a <= 0 < b, "{v_min <= 0, v_max > 0}")),
    "servo.profile.acceleration": RegisterSpec(
        _real(-50, 50), _pair(lambda a, b: a < 0 < b, "{a_min < 0, a_max > 0}")
    ),
    "servo.profile.jerk": RegisterSpec(_real(500), _POSITIVE),
    "servo.torque_limit": RegisterSpec(_real(100), _POSITIVE),
    "servo.deadman_timeout": RegisterSpec(_real(0.5), _POSITIVE),
    "servo.loop_rate": RegisterSpec(_real(1000), _scalar(lambda x: 10 <= x <= 10000, "in [10, 10000] Hz")),
    "servo.loop_clock": RegisterSpec(_string("monotonic"), _choice("monotonic", "stepped")),
    "servo.arrival_tolerance": RegisterSpec(_real(1e-3), _POSITIVE),
    "servo.loop_priority": RegisterSpec(_real(0), _scalar(lambda x: x == int(x) and 0 <= x <= 99, "in 0..99")),
    "servo.drive.backend": RegisterSpec(_string("sim"), _choice("sim", "udral")),
    "servo.drive.mode": RegisterSpec(_string("velocity"), _choice("velocity", "torque")),
    "servo.drive.kind": RegisterSpec(_string("rotational"), _choice("rotational", "linear")),
    "servo.drive.rate": RegisterSpec(_real(200), _scalar(lambda x: 1 <= x <= 1000, "in [1, 1000] Hz")),
    "servo.drive.feedback_timeout": RegisterSpec(_real(0.5), _POSITIVE),
    "servo.control.velocity_gain": RegisterSpec(_real(0), _NONNEGATIVE),
    "servo.control.torque_gains": RegisterSpec(_real(36, 12), _pair(lambda a, b: a >= 0 and b >= 0, ">= 0")),
    "servo.control.inertia": RegisterSpec(_real(0), _NONNEGATIVE),
    "servo.stop.acceleration": RegisterSpec(_real(0), _NONNEGATIVE),
    "servo.stop.jerk": RegisterSpec(_real(0), _NONNEGATIVE),
    "servo.stop.disengage_immediately": RegisterSpec(Value(bit=register.Bit([False])), lambda v: None),
    "servo.dynamics_rate": RegisterSpec(_real(50), _scalar(lambda x: 0 < x <= 1000, "in (0, 1000] Hz")),
    "servo.axes": RegisterSpec(_string(""), _axis_list),
    "sim.kind": RegisterSpec(_string("rotational"), _choice("rotational", "linear")),
    "sim.inertia": RegisterSpec(_real(1), _POSITIVE),
    "sim.max_velocity": RegisterSpec(_real(100), _POSITIVE),
    "sim.max_force": RegisterSpec(_real(100), _NONNEGATIVE),
    "sim.position": RegisterSpec(_real(0), _ANY_FINITE),
    "sim.min_stop": RegisterSpec(_real(0), _scalar(lambda x: x <= 0, "<= 0")),
    "sim.max_stop": RegisterSpec(_real(0), _scalar(lambda x: x >= 0, ">= 0")),
    "sim.spring_constant": RegisterSpec(_real(0), _NONNEGATIVE),
    "sim.damping_constant": RegisterSpec(_real(0), _NONNEGATIVE),
    "sim.static_friction": RegisterSpec(_real(0), _NONNEGATIVE),
}
"""The application registers (see the module docstring for their meaning)."""


class RegisterReader(Protocol):
    """Typed reads of application registers by their plain names (a :class:`ServoRegistry`, or one axis's view)."""

    def real(self, name: str) -> float: ...
    def reals(self, name: str) -> tuple[float, ...]: ...
    def text(self, name: str) -> str: ...
    def flag(self, name: str) -> bool: ...


def spec_for(name: str) -> RegisterSpec | None:
    """The spec of an application register, also under an axis prefix (``left.servo.profile.jerk``)."""
    spec = SPECS.get(name)
    if spec is None and "." in name:
        spec = SPECS.get(name.split(".", 1)[1])
    return spec


class ServoRegistry(SimpleRegistry):
    """pycyphal's registry plus per-register write validation, surviving in-process node restarts.

    pycyphal closes the registry when a node closes; this one ignores that so that a RESTART re-creates the
    node over the same registry, and environment variables are applied once per process (at creation), never
    over values a user wrote since. :meth:`shutdown` really closes it.
    """

    def __init__(
        self,
        register_file: str | Path | None,
        environment_variables: Mapping[str, str] | None = None,
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self.refused_writes = 0
        self.on_refused = on_refused
        super().__init__(register_file, dict(environment_variables) if environment_variables is not None else None)
        self.declare()

    def declare(self) -> None:
        """Create the application registers that do not exist yet (defaults, then environment overrides).

        :raises ValueError: an environment variable or the register file holds a value that breaks a constraint.
        """
        for name, spec in SPECS.items():
            try:
                self.setdefault(name, spec.default)
            except RefusedWriteError as ex:
                raise ValueError(f"register {name}: {ex}") from None

    def __setitem__(self, name: str, value: register.Registry.Assignable) -> None:
        spec = spec_for(name)
        if spec is not None and not callable(value) and name in set(self):
            candidate = ValueProxy(self[name].value)
            candidate.assign(value)
            reason = spec.validator(candidate)
            if reason is not None:
                self.refused_writes += 1
                if self.on_refused is not None:
                    self.on_refused(name, reason)
                raise RefusedWriteError(f"{name}: {reason}; kept {_show(self[name])}")
        super().__setitem__(name, value)

    def setdefault(self, key: str, default: register.Registry.Assignable | None = None) -> register.ValueProxyWithFlags:
        """Create with validation: an invalid override from the environment is refused like a bad write."""
        created = key not in set(self)
        out = super().setdefault(key, default)
        spec = spec_for(key)
        if created and spec is not None:
            reason = spec.validator(out)
            if reason is not None:
                raise RefusedWriteError(f"{reason} (got {_show(out)})")
        return out

    def close(self) -> None:
        """Kept open across node restarts; see :meth:`shutdown`."""

    def shutdown(self) -> None:
        """Close the storage backends for good."""
        super().close()

    def real(self, name: str) -> float:
        """Scalar value of a numeric register."""
        return float(self[name].floats[0])

    def reals(self, name: str) -> tuple[float, ...]:
        """All values of a numeric register."""
        return tuple(float(x) for x in self[name].floats)

    def text(self, name: str) -> str:
        """Value of a string register."""
        return str(self[name].value.string.value.tobytes().decode(errors="replace"))

    def flag(self, name: str) -> bool:
        """Value of a bit register."""
        return bool(self[name].bools[0])

    def factory_reset(self) -> None:
        """Delete every stored register; defaults (and environment overrides) apply again at the next restart."""
        del self["*"]
