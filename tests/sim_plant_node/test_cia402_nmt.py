"""NMT on the emulated CiA 402 drive, from canopen's master: PDOs only in OPERATIONAL, STOPPED while enabled takes
the connection-loss reaction (quick stop to rest), a reset communication boots again with power-on parameters."""

from __future__ import annotations

import time

from sim_plant import JointParams
from sim_plant_node.cia402 import Emulator

from .canopen_master import COUNTS, Master

NODE_ID = 57
IFACE = "virtual:cia402-nmt"


def test_nmt_states() -> None:
    with Emulator(JointParams(max_velocity=100.0, max_force=100.0), NODE_ID, IFACE) as emulator:
        master = Master(IFACE, NODE_ID)
        try:
            node = master.node
            master.wait_for_drive()
            node.nmt.state = "PRE-OPERATIONAL"
            node.sdo[0x1017].raw = 20
            node.nmt.wait_for_heartbeat(timeout=30.0)
            assert node.nmt.state == "PRE-OPERATIONAL"
            node.tpdo.read()
            node.rpdo.read()
            received: list[float] = []
            node.tpdo[1].add_callback(lambda m: received.append(time.monotonic()))
            master.network.sync.start(0.005)
            time.sleep(0.2)
            assert received == []  # No PDOs before OPERATIONAL, SYNC or not.

            node.nmt.state = "OPERATIONAL"
            master.wait("TPDOs in OPERATIONAL", lambda: len(received) > 5)
            node.rpdo[3].start(0.005)
            node.sdo[0x6060].raw = 9
            node.rpdo[3]["Target velocity"].raw = round(1.0 * COUNTS)
            for cw in (0x06, 0x07, 0x0F):
                node.sdo[0x6040].raw = cw
            master.wait("moving", lambda: abs(master.velocity() - 1.0) < 1e-3)

            node.nmt.state = "STOPPED"
            master.wait("quick stop to SWITCH ON DISABLED", lambda: master.statusword() & 0x4F == 0x40)
            master.wait("rest", lambda: master.velocity() == 0.0)
            assert emulator.drive is not None and emulator.drive.transitions[-2:] == [11, 12]
            node.nmt.wait_for_heartbeat(timeout=30.0)
            assert node.nmt.state == "STOPPED"
            count = len(received)
            time.sleep(0.2)
            assert len(received) == count  # No PDOs while STOPPED.

            node.sdo[0x1800][2].raw = 5  # Changed communication parameters…
            node.nmt.state = "RESET COMMUNICATION"
            node.nmt.wait_for_bootup(timeout=30.0)
            assert node.sdo[0x1800][2].raw == 1  # …back at their power-on values.
            assert node.sdo[0x1017].raw == 0
        finally:
            master.close()
