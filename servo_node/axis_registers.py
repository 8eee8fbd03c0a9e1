"""Names of one axis's ports and registers, and a view of the registry that reads them by their plain names.

A node with one axis (``servo.axes`` empty, the default) uses the names of the README unchanged. A node hosting
several axes lists them in ``servo.axes`` (e.g. ``"left right"``) and, following UDRAL's "port name prefixes"
(``reg/udral/README.md``: a service instance prefixes its port names), each axis prefixes everything it owns
with ``<axis>.``:

=====================================  ===========================================
single axis                            axis ``left`` of a multi-axis node
=====================================  ===========================================
``uavcan.sub.setpoint_servo.id``       ``uavcan.sub.left.setpoint_servo.id``
``uavcan.pub.dynamics.id``             ``uavcan.pub.left.dynamics.id``
``uavcan.pub.drive_setpoint.id``       ``uavcan.pub.left.drive_setpoint.id``
``servo.profile.jerk``                 ``left.servo.profile.jerk`` (env ``LEFT__SERVO__PROFILE__JERK``)
``sim.inertia``                        ``left.sim.inertia``
``sys.status``                         ``left.sys.status``
=====================================  ===========================================

Node-wide registers (``uavcan.node.id``, the transport, ``servo.axes``) have no prefix. Every axis has its own
control loop, so ``servo.loop_rate`` and friends are per axis too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pycyphal.application import register

from .errors import ConfigurationError
from .registers import RESERVED_AXIS_NAMES, SPECS, ServoRegistry

AXIS_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
"""What an axis name looks like: it becomes a register name component and an environment variable part."""

RESERVED = frozenset(RESERVED_AXIS_NAMES)
"""Axis names that would collide with the unprefixed register namespaces."""

NODE_REGISTERS = frozenset({"servo.axes", "servo.time_sync"})
"""Application registers of the node, not of an axis (never prefixed)."""


@dataclass(frozen=True)
class AxisNames:
    """The naming scheme of one axis; ``axis=""`` is the single, unprefixed axis."""

    axis: str = ""

    def port(self, name: str) -> str:
        """Port name as pycyphal resolves it (``uavcan.<sub|pub>.<this>.id``)."""
        return f"{self.axis}.{name}" if self.axis else name

    def register(self, name: str) -> str:
        """Application register name (``servo.*``, ``sim.*``, ``sys.*``)."""
        return f"{self.axis}.{name}" if self.axis else name

    @property
    def label(self) -> str:
        """For log lines and diagnostics: ``"left: "`` or nothing."""
        return f"{self.axis}: " if self.axis else ""


def parse_axes(text: str) -> list[AxisNames]:
    """The axes named by ``servo.axes`` (space or comma separated); empty: one unprefixed axis.

    :raises ConfigurationError: a name is malformed, reserved or repeated.
    """
    names = [n for n in re.split(r"[\s,]+", text.strip()) if n]
    if not names:
        return [AxisNames()]
    for n in names:
        if not AXIS_NAME.match(n) or n in RESERVED:
            raise ConfigurationError(f"servo.axes: {n!r} is not a usable axis name ([a-z][a-z0-9_]*, not reserved)")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"servo.axes: repeated axis name in {text!r}")
    return [AxisNames(n) for n in names]


class AxisRegisters:
    """The registers of one axis, read by their plain names (``real("servo.profile.jerk")``)."""

    def __init__(self, registry: ServoRegistry, names: AxisNames) -> None:
        self.registry = registry
        self.names = names

    def declare(self) -> None:
        """Create this axis's prefixed application registers that do not exist yet (defaults, then environment).

        The single axis uses the registry's own (``ServoRegistry.declare``).
        """
        if not self.names.axis:
            return
        for name in _axis_register_names():
            self.registry.setdefault(self.names.register(name), SPECS[name].default)

    def __getitem__(self, name: str, /) -> register.ValueProxy:
        """The value of this axis's register by its plain name."""
        return self.registry[self.names.register(name)]

    def real(self, name: str) -> float:
        """Scalar value of a numeric register."""
        return float(self.registry[self.names.register(name)].floats[0])

    def reals(self, name: str) -> tuple[float, ...]:
        """All values of a numeric register."""
        return tuple(float(x) for x in self.registry[self.names.register(name)].floats)

    def text(self, name: str) -> str:
        """Value of a string register."""
        return str(self.registry[self.names.register(name)].value.string.value.tobytes().decode(errors="replace"))

    def flag(self, name: str) -> bool:
        """Value of a bit register."""
        return bool(self.registry[self.names.register(name)].bools[0])

    def serve(self, name: str, getter: register.Registry.Assignable) -> None:
        """Expose a read-only live register (a getter) under this axis's name."""
        self.registry[self.names.register(name)] = getter


def _axis_register_names() -> Iterable[str]:
    return (n for n in SPECS if n not in NODE_REGISTERS)
