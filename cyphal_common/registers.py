"""Validated application registers, shared by both applications: a spec table and a registry that enforces it.

An application declares its registers as a mapping ``name → RegisterSpec`` (default value and a validator built
from :func:`scalar`, :func:`pair`, :func:`choice`, …) and opens a :class:`ValidatingRegistry` over it: defaults
and ``NAME__WITH__UNDERSCORES`` environment overrides are applied as pycyphal does, and a write that breaks a
constraint or is not finite is refused (the old value stays), counted, and reported through ``on_refused``.

Imports ``pycyphal.application``, which imports the ``uavcan`` namespace: compile the DSDL first
(:func:`cyphal_common.dsdl.ensure_compiled`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pycyphal.application import register
from pycyphal.application._registry_factory import SimpleRegistry
from pycyphal.application.register import Value, ValueConversionError, ValueProxy

Validator = Callable[[ValueProxy], str | None]
"""Returns None if the value is acceptable, else a human-readable reason."""


class RefusedWriteError(ValueConversionError):
    """A register write was refused by its validator; the old value stays."""


def show(v: ValueProxy) -> str:
    """A register value as a user would type it."""
    if v.value.string is not None:
        return repr(v.value.string.value.tobytes().decode(errors="replace"))
    return str([float(f"{x:.7g}") for x in v.floats])


def finite(v: ValueProxy) -> str | None:
    """Every element is finite."""
    return None if all(math.isfinite(x) for x in v.floats) else "not finite"


def all_of(*checks: Validator) -> Validator:
    """The first reason any of the checks gives, in order."""

    def check(v: ValueProxy) -> str | None:
        for c in checks:
            reason = c(v)
            if reason:
                return reason
        return None

    return check


def scalar(pred: Callable[[float], bool], text: str) -> Validator:
    """One finite value satisfying ``pred``; ``text`` states the constraint for the refusal message."""

    def check(v: ValueProxy) -> str | None:
        fl = v.floats
        return None if len(fl) == 1 and pred(fl[0]) else f"must be a single value {text}"

    return all_of(finite, check)


def pair(pred: Callable[[float, float], bool], text: str) -> Validator:
    """Two finite values satisfying ``pred``."""

    def check(v: ValueProxy) -> str | None:
        fl = v.floats
        return None if len(fl) == 2 and pred(fl[0], fl[1]) else f"must be two values {text}"

    return all_of(finite, check)


def choice(*options: str) -> Validator:
    """A string equal to one of ``options``."""

    def check(v: ValueProxy) -> str | None:
        s = v.value.string.value.tobytes().decode(errors="replace") if v.value.string is not None else None
        return None if s in options else f"must be one of {', '.join(options)}"

    return check


def anything(_v: ValueProxy) -> str | None:
    """No constraint (e.g. a bit)."""
    return None


def real32(*x: float) -> Value:
    """A ``real32`` value (array of the given elements)."""
    return Value(real32=register.Real32(list(x)))


def real64(*x: float) -> Value:
    """A ``real64`` value (array of the given elements)."""
    return Value(real64=register.Real64(list(x)))


def string(s: str) -> Value:
    """A string value."""
    return Value(string=register.String(s))


def bit(*b: bool) -> Value:
    """A bit value (array of the given elements)."""
    return Value(bit=register.Bit(list(b)))


@dataclass(frozen=True)
class RegisterSpec:
    """One application register: default value and write constraint."""

    default: Value
    validator: Validator


def declare(registry: register.Registry, specs: Mapping[str, RegisterSpec]) -> None:
    """Create the registers of ``specs`` missing from any pycyphal registry, then check every one of them.

    Unlike :meth:`ValidatingRegistry.declare` this also checks values that were already stored (the register
    file), so an application that reads its registers once at startup fails there, naming the register.

    :raises ValueError: a register breaks its constraint; the message starts with ``register <name>:``.
    """
    for name, spec in specs.items():
        try:
            value = registry.setdefault(name, spec.default)
        except ValueError as ex:
            raise ValueError(f"register {name}: {ex}") from None
        reason = spec.validator(value)
        if reason is not None:
            raise ValueError(f"register {name}: {reason} (got {show(value)})")


class ValidatingRegistry(SimpleRegistry):
    """pycyphal's registry plus per-register write validation against a table of :class:`RegisterSpec`.

    Registers not in the table (``uavcan.*``, port-IDs, read-only ``sys.*``) behave exactly as in pycyphal.
    """

    def __init__(
        self,
        register_file: str | Path | None,
        specs: Mapping[str, RegisterSpec],
        environment_variables: Mapping[str, str] | None = None,
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        """Open the register file (None: in memory); call :meth:`declare` to create the table's registers.

        :param environment_variables: the overrides (pycyphal reads ``os.environ`` if None).
        :param on_refused: called with (register name, reason) for every refused write.
        :raises RefusedWriteError: an environment variable breaks the constraint of a register already stored.
        """
        self.specs = specs
        self.refused_writes = 0
        self.on_refused = on_refused
        super().__init__(register_file, dict(environment_variables) if environment_variables is not None else None)

    def declare(self) -> None:
        """Create the table's registers that do not exist yet (defaults, then environment overrides).

        :raises ValueError: an environment variable or the register file holds a value that breaks a constraint.
        """
        for name, spec in self.specs.items():
            try:
                self.setdefault(name, spec.default)
            except RefusedWriteError as ex:
                raise ValueError(f"register {name}: {ex}") from None

    def __setitem__(self, name: str, value: register.Registry.Assignable) -> None:
        spec = self.specs.get(name)
        if spec is not None and not callable(value) and name in set(self):
            candidate = ValueProxy(self[name].value)
            candidate.assign(value)
            reason = spec.validator(candidate)
            if reason is not None:
                self.refused_writes += 1
                if self.on_refused is not None:
                    self.on_refused(name, reason)
                raise RefusedWriteError(f"{name}: {reason}; kept {show(self[name])}")
        super().__setitem__(name, value)

    def setdefault(self, key: str, default: register.Registry.Assignable | None = None) -> register.ValueProxyWithFlags:
        """Create with validation: an invalid override from the environment is refused like a bad write."""
        created = key not in set(self)
        out = super().setdefault(key, default)
        spec = self.specs.get(key)
        if created and spec is not None:
            reason = spec.validator(out)
            if reason is not None:
                raise RefusedWriteError(f"{reason} (got {show(out)})")
        return out

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
