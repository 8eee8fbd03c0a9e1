"""The registers of the ``odrive`` backend (per axis, like every ``servo.drive.*``).

=========================================  =========  ========  ======================================================
Register                                   Type       Default   Meaning
=========================================  =========  ========  ======================================================
``servo.drive.can.iface``                  string     ""        the drive's CAN bus, ``uavcan.can.iface`` syntax:
                                                                ``socketcan:can0``, ``udpmc:GROUP[:PORT]``,
                                                                ``virtual:NAME`` (one process); shared with
                                                                ``cia402``
``servo.drive.can.bitrate``                natural32  1000000   bit rate of a real CAN interface [bit/s]
``servo.drive.odrive.node_id``             natural16  0         the ODrive axis's ``config.can.node_id``, 0..63
``servo.drive.odrive.units_per_turn``      real64     2π        servo units (rad or m) per turn of the ODrive's
                                                                position (2π: the ODrive turns the joint; a gear
                                                                n:1 between them: 2π/n; a lead screw: its lead [m]);
                                                                torque at the ODrive = force·this/2π
``servo.drive.odrive.endpoints``           string     ""        path of the firmware's ``flat_endpoints.json``: the
                                                                servo checks the firmware version against it, then
                                                                writes and reads back the watchdog through RxSdo;
                                                                "": the watchdog is the user's (odrivetool)
``servo.drive.odrive.watchdog``            real32     0.2       ``axis0.config.watchdog_timeout`` written with the
                                                                endpoints [s]: the ODrive disarms (IDLE) this long
                                                                after the servo's last command
``servo.drive.odrive.timeout``             real32     1         an answer (Get_Version, an endpoint read) and the
                                                                entry into closed loop [s]
=========================================  =========  ========  ======================================================

The drive's heartbeat silent for ``servo.drive.feedback_timeout`` is the drive lost (error 3); ``servo.drive.rate``
is the rate of the Set_Input_* frames.
"""

from __future__ import annotations

from collections.abc import Mapping

from cyphal_common.registers import RegisterSpec, anything, real32, real64, scalar, string

TWO_PI = 6.283185307179586


def specs() -> Mapping[str, RegisterSpec]:
    """The backend's registers (see the module docstring)."""
    from pycyphal.application.register import Natural16, Natural32, Value

    return {
        # The same two as the cia402 backend's (tests/node/test_backends.py checks that both declare them alike).
        "servo.drive.can.iface": RegisterSpec(string(""), anything),
        "servo.drive.can.bitrate": RegisterSpec(
            Value(natural32=Natural32([1_000_000])), scalar(lambda x: 10_000 <= x <= 1_000_000, "in 10k..1M bit/s")
        ),
        "servo.drive.odrive.node_id": RegisterSpec(
            Value(natural16=Natural16([0])), scalar(lambda x: x == int(x) and 0 <= x <= 63, "an ODrive node-ID 0..63")
        ),
        "servo.drive.odrive.units_per_turn": RegisterSpec(
            real64(TWO_PI), scalar(lambda x: x != 0.0, "≠ 0 [unit per turn] (negative: the ODrive turns the other way)")
        ),
        "servo.drive.odrive.endpoints": RegisterSpec(string(""), anything),
        "servo.drive.odrive.watchdog": RegisterSpec(real32(0.2), scalar(lambda x: 0.01 <= x <= 10, "in [0.01, 10] s")),
        "servo.drive.odrive.timeout": RegisterSpec(real32(1.0), scalar(lambda x: 0.05 <= x <= 30, "in [0.05, 30] s")),
    }
