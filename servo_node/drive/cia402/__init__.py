"""Backend ``cia402``: a CiA 402 drive on a CANopen bus, through the ``canopen`` library (:class:`Cia402Drive`).

Modules: :mod:`._registers` (``servo.drive.can.*``, ``servo.drive.canopen.*``), :mod:`._dictionary` (the standard
objects, statusword states, controlwords), :mod:`._network` (one canopen network, SYNC and cycle per bus),
:mod:`._bringup` (SDO bring-up and PDO mapping), :mod:`._drive` (the cycle, the measurements, faults, re-arm).
Importing it does not import canopen (a missing canopen is a configuration error when the backend is used).
"""

from ._drive import Cia402Drive as Cia402Drive
