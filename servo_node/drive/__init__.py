"""Drives: where the control loop's command goes and where the measured state comes from.

Each backend (``servo.drive.backend``) is one subpackage, found through the table :data:`BACKENDS`
(:mod:`._table`) and imported only when asked for (:func:`backend`). Its :class:`Drive` subclass is the Python
half (owns the arrays, starts/stops I/O, and through class hooks declares its registers and defaults); its numba
half is one of the link shapes the loop calls through :mod:`._dispatch`:

- ``sim`` (default): :class:`SimDrive`, the embedded ``sim_plant`` joint, stepped inside the loop (:mod:`.sim`);
- ``udral``: a drive on the Cyphal bus speaking the UDRAL servo interface (:mod:`.udral`), bridged through the
  seqlocked link of :mod:`._remote_link`.
"""

from ._base import Drive as Drive
from ._base import DriveArrays as DriveArrays
from ._table import BACKENDS as BACKENDS
from ._table import BackendUnavailableError as BackendUnavailableError
from ._table import backend as backend
from ._table import require as require
from .sim import SimDrive as SimDrive
