"""Control: the trajectory reference, the control law and the drive command, ticking in a GIL-free thread.

:class:`ControlLoop` is the typed face of one axis's loop; :class:`ControlThread` the real-time thread that ticks
one or more loops; :mod:`._kernel` the numba tick, whose stages live in :mod:`._stages`;
:mod:`._layout` the shared arrays; :mod:`._link` the model of a bus drive's link (delays, prediction);
:mod:`._stop` the stop to rest and the deadman test both share; :mod:`._mimic` all of mimic's mathematics
(the relation, gear-in, following a leader, its reference frame), fed through :mod:`._leader` (a thread-safe
store of the leader's samples, and the mimic report read back).
"""

from ._leader import LeaderInput as LeaderInput
from ._leader import MimicSample as MimicSample
from ._loop import ControlLoop as ControlLoop
from ._loop import Envelope as Envelope
from ._loop import LinkStats as LinkStats
from ._loop import LoopConfig as LoopConfig
from ._loop import LoopSample as LoopSample
from ._mimic import Relation as Relation
from ._thread import ControlThread as ControlThread
