"""Backend ``sim``: the embedded ``sim_plant`` joint (Webots semantics), stepped inside the control loop.

Python half :class:`SimDrive` (:mod:`._drive`), numba half :mod:`._kernels`. Imports numerics only (the
``sim.*`` register table is imported when asked for), so the loop's kernels can import this package.
"""

from ._drive import SimDrive as SimDrive
from ._drive import joint_from_registers as joint_from_registers
