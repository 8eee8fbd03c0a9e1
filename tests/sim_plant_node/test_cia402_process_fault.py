"""The fault injection of the command itself: ``SIM_PLANT_CANOPEN_FAULT_AFTER`` makes a separate ``sim-plant
--canopen`` process raise its over-current fault on the ``udpmc:`` bus; canopen's master sees it and resets it."""

from __future__ import annotations

from pathlib import Path

from sim_plant_node.cia402 import FAULT_AFTER_ENV

from .canopen_master import COUNTS, Master, emulator_process, private_udpmc_iface
from .conftest import SIM_PLANT, clean_env

NODE_ID = 77


def test_injected_fault_from_the_environment(tmp_path: Path) -> None:
    iface = private_udpmc_iface()
    env = clean_env(**{FAULT_AFTER_ENV: "0.3", "SIM__INERTIA": "0.5"})
    with emulator_process(SIM_PLANT, iface, NODE_ID, env, tmp_path / "sim_plant.log"):
        master = Master(iface, NODE_ID)
        try:
            master.wait_for_drive(timeout=120.0, boot=True)
            master.bring_up()
            node = master.node
            node.op_mode = "CYCLIC SYNCHRONOUS VELOCITY"
            node.rpdo[3]["Target velocity"].raw = round(1.0 * COUNTS)
            node.state = "OPERATION ENABLED"
            emcy = node.emcy.wait(0x2310, timeout=30.0)
            assert emcy is not None
            master.wait("FAULT", lambda: node.state == "FAULT")
            assert node.sdo[0x603F].raw == 0x2310 and node.sdo[0x1001].raw & 0x03 == 0x03
            master.wait("rest", lambda: master.velocity() == 0.0)
            node.rpdo[3]["Target velocity"].raw = 0
            node.reset_from_fault()
            assert node.state == "OPERATION ENABLED"  # Once per process: no second fault.
            assert node.sdo[0x603F].raw == 0 and node.sdo[0x1001].raw == 0
            node.state = "SWITCH ON DISABLED"
        finally:
            master.close()
