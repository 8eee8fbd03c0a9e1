"""The start of every ``sim-plant`` mode (the joint, the arm, the CiA 402 emulator): the register file prepared,
the registry opened over the mode's registers and the environment, the configuration read from it — or one line
on stderr naming the file or the value, and exit status 2."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import TypeVar

from cyphal_common import registry_file as register_file
from cyphal_common.registers import RegisterSpec, ValidatingRegistry

T = TypeVar("T")

_logger = logging.getLogger(__name__)


def log_refused(name: str, reason: str) -> None:
    """A refused register write, in the log (it is counted by the registry too)."""
    _logger.warning("Refused a write of %s: %s", name, reason)


def open_configured(
    registry_file: str | None,
    fresh: bool,
    specs: Mapping[str, RegisterSpec],
    configure: Callable[[ValidatingRegistry], T],
) -> tuple[ValidatingRegistry, T] | None:
    """The registry and what ``configure`` reads from it; None after printing why (a bad register file or value:
    the command exits with status 2), the registry closed then."""
    try:
        register_file.prepare(registry_file, fresh=fresh, program="sim-plant")
        registry = ValidatingRegistry(registry_file, specs, dict(os.environ), on_refused=log_refused)
    except ValueError as ex:  # ConfigurationError: one line naming the file and what is wrong.
        print(f"sim-plant: {ex}", file=sys.stderr)
        return None
    try:
        return registry, configure(registry)
    except ValueError as ex:
        registry.close()
        print(f"sim-plant: {ex}", file=sys.stderr)
        return None
    except BaseException:
        registry.close()
        raise
