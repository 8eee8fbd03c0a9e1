"""Validated application registers, shared by both applications: a spec table and a registry that enforces it.

An application declares its registers as a mapping ``name → RegisterSpec`` (default value and a validator built
from :func:`scalar`, :func:`pair`, :func:`choice`, …) and opens a :class:`ValidatingRegistry` over it: defaults
and ``NAME__WITH__UNDERSCORES`` environment overrides are applied as pycyphal does, and a write that breaks a
constraint or is not finite is refused (the old value stays), counted, and reported through ``on_refused``. So is
one the register's type cannot take (:mod:`cyphal_common.register_values`: NaN into a natural, 2 into a bit) and
one the register file cannot store (a full disk: the file's transaction is rolled back, nothing changes).

Imports ``pycyphal.application``, which imports the ``uavcan`` namespace: compile the DSDL first
(:func:`cyphal_common.dsdl.ensure_compiled`).
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from pycyphal.application import register
from pycyphal.application._registry_factory import SimpleRegistry
from pycyphal.application.register import Value, ValueConversionError, ValueProxy
from pycyphal.application.register.backend import BackendError

from . import registry_file
from .errors import ConfigurationError
from .register_values import unconvertible

PORT_TYPE = re.compile(r"uavcan\.(pub|sub|cln|srv)\..+\.type\Z")
"""A port's type register, ``uavcan.<pub|sub|cln|srv>.<port>.type``: the Cyphal register conventions
(``uavcan.register.Access``) make it string, immutable, persistent. pycyphal serves it from a getter (in memory,
never stored) and says "not persistent"; it is the same after every power cycle (the program's port type), so
this registry says persistent."""

Validator = Callable[[ValueProxy], str | None]
"""Returns None if the value is acceptable, else a human-readable reason."""


class RegisterReader(Protocol):
    """Typed reads of application registers by their plain names (an application's :class:`ValidatingRegistry`,
    or one axis's view of it)."""

    def __getitem__(self, name: str, /) -> ValueProxy: ...
    def real(self, name: str) -> float: ...
    def reals(self, name: str) -> tuple[float, ...]: ...
    def text(self, name: str) -> str: ...
    def flag(self, name: str) -> bool: ...



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


def natural8(*x: int) -> Value:
    """A ``natural8`` value (array of the given elements)."""
    return Value(natural8=register.Natural8(list(x)))


def natural16(*x: int) -> Value:
    """A ``natural16`` value (array of the given elements)."""
    return Value(natural16=register.Natural16(list(x)))


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


def _describe(value: object) -> str:
    """A register value's type and size as DSDL spells it (``real32[2]``, ``string``), for refusal reasons."""
    try:
        msg = value.value if isinstance(value, ValueProxy) else ValueProxy(value).value
    except (ValueConversionError, TypeError, ValueError):
        return type(value).__name__
    for name in ("empty", "string", "unstructured", "bit", "integer64", "integer32", "integer16", "integer8",
                 "natural64", "natural32", "natural16", "natural8", "real64", "real32", "real16"):  # fmt: skip
        option = getattr(msg, name, None)
        if option is not None:
            return name if name in ("empty", "string", "unstructured") else f"{name}[{len(option.value)}]"
    return "unknown"


def _size_mismatch(current: ValueProxy, source: object) -> str | None:
    """Why a numeric write of another element count is refused (pycyphal would silently truncate or zero-pad it)."""
    try:
        have = len(current.floats)
        got = len((source if isinstance(source, ValueProxy) else ValueProxy(source)).floats)
    except (ValueConversionError, TypeError, ValueError):
        return None  # Not numeric on both sides: the conversion itself decides.
    return None if have == got else f"needs {have} value{'s' if have != 1 else ''}, got {got}"


def _storage_cause(ex: Exception) -> str:
    """SQLite's own words for a failed write ("database or disk is full"), under pycyphal's wrapper."""
    return str(ex.__cause__ if isinstance(ex, BackendError) and ex.__cause__ is not None else ex)


def _conversion_reason(current: ValueProxy, source: object) -> str:
    """Why pycyphal could not assign ``source`` to a register holding ``current``."""
    return f"cannot convert {_describe(source)} to {_describe(current)}"


class _WatchedProxy(register.ValueProxyWithFlags):
    """A register value whose failed :meth:`assign` calls ``on_failure(reason)`` (if given) before raising
    :class:`~pycyphal.application.register.ValueConversionError`.

    Refused before converting: a numeric value of another element count (pycyphal would truncate or zero-pad it
    silently) and one the register's type cannot take (:func:`~cyphal_common.register_values.unconvertible`: NaN
    or 1e30 into a natural, 2 into a bit); a conversion that raises anything else is refused the same way.
    """

    def __init__(self, v: register.ValueProxyWithFlags, on_failure: Callable[[str], None] | None,
                 persistent: bool | None = None) -> None:
        super().__init__(v.value, mutable=v.mutable, persistent=v.persistent if persistent is None else persistent)
        self._on_failure = on_failure

    def assign(self, source: register.RelaxedValue) -> None:
        reason = _size_mismatch(self, source) or unconvertible(self, source)
        if reason is not None:
            self._refused(reason)
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # 1e300 → real32 is inf, refused by the validator.
                super().assign(source)
        except (ValueError, OverflowError) as ex:  # ValueConversionError, or a raw error from inside numpy/round.
            self._refused(_conversion_reason(self, source) + ("" if isinstance(ex, ValueConversionError) else
                                                              f" ({ex})"))

    def _refused(self, reason: str) -> None:
        if self._on_failure is not None:
            self._on_failure(reason)
            raise RefusedWriteError(f"{reason}; kept {show(self)}") from None
        raise RefusedWriteError(reason) from None


class ValidatingRegistry(SimpleRegistry):
    """pycyphal's registry plus per-register write validation against a table of :class:`RegisterSpec`.

    Every refused write is counted (:attr:`refused_writes`) and reported through ``on_refused``, whatever layer
    refused it: a validator of the table, another element count, or pycyphal's own type conversion — also on the
    path of ``uavcan.register.Access`` writes, where pycyphal's server converts with ``registry[name].assign(value)``
    before anything reaches :meth:`__setitem__` (:meth:`__getitem__` hands it a proxy that reports the failure; there
    a numeric write of another element count is refused for every register, pycyphal's included). Access writes to
    unknown or read-only registers are refused by :mod:`cyphal_common.register_access`, which serves Access.
    Registers not in the table (``uavcan.*``, port-IDs, read-only ``sys.*``) are otherwise pycyphal's, but for every
    register a value its type cannot take is refused (:func:`~cyphal_common.register_values.unconvertible`), and a
    write the register file cannot store (a full disk) is refused with SQLite's reason, the old value kept.
    The register file is checked read-only before it is opened (:mod:`cyphal_common.registry_file`).
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
        :raises ConfigurationError: the register file is unusable (one line naming it and what is wrong).
        """
        self.specs = specs
        self._values: dict[str, tuple[float, ...] | tuple[bool, ...] | str] = {}
        """Values of the table's registers as last read (:meth:`reals`, :meth:`text`, :meth:`flag`); every write,
        creation or deletion empties it. A read through pycyphal's backend costs about 0.1 ms (the register file,
        deserialisation, copies), and a setpoint reads its profile defaults: at 100 Hz on many axes that added up
        to several percent of a core per axis."""
        self.refused_writes = 0
        self.on_refused = on_refused
        self._creating = False
        registry_file.check(register_file)  # Read-only: a broken file is an error, never silently replaced.
        try:
            super().__init__(register_file, dict(environment_variables) if environment_variables is not None else None)
            if register_file is not None and str(register_file).strip() not in ("", ":memory:"):
                for b in self.backends:
                    db = getattr(b, "_db", None)  # pycyphal's StaticBackend (pinned <1.28) keeps its connection here.
                    if isinstance(db, sqlite3.Connection):
                        registry_file.tune(db)
        except sqlite3.Error as ex:  # Changed between the check and the open.
            raise ConfigurationError(f"register file {str(register_file)!r}: {ex}") from None

    def declare(self) -> None:
        """Create the table's registers that do not exist yet (defaults, then environment overrides).

        :raises ConfigurationError: an environment variable or the register file breaks a register's constraint.
        """
        for name, spec in self.specs.items():
            try:
                self.setdefault(name, spec.default)
            except ValueConversionError as ex:  # RefusedWriteError, or a value pycyphal cannot convert.
                raise ConfigurationError(f"register {name}: {ex}") from None

    def spec_for(self, name: str) -> RegisterSpec | None:
        """The spec that validates writes of ``name`` (subclasses map derived names, e.g. prefixed ones)."""
        return self.specs.get(name)

    def __setitem__(self, name: str, value: register.Registry.Assignable) -> None:
        self._values.clear()
        spec = self.spec_for(name)
        exists = not callable(value) and self.exists(name)
        try:  # While creating (setdefault), pycyphal applies the environment override through here.
            if exists:
                candidate = ValueProxy(self[name].value)
                reason = unconvertible(candidate, value)
                if reason is None and spec is not None:
                    reason = _size_mismatch(candidate, value)
                    if reason is None:
                        with np.errstate(over="ignore", invalid="ignore"):
                            candidate.assign(value)
                        reason = spec.validator(candidate)
                if reason is not None:
                    if self._creating:  # An environment override at creation: a configuration error, not a write.
                        raise RefusedWriteError(reason)
                    self.refuse(name, reason)
                    raise RefusedWriteError(f"{name}: {reason}; kept {show(self[name])}")
            super().__setitem__(name, value)
        except RefusedWriteError:
            raise
        except (ValueError, OverflowError) as ex:  # Wrong type or size: refused by pycyphal's conversion, counted.
            if exists:
                self.refuse(name, _conversion_reason(self[name], value))
            if isinstance(ex, ValueConversionError):
                raise
            raise ValueConversionError(f"{name}: {_conversion_reason(self[name], value)} ({ex})") from None
        except (BackendError, sqlite3.Error) as ex:  # The register file could not take it (a full disk).
            self._rollback()
            reason = f"not stored: the register file refused it ({_storage_cause(ex)}); the old value stays"
            if self._creating:
                raise ConfigurationError(f"register {name}: {reason}") from None
            self.refuse(name, reason)
            raise RefusedWriteError(f"{name}: {reason}") from None

    def _rollback(self) -> None:
        """End the register file's failed transaction: what it did not commit must not be read back (or committed
        with the next write) as if it had been stored."""
        for b in self.backends:
            db = getattr(b, "_db", None)
            if isinstance(db, sqlite3.Connection):
                try:
                    db.rollback()
                except sqlite3.Error:
                    pass

    def __getitem__(self, name: str) -> register.ValueProxyWithFlags:
        """The register, as a proxy that reports a failed ``assign`` (the path of ``uavcan.register.Access``)."""
        v = super().__getitem__(name)
        persistent = True if PORT_TYPE.match(name) else None
        if self._creating:  # An environment override: refused as a configuration error, not counted as a write.
            return _WatchedProxy(v, None, persistent)
        return _WatchedProxy(v, lambda reason: self.refuse(name, reason), persistent)

    def exists(self, name: str) -> bool:
        """Whether the register exists: one lookup per backend (listing every name made creating N registers
        O(N²): a 48-axis node's start spent seconds in it)."""
        return any(b.get(name) is not None for b in self.backends)

    def refuse(self, name: str, reason: str) -> None:
        """Count a refused write of ``name`` and report it through ``on_refused``."""
        self.refused_writes += 1
        if self.on_refused is not None:
            self.on_refused(name, reason)

    def __delitem__(self, wildcard: str) -> None:
        self._values.clear()
        super().__delitem__(wildcard)

    def setdefault(self, key: str, default: register.Registry.Assignable | None = None) -> register.ValueProxyWithFlags:
        """Create with validation: an invalid override from the environment is a configuration error."""
        self._values.clear()
        created = not self.exists(key)
        self._creating = True  # Environment overrides at creation are not writes; declare() reports them.
        try:
            out = super().setdefault(key, default)
        except ValueConversionError as ex:  # Any register, ours or pycyphal's (uavcan.*): the environment value.
            env = register.get_environment_variable_name(key)
            raw = self.environment_variables.get(env, b"").decode(errors="replace")
            why = str(ex) if isinstance(ex, RefusedWriteError) else f"cannot be converted to {_describe(default)}"
            raise ConfigurationError(f"register {key}: environment variable {env}={raw!r}: {why}") from None
        except (BackendError, sqlite3.Error) as ex:  # Created in the register file: it could not take it.
            self._rollback()
            raise ConfigurationError(f"register {key}: cannot be stored in the register file "
                                     f"({_storage_cause(ex)})") from None
        finally:
            self._creating = False
        spec = self.spec_for(key)
        if created and spec is not None:
            reason = spec.validator(out)
            if reason is not None:
                raise RefusedWriteError(f"{reason} (got {show(out)})")
        return out

    def real(self, name: str) -> float:
        """Scalar value of a numeric register."""
        return self.reals(name)[0]

    def reals(self, name: str) -> tuple[float, ...]:
        """All values of a numeric register (remembered until the next write for the table's registers)."""
        got = self._values.get(name)
        if isinstance(got, tuple):
            return got
        out = tuple(float(x) for x in self[name].floats)
        self._remember(name, out)
        return out

    def text(self, name: str) -> str:
        """Value of a string register (remembered like :meth:`reals`)."""
        got = self._values.get(name)
        if isinstance(got, str):
            return got
        out = str(self[name].value.string.value.tobytes().decode(errors="replace"))
        self._remember(name, out)
        return out

    def flag(self, name: str) -> bool:
        """Value of a bit register (remembered like :meth:`reals`)."""
        got = self._values.get("?" + name)
        if isinstance(got, tuple):
            return bool(got[0])
        out = tuple(bool(x) for x in self[name].bools)
        self._remember("?" + name, out)
        return out[0]

    def _remember(self, key: str, value: tuple[float, ...] | tuple[bool, ...] | str) -> None:
        """Only the table's registers: they are stored values that change by a write; others (the read-only
        ``sys.*``, served by getters) change by themselves."""
        if self.spec_for(key.removeprefix("?")) is not None:
            self._values[key] = value
