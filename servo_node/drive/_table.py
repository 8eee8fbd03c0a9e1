"""The backend table: ``servo.drive.backend`` name → the :class:`~._base.Drive` subclass, imported when used.

As python-can finds its interfaces (``can.interfaces.BACKENDS``, imported lazily by ``can.interface``): the
table names a module and a class, and nothing is imported until a backend is asked for. A backend whose module
or optional dependency is missing is a :class:`BackendUnavailableError` (a configuration error naming the
reason), never an ImportError at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING

from cyphal_common.errors import ConfigurationError

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterSpec

    from ._base import Drive

BACKENDS: Mapping[str, str] = {
    "sim": "servo_node.drive.sim:SimDrive",
    "udral": "servo_node.drive.udral:UdralDrive",
    "cia402": "servo_node.drive.cia402:Cia402Drive",
    "odrive": "servo_node.drive.odrive:OdriveDrive",
}
"""Every drive backend: its ``servo.drive.backend`` name and ``"module:Class"``."""


class BackendUnavailableError(ConfigurationError):
    """The selected backend cannot be used here (its module or an optional dependency is missing)."""


def backend(name: str) -> type[Drive]:
    """The :class:`~._base.Drive` subclass of backend ``name``.

    :raises BackendUnavailableError: unknown name, or its module cannot be imported.
    """
    try:
        module_name, class_name = BACKENDS[name].split(":")
    except KeyError:
        raise BackendUnavailableError(
            f"servo.drive.backend {name!r} is not one of {', '.join(BACKENDS)}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as ex:
        raise BackendUnavailableError(f"servo.drive.backend {name!r} is unavailable: {ex}") from ex
    cls: type[Drive] = getattr(module, class_name)
    return cls


def require(module: str, name: str, hint: str = "") -> ModuleType:
    """Import an optional dependency of backend ``name``.

    :raises BackendUnavailableError: it is not installed (the message says what to install).
    """
    try:
        return importlib.import_module(module)
    except ImportError as ex:
        raise BackendUnavailableError(
            f"servo.drive.backend {name!r} needs the Python package {module!r}, which cannot be imported ({ex})"
            + (f"; {hint}" if hint else "")
        ) from ex


def _importable() -> list[type[Drive]]:
    """The backends whose modules import (one that does not declares nothing: selecting it is the error)."""
    found = []
    for name in BACKENDS:
        try:
            found.append(backend(name))
        except BackendUnavailableError:
            continue
    return found


def backend_register_specs() -> dict[str, RegisterSpec]:
    """The registers of every backend (declared whichever is selected, so that one can be set up before use)."""
    return {k: v for cls in _importable() for k, v in cls.register_specs().items()}


def backend_ports() -> dict[str, str]:
    """The ports of every backend (``uavcan.pub.drive_setpoint``) and their types."""
    return {k: v for cls in _importable() for k, v in cls.ports().items()}
