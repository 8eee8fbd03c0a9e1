"""Coordinated motion of several servo nodes: they start together and arrive together (``servo-coord``).

:mod:`._sync` is the pure synchronisation math (which limits make each node's own time-optimal plan last the
common duration), :mod:`._segment` one move planned as the nodes will plan it; :mod:`._session` joins the bus,
reads states and limits, sends one burst of setpoints and measures the arrival (:mod:`._result`,
:mod:`._measure`: straight-line deviation, each axis's lag behind its reported plan); :mod:`._path` runs a path
of waypoints; :mod:`._axes` names the servos; :mod:`._cmd` is the command line. The nodes start a
setpoint's plan at its reception, so the axes start as close together as the burst reaches them. Importing this
package has no side effects: the generated DSDL types are imported by the functions that need them (compile them
first, ``cyphal_common.dsdl.ensure_compiled()``, as the entry point does).
"""

from ._sync import AxisMotion as AxisMotion
from ._sync import AxisPlan as AxisPlan
from ._sync import Line as Line
from ._sync import Sync as Sync
from ._sync import SyncPlan as SyncPlan
from ._sync import line_duration as line_duration
from ._sync import normalised_progress as normalised_progress
from ._sync import optimal_duration as optimal_duration
from ._sync import straight_line as straight_line
from ._sync import synchronize as synchronize
from ._sync import time_limits as time_limits
from ._sync import time_scaled as time_scaled

__all__ = [
    "AxisMotion",
    "AxisPlan",
    "Line",
    "Sync",
    "SyncPlan",
    "line_duration",
    "normalised_progress",
    "optimal_duration",
    "straight_line",
    "synchronize",
    "time_limits",
    "time_scaled",
]
