"""Control: the trajectory reference, the control law and the drive command, ticking in a GIL-free thread.

:class:`ControlLoop` is the typed face; :mod:`._kernel` the numba tick; :mod:`._layout` the shared arrays.
"""

from ._loop import ControlLoop as ControlLoop
from ._loop import LoopConfig as LoopConfig
from ._loop import LoopError as LoopError
from ._loop import LoopSample as LoopSample
