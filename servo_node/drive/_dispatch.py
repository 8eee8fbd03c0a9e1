"""The loop's kernels by link shape: ``measure``/``command`` of the embedded joint or of the bus link.

Every backend has one of these two shapes (:attr:`~._base.Drive.kind`); a backend on a bus only needs the
shared link (:mod:`._remote_link`), so adding one changes nothing here.
"""

from __future__ import annotations

import numpy as np

from .._jit import tick_jit
from . import _remote_link as remote
from ._base import DRIVE_SIM, DriveArrays
from .sim import _kernels as sim


@tick_jit
def measure(
    kind: float,
    d: DriveArrays,
    now: float,
    dt: float,
    period: float,
    started: float,
    feedback_timeout: float,
    meas: np.ndarray,
) -> None:
    """Fill ``meas`` (p, v, a, f, fresh, age) for this tick, ``dt`` after the last one (the loop's ``period``
    apart when on time); fresh: 1 yes, 0 silent too long, −1 not heard yet."""
    if kind == DRIVE_SIM:
        sim.measure(d, dt, period, meas)
    else:
        remote.measure(d, now, started, feedback_timeout, meas)


@tick_jit
def command(
    kind: float,
    d: DriveArrays,
    now: float,
    period: float,
    engaged: bool,
    torque: bool,
    v_cmd: float,
    f_cmd: float,
    f_lim: float,
    ref: np.ndarray,
) -> None:
    """Apply the control law's output (``v_cmd`` or ``f_cmd`` within ``f_lim``), or release the drive; ``period``:
    the loop's, over which a velocity command is reached; ``ref``: the reference (p, v, a, j) when the command takes
    effect and one hold later (a bus drive closing its own position loop is given it)."""
    if kind == DRIVE_SIM:
        sim.command(d, engaged, torque, v_cmd, f_cmd, f_lim, period)
    else:
        remote.command(d, now, engaged, v_cmd, f_cmd, ref)
