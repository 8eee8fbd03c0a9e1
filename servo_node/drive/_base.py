"""The drive interface: what the control loop measures from and commands to, whatever the drive is.

A drive is two halves. The numba half is a pair of kernels the loop calls every tick through
:mod:`._dispatch` (``measure``: fill p, v, a, f and freshness; ``command``: apply the law's output), working on
the drive's :class:`DriveArrays`. Which pair is the drive's *link shape* (:attr:`Drive.kind`): the embedded joint
stepped inside the tick (:data:`DRIVE_SIM`), or a drive on a bus bridged through seqlocked ``rx``/``tx`` arrays
(:data:`DRIVE_REMOTE`, :mod:`._remote_link`; its network side runs outside the tick). The Python half
(:class:`Drive`) owns those arrays and any I/O, with idempotent :meth:`Drive.start`/:meth:`Drive.close`.

A backend (``servo.drive.backend``) is one subpackage listed in :data:`servo_node.drive.BACKENDS`. Its
:class:`Drive` subclass declares, through the class-level hooks below, everything the rest of the node needs to
know about it: its registers, its link shape, what the envelope and the default gains are derived from, the
register the scope reads its unit from, and how to build it from the registers. Adding a backend touches its
subpackage and the table only. A backend's module must import without its optional dependencies (import them in
:meth:`Drive.create`, through :func:`servo_node.drive.require`), so that its registers are known and its
absence is a configuration error, not an ImportError.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from ..errors import ErrorCode

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterReader, RegisterSpec

DRIVE_SIM = 0.0
"""Link shape: the embedded ``sim_plant`` joint, stepped inside the loop (:mod:`.sim`)."""
DRIVE_REMOTE = 1.0
"""Link shape: a drive on a bus, bridged through the seqlocked ``rx``/``tx`` arrays (:mod:`._remote_link`)."""


class DriveArrays(NamedTuple):
    """The arrays of one drive. Each drive kind uses the fields it needs; the others are 1×1 placeholders."""

    params: np.ndarray
    """float64[n, N_PARAMS]: the embedded joint's parameters (sim)."""
    state: np.ndarray
    """float64[n, N_STATE]: the embedded joint's state (sim; private to the loop while it runs)."""
    rx: np.ndarray
    """Seqlocked measurement from the bus (remote; the network side is the only writer)."""
    tx: np.ndarray
    """Seqlocked command to the bus (remote; the loop is the only writer)."""
    scratch: np.ndarray
    """Loop-private copy of ``rx``."""


def placeholder() -> np.ndarray:
    """A 1×1 array for the fields a drive kind does not use (keeps one numba type for every drive)."""
    return np.zeros((1, 1))


class Drive(abc.ABC):
    """Python half of a drive: owns its :class:`DriveArrays` and its I/O; its class describes its backend."""

    kind: ClassVar[float]
    """Link shape (``DRIVE_*``); selects the drive's kernels in :mod:`._dispatch` and whether the loop models a
    bus link (:mod:`servo_node.control._link`)."""

    stepped_clock: ClassVar[bool] = False
    """The drive lives inside the loop, so ``servo.loop_clock = stepped`` may step the loop's time."""

    modes: ClassVar[tuple[str, ...]] = ("velocity", "torque")
    """The ``servo.drive.mode`` values this backend can do."""

    unit_register: ClassVar[str] = "servo.drive.kind"
    """The register naming the unit (``rotational``: rad, ``linear``: m); the scope reads it for its axes."""

    # ---------------------------------------------------------------- backend hooks (class level)

    @classmethod
    def register_specs(cls) -> Mapping[str, RegisterSpec]:
        """The backend's own application registers (declared for every axis, whichever backend is selected)."""
        return {}

    @classmethod
    def ports(cls) -> Mapping[str, str]:
        """The backend's own Cyphal ports (``uavcan.pub.drive_setpoint``) and their types, for the docs."""
        return {}

    @classmethod
    @abc.abstractmethod
    def derived_envelope(cls, reg: RegisterReader) -> tuple[float, float, float]:
        """(velocity, acceleration, force) of the envelope where ``servo.envelope.*`` hold 0.

        :raises ConfigurationError: the drive cannot move the joint as configured.
        """

    @classmethod
    def default_inertia(cls, reg: RegisterReader) -> float:
        """J of the torque feed-forward when ``servo.control.inertia`` holds 0."""
        return 1.0

    @classmethod
    @abc.abstractmethod
    def default_velocity_gain(cls, reg: RegisterReader, compensation: bool) -> float:
        """k of the velocity law [1/s] when ``servo.control.velocity_gain`` holds 0."""

    @classmethod
    def command_rate(cls, reg: RegisterReader) -> float:
        """How often the drive takes a command [Hz] (each is held that long); 0: every loop tick."""
        return 0.0

    @classmethod
    @abc.abstractmethod
    def create(cls, reg: RegisterReader, node: Any, port_prefix: str = "") -> Drive:
        """The drive of one axis from its registers (``node``: the pycyphal node; ``port_prefix``: ``"left."``
        in a multi-axis node).

        :raises ConfigurationError: the configuration is unusable or an optional dependency is missing.
        """

    # ---------------------------------------------------------------- instance

    @property
    @abc.abstractmethod
    def arrays(self) -> DriveArrays:
        """The arrays the loop's kernels work on."""

    def start(self) -> None:  # noqa: B027 - optional hook, no I/O by default
        """Begin I/O (if any); idempotent."""

    def close(self) -> None:  # noqa: B027 - optional hook, no I/O by default
        """End I/O (if any); idempotent."""

    def take_notes(self) -> list[str]:
        """What the drive has to report since the last call (diagnostics); none by default."""
        return []

    def peers(self) -> dict[str, Any]:
        """The peers the drive is pinned to, for ``sys.status``; none by default."""
        return {}

    async def stop(self) -> None:
        """End I/O after telling the drive to stand by (call once the loop has disengaged); idempotent."""
        self.close()

    def fault(self) -> tuple[ErrorCode, str] | None:
        """What keeps the drive from moving as the drive itself reports it (its code and text), else None; the axis
        holds it as its error until :meth:`rearm` clears it."""
        return None

    def events(self) -> list[str]:
        """Drive warnings since the last call, for the diagnostics."""
        return []

    def view(self) -> dict[str, Any]:
        """The drive's own part of ``sys.status`` (``drive``); empty: none."""
        return {}

    def rearm(self) -> Future[bool] | None:
        """Reset a drive fault (an explicit user command only): a future that holds True once the drive is ready
        again under the servo's control (False: it could not be made so; the reason is :meth:`fault`); None:
        nothing to re-arm for this backend."""
        return None

    def escalate(self, reason: str) -> None:  # noqa: B027 - optional hook
        """The loop's stop did not take effect (``reason``): stop the drive by whatever other channel it has; the
        drive reports what it did through :meth:`events` and :meth:`fault`. Nothing by default."""

    def home(self) -> bool:
        """Run the drive's homing (an explicit user command only, the loop disengaged); False: not possible now, or
        this backend has none."""
        return False
