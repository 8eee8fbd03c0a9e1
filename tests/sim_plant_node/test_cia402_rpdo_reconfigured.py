"""A synchronous RPDO that came before its PDO was reconfigured is not applied at the next SYNC: its data belonged to
the old configuration (canopen re-reads the map with zeroed data, which as a controlword is Disable Voltage: an
unpowered joint coasting, as a stranger's SDO write caused in ci25 and ci61)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sim_plant_node.cia402 import Emulator

from .canopen_master import Master, emulator_and_master

NODE_ID = 33
IFACE = "virtual:cia402-rpdo-reconfigured"
OPERATION_ENABLED = 0x27


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[Emulator, Master]]:
    """One emulator and a master, shared by the module."""
    with emulator_and_master(IFACE, NODE_ID) as pair:
        yield pair


def _disable_cob_id(master: Master) -> None:
    sub = master.node.sdo[0x1400][1]
    sub.raw = sub.raw | 0x80000000


def _rewrite_transmission_type(master: Master) -> None:
    master.node.sdo[0x1400][2].raw = 1


def _rewrite_mapping_count(master: Master) -> None:
    master.node.sdo[0x1600][0].raw = 2


@pytest.mark.parametrize("reconfigure", [_disable_cob_id, _rewrite_transmission_type, _rewrite_mapping_count],
                         ids=["COB-ID disabled", "transmission type rewritten", "mapping count rewritten"])
def test_an_rpdo_received_before_its_reconfiguration_is_not_applied(
        bench: tuple[Emulator, Master], reconfigure: Callable[[Master], None]) -> None:
    """Operation enabled by SDO; RPDO1 (controlword + mode, synchronous) arrives with controlword 0x0F, then the
    reconfiguration, then one SYNC: the drive stays enabled (the master's frame, a valid one, is dropped, never
    replaced by zeros)."""
    emulator, master = bench
    node = master.node
    node.nmt.state = "PRE-OPERATIONAL"
    node.sdo[0x1400][1].raw = 0x200 + NODE_ID  # Valid, synchronous RPDO1 (as the servo's bring-up sets it).
    node.sdo[0x1400][2].raw = 1
    node.sdo[0x1600][0].raw = 2
    node.rpdo.read()
    node.nmt.state = "OPERATIONAL"
    node.sdo[0x6060].raw = 9
    for cw in (0x06, 0x07, 0x0F):
        node.sdo[0x6040].raw = cw
    assert master.statusword() & 0x6F == OPERATION_ENABLED

    rpdo1 = node.rpdo[1]
    rpdo1[0].raw = 0x0F  # Controlword: Enable Operation, as the master keeps sending.
    rpdo1[1].raw = 9
    rpdo1.transmit()
    reconfigure(master)  # The SDO answer comes after the drive took the RPDO (one bus, in order).
    master.network.sync.transmit()
    assert master.statusword() & 0x6F == OPERATION_ENABLED, emulator.drive and emulator.drive.transitions[-3:]

    node.sdo[0x6040].raw = 0x00
