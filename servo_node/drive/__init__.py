"""Drives: where the control loop's command goes and where the measured state comes from.

- ``sim`` (default): the embedded ``sim_plant`` joint, stepped inside the loop kernel; :mod:`.sim` builds it from
  the ``sim.*`` registers.
- ``udral``: a drive on the bus speaking the UDRAL servo interface; :mod:`.cyphal` bridges the loop's ``remote``
  array and the Cyphal ports ``drive_setpoint``, ``drive_readiness`` (out) and ``drive_dynamics``,
  ``drive_feedback`` (in).
"""

from .cyphal import CyphalDrive as CyphalDrive
from .cyphal import make_drive as make_drive
from .sim import sim_joint_from_registers as sim_joint_from_registers
