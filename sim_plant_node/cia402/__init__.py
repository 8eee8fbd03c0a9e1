"""The emulated CiA 402 drive: the simulated joint as a CANopen device (``sim-plant --canopen NODE_ID --can IFACE``).

Modules: ``_statemachine`` (the CiA 402 state machine as pure logic), ``_objects`` (the EDS and the objects the
emulator implements), ``_drive`` (state machine actions, modes, scaling and faults around the joint), ``_node`` (the
canopen ``LocalNode`` glue: PDOs, SYNC, heartbeat consumer, NMT), ``_app`` (:class:`Emulator` and the command).
Importing the package imports canopen but opens nothing; ``docs/cia402.md`` documents the device.
"""

from ._app import DEFAULT_COUNTS_PER_UNIT as DEFAULT_COUNTS_PER_UNIT
from ._app import FAULT_AFTER_ENV as FAULT_AFTER_ENV
from ._app import FIXED_MAPPING_ENV as FIXED_MAPPING_ENV
from ._app import Emulator as Emulator
from ._objects import eds_path as eds_path
