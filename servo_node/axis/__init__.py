"""One servo on the bus: its ports, the setpoint intake, the follower of a leader (mimic engagement), its
configuration from the registers, its reports and counters; :class:`Axis` joins them around its control loop.

:mod:`._axis` the axis itself (ports, lifecycle), over one shared state (:mod:`._state`) and its three parts:
:mod:`._setpoints` the setpoint path (every command in, through the gate, to the loop), :mod:`._supervision`
the edges it acts on and ``status``/``dynamics``/``feedback`` out, :mod:`._views` health and the ``sys.*``
registers. Beside them: :mod:`._intake` setpoints in (decoding, validation, pinned publishers),
:mod:`._follower` a mimic leader's samples in, :mod:`._udral_face` the UDRAL servo ports, :mod:`._config` the
loop and the drive from the registers, :mod:`._reports` the ``sys.*`` views, the counters and the outgoing
messages.
"""

from ._axis import Axis as Axis
from ._counters import AxisCounters as AxisCounters
from ._supervision import SUPERVISE_PERIOD_S as SUPERVISE_PERIOD_S

__all__ = ["SUPERVISE_PERIOD_S", "Axis", "AxisCounters"]
