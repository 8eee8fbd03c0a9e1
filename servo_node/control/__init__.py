"""Control: the trajectory reference, the control law and the drive command, ticking in a GIL-free thread.

:class:`ControlLoop` is the typed face of one axis's loop; :class:`ControlThread` the real-time thread that ticks
one or more loops; :mod:`._kernel` the numba tick, whose stages live in :mod:`._stages`;
:mod:`._layout` the shared arrays; :mod:`._link` the model of a bus drive's link (delays, prediction);
:mod:`._mimic` the mimic relation (following a leader; its reference frame in :mod:`._mimic_frame`), fed
through :mod:`._leader`.
"""

from ._leader import LeaderInput as LeaderInput
from ._leader import MimicSample as MimicSample
from ._leader import Relation as Relation
from ._loop import ControlLoop as ControlLoop
from ._loop import Envelope as Envelope
from ._loop import LinkStats as LinkStats
from ._loop import LoopConfig as LoopConfig
from ._loop import LoopSample as LoopSample
from ._thread import ControlThread as ControlThread
