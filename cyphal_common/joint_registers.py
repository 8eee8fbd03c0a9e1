"""The ``sim.*`` registers of a simulated joint, declared once and derived from :class:`sim_plant.JointParams`.

Both the servo node's embedded joint (``servo.drive.backend = sim``) and the ``sim-plant`` node configure their
joint with this one table: a register per :class:`~sim_plant.JointParams` field (Webots Servo field names in
snake_case), its default the field's default, its write check the field's constraint from
:data:`sim_plant.JOINT_FIELD_CONSTRAINTS`. Adding a field to ``JointParams`` adds the register to both nodes.

==========================  ======  =========  ==================================================================
Register                    Type    Default    Meaning (rotational: rad, N·m, kg·m²; linear: m, N, kg)
==========================  ======  =========  ==================================================================
``sim.kind``                string  rotational ``rotational`` or ``linear``; selects the units and the UDRAL types
``sim.inertia``             real64  1          moment of inertia or mass of the moved body, > 0
``sim.max_velocity``        real64  100        velocity limit (Webots maxVelocity), ≥ 0
``sim.max_force``           real64  100        largest motor torque/force (Webots maxForce), ≥ 0
``sim.control_p``           real64  10         P gain of the joint's position controller [1/s], ≥ 0
``sim.acceleration``        real64  −1         acceleration limit of that controller, ≥ 0, or −1 = unlimited
``sim.position``            real64  0          initial position
``sim.min_position``        real64  0          soft limits clipping the target position (both 0: off)
``sim.max_position``        real64  0
``sim.min_stop``            real64  0          hard stops the joint cannot pass, ≤ 0 and ≥ 0 (both 0: off)
``sim.max_stop``            real64  0
``sim.spring_constant``     real64  0          spring toward position 0, ≥ 0
``sim.damping_constant``    real64  0          viscous damping, ≥ 0
``sim.static_friction``     real64  0          static/Coulomb friction, ≥ 0
==========================  ======  =========  ==================================================================

Choices. Numbers are ``real64`` because the kernel computes in float64 (``sim-plant`` always declared them so;
the servo node declared a ``real32`` subset before: a register file written then keeps its stored ``real32``
values, pycyphal keeps a stored register's type and every reader here is type-agnostic). The limits default to
100 rather than ``JointParams``' 10 (a unit-test scale), as both nodes did; ``load`` and ``gravity_load``
(external loads of test benches) are not registers. Constraints between registers (soft-limit order, the initial
position within the stops) are checked when :func:`joint_params` builds the joint, not on each write, so that
the pair can be changed one register at a time.

Imports ``pycyphal.application`` (through :mod:`cyphal_common.registers`): compile the DSDL first.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, Protocol

from pycyphal.application.register import ValueProxy

from sim_plant import JOINT_FIELD_CONSTRAINTS, JointKind, JointParams

from .registers import RegisterSpec, choice, real64, scalar, string

PREFIX = "sim."
"""Register name prefix of the joint's fields."""

NOT_REGISTERS = ("load", "gravity_load")
"""``JointParams`` fields that are not registers (constant external loads: test-bench physics)."""

DEFAULT_OVERRIDES: Mapping[str, float] = {"max_velocity": 100.0, "max_force": 100.0}
"""Register defaults that differ from the ``JointParams`` defaults."""


def _spec(field: str, default: Any) -> RegisterSpec:
    """The register of one ``JointParams`` field: its default (or override) and its constraint."""
    if field == "kind":
        return RegisterSpec(string(str(default)), choice(*typing.get_args(JointKind)))
    ok, text = JOINT_FIELD_CONSTRAINTS.get(field, (lambda _x: True, "(finite)"))
    return RegisterSpec(real64(float(DEFAULT_OVERRIDES.get(field, default))), scalar(ok, text))


JOINT_SPECS: Mapping[str, RegisterSpec] = {
    PREFIX + name: _spec(name, default)
    for name, default in dataclasses.asdict(JointParams()).items()
    if name not in NOT_REGISTERS
}
"""The ``sim.*`` registers: name → default and write check (see the module docstring)."""


class RegisterLookup(Protocol):
    """Anything that returns a register's value by name (a registry, or one axis's view of it)."""

    def __getitem__(self, name: str, /) -> ValueProxy: ...


def joint_params(registry: RegisterLookup) -> JointParams:
    """The joint configured by the ``sim.*`` registers (which must exist: declare :data:`JOINT_SPECS` first).

    :raises ValueError: a register holds an invalid value; the message starts with ``register sim.<field>``.
    """
    values: dict[str, Any] = {}
    for name in JOINT_SPECS:
        field = name.removeprefix(PREFIX)
        proxy = registry[name]
        if field == "kind":
            text = proxy.value.string.value.tobytes().decode(errors="replace") if proxy.value.string else None
            values[field] = text
        else:
            floats = proxy.floats
            if len(floats) != 1:
                raise ValueError(f"register {name} must hold a single number, got {floats!r}")
            values[field] = float(floats[0])
    try:
        return JointParams(**values)
    except ValueError as ex:
        raise ValueError(f"register {PREFIX}{ex}") from None  # JointParams names the field first.
