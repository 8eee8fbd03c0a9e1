"""Backend ``odrive``: an ODrive axis on CAN, CAN Simple protocol of firmware 0.6 (:class:`OdriveDrive`).

Modules: :mod:`._registers` (``servo.drive.can.*``, ``servo.drive.odrive.*``), :mod:`._canbus` (one python-can bus
and receive thread per iface), :mod:`._frames` (the loop's command as Set_Input_* frames, in turns and N·m),
:mod:`._state` (the heartbeat, the fault, ``sys.drive``), :mod:`._endpoints` (version and watchdog by RxSdo),
:mod:`._bringup` (bring-up and re-arm), :mod:`._drive` (the cycle and the measurements). The protocol's frames are
:mod:`cyphal_common.odrive`. Importing it does not import python-can (a missing one is a configuration error when
the backend is used). docs/odrive.md is the user's page.
"""

from ._drive import OdriveDrive as OdriveDrive
