"""The drive interface: what the control loop measures from and commands to, whatever the drive is.

A drive is two halves. The numba half is a pair of kernels the loop calls every tick through
:mod:`._dispatch` (``measure``: fill p, v, a, f and freshness; ``command``: apply the law's output), working on
the drive's :class:`DriveArrays`. The Python half (:class:`Drive`) owns those arrays and any I/O (a bus link),
with idempotent :meth:`Drive.start`/:meth:`Drive.close`. Adding a drive means one new module with both halves and
one line in :mod:`._dispatch`; the loop's tick does not change.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

import numpy as np

DRIVE_SIM = 0.0
"""The embedded ``sim_plant`` joint, stepped inside the loop (:mod:`.sim`)."""
DRIVE_REMOTE = 1.0
"""A drive on the bus, bridged through the seqlocked ``rx``/``tx`` arrays (:mod:`.cyphal`, :mod:`._remote_link`)."""


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
    """Python half of a drive: owns its :class:`DriveArrays` and its I/O."""

    kind: float
    """``DRIVE_*`` of this drive; selects its kernels in :mod:`._dispatch`."""

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
