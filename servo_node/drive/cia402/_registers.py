"""The registers of the ``cia402`` backend (per axis, like every ``servo.drive.*``).

=========================================  =========  ========  ======================================================
Register                                   Type       Default   Meaning
=========================================  =========  ========  ======================================================
``servo.drive.can.iface``                  string     ""        the CANopen bus, ``uavcan.can.iface`` syntax:
                                                                ``socketcan:can0``, ``udpmc:GROUP[:PORT]``,
                                                                ``virtual:NAME`` (one process)
``servo.drive.can.bitrate``                natural32  1000000   bit rate of a real CAN interface [bit/s]
``servo.drive.canopen.node_id``            natural16  1         the drive's CANopen node-ID, 1..127; frames of other
                                                                node-IDs change nothing
``servo.drive.canopen.master_id``          natural16  127       this node's own CANopen node-ID (its heartbeat), one
                                                                per bus (the first axis on a bus sets it)
``servo.drive.canopen.counts_per_unit``    real64     0         position counts per unit (rad or m); velocity in
                                                                counts/s per unit/s; 0: from the drive (0x60A8/
                                                                0x60A9, else the factor group 0x6092/0x608F/0x6091,
                                                                else 10000 with a warning)
``servo.drive.canopen.rated_torque``       real64     0         N·m or N that 1000 ‰ of 0x6071/0x6077 mean; 0: read
                                                                0x6076 (mN·m or mN) from the drive
``servo.drive.canopen.sync_producer``      bit        true      this node sends SYNC on this bus (one producer per
                                                                bus; the first axis on a bus decides)
``servo.drive.canopen.heartbeat``          real32     0.1       heartbeat period of the drive and of this node [s];
                                                                each watches the other for 3 periods (the drive then
                                                                quick-stops, 0x6007 = 3)
``servo.drive.canopen.timeout``            real32     1         bring-up: each state transition [s]
``servo.drive.canopen.boot_timeout``       real32     10        how long a drive that does not answer yet is waited
                                                                for (its boot) before that is an error [s]
``servo.drive.canopen.sdo_timeout``        real32     1         an SDO answer [s]
``servo.drive.canopen.sdo_retries``        natural16  0         SDO requests asked again after a timeout
``servo.drive.canopen.homing_method``      natural16  37        CiA 402 homing method (37/35: current position;
                                                                17/18: negative/positive limit switch; …)
``servo.drive.canopen.home_offset``        real64     0         home offset 0x607C [unit]
``servo.drive.canopen.homing_speed``       real64     0         homing speed 0x6099:01 [unit/s] (:02 a quarter);
                                                                0: the drive's own (either within the envelope)
``servo.drive.canopen.homing_timeout``     real32     30        the longest a homing may take [s]
=========================================  =========  ========  ======================================================
"""

from __future__ import annotations

from collections.abc import Mapping

from cyphal_common.registers import RegisterSpec, anything, bit, real32, real64, scalar, string

COUNTS_PER_UNIT_UNSET = 0.0
"""``servo.drive.canopen.counts_per_unit`` left to the drive (:mod:`._scaling`)."""


def specs() -> Mapping[str, RegisterSpec]:
    """The backend's registers (see the module docstring)."""
    from pycyphal.application.register import Natural16, Natural32, Value

    def nat16(x: int) -> Value:
        return Value(natural16=Natural16([x]))

    node_id = scalar(lambda x: x == int(x) and 1 <= x <= 127, "a CANopen node-ID 1..127")
    return {
        "servo.drive.can.iface": RegisterSpec(string(""), anything),
        "servo.drive.can.bitrate": RegisterSpec(
            Value(natural32=Natural32([1_000_000])), scalar(lambda x: 10_000 <= x <= 1_000_000, "in 10k..1M bit/s")
        ),
        "servo.drive.canopen.node_id": RegisterSpec(nat16(1), node_id),
        "servo.drive.canopen.master_id": RegisterSpec(nat16(127), node_id),
        "servo.drive.canopen.counts_per_unit": RegisterSpec(
            real64(COUNTS_PER_UNIT_UNSET), scalar(lambda x: x >= 0, ">= 0 counts per unit (0: from the drive)")
        ),
        "servo.drive.canopen.rated_torque": RegisterSpec(real64(0), scalar(lambda x: x >= 0, ">= 0 (0: read 0x6076)")),
        "servo.drive.canopen.sync_producer": RegisterSpec(bit(True), anything),
        "servo.drive.canopen.heartbeat": RegisterSpec(
            real32(0.1), scalar(lambda x: 0.01 <= x <= 10, "in [0.01, 10] s")
        ),
        "servo.drive.canopen.timeout": RegisterSpec(real32(1.0), scalar(lambda x: 0.05 <= x <= 30, "in [0.05, 30] s")),
        "servo.drive.canopen.boot_timeout": RegisterSpec(
            real32(10.0), scalar(lambda x: 0 <= x <= 600, "in [0, 600] s")
        ),
        "servo.drive.canopen.sdo_timeout": RegisterSpec(
            real32(1.0), scalar(lambda x: 0.01 <= x <= 30, "in [0.01, 30] s")
        ),
        "servo.drive.canopen.sdo_retries": RegisterSpec(nat16(0), scalar(lambda x: x == int(x) and x <= 10, "0..10")),
        "servo.drive.canopen.homing_method": RegisterSpec(
            nat16(37), scalar(lambda x: x == int(x) and 1 <= x <= 37, "a CiA 402 homing method 1..37")
        ),
        "servo.drive.canopen.home_offset": RegisterSpec(real64(0), scalar(lambda x: True, "(finite)")),
        "servo.drive.canopen.homing_speed": RegisterSpec(real64(0), scalar(lambda x: x >= 0, ">= 0 unit/s")),
        "servo.drive.canopen.homing_timeout": RegisterSpec(
            real32(30.0), scalar(lambda x: 0.1 <= x <= 600, "in [0.1, 600] s")
        ),
    }
