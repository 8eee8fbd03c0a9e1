"""The scope: record servo nodes' motion from the bus, write it as CSV, draw it (``servo-node scope``).

:mod:`._trace` is the recording and its CSV (pure data); :mod:`._plot` the figure (matplotlib, optional: the
``plot`` extra); :mod:`._record` the pycyphal side (``dynamics`` subscriptions, register reads); :mod:`._cmd` the
command line. Importing this package imports neither pycyphal's generated types nor matplotlib.
"""

from ._plot import PlotUnavailableError as PlotUnavailableError
from ._plot import draw as draw
from ._plot import render as render
from ._record import ScopeError as ScopeError
from ._record import ScopeRecorder as ScopeRecorder
from ._trace import AxisTrace as AxisTrace
from ._trace import Series as Series
from ._trace import Trace as Trace
from ._trace import read_csv as read_csv
from ._trace import write_csv as write_csv

__all__ = ["AxisTrace", "PlotUnavailableError", "ScopeError", "ScopeRecorder", "Series", "Trace", "draw", "read_csv",
           "render", "write_csv"]
