"""The emulated ODrive: the simulated joint as an ODrive axis on CAN (``sim-plant --odrive NODE_ID --can IFACE``).

Modules: ``_axis`` (the CAN Simple protocol of firmware 0.6 around the joint: states, inputs, errors, watchdog,
endpoints), ``_app`` (:class:`Emulator`, its registers ``sim.odrive.*`` and the command); ``flat_endpoints.json``
names the endpoints a master reads and writes by RxSdo (this emulator's IDs, in the format of ODrive's file).
Importing it opens nothing; docs/odrive.md documents the device.
"""

from ._app import FAULT_AFTER_ENV as FAULT_AFTER_ENV
from ._app import Emulator as Emulator
from ._app import endpoints as endpoints
from ._axis import OdriveAxis as OdriveAxis
