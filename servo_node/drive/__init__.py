"""Drives: where the control loop's command goes and where the measured state comes from.

Each drive is a Python object (:class:`Drive`: owns the arrays, starts/stops I/O) plus a pair of numba kernels
(``measure``/``command``) that the loop calls through :mod:`._dispatch`:

- ``sim`` (default): :class:`SimDrive`, the embedded ``sim_plant`` joint, stepped inside the loop (:mod:`.sim`);
- ``udral``: :class:`CyphalDrive`, a drive on the bus speaking the UDRAL servo interface (:mod:`.cyphal`, with
  its numba half in :mod:`._remote_link`).
"""

from ._base import Drive as Drive
from ._base import DriveArrays as DriveArrays
from .sim import SimDrive as SimDrive
