"""Is a node alive and well? Wait for its ``uavcan.node.Heartbeat`` on Cyphal/UDP: a container healthcheck.

``python -m cyphal_common.heartbeat_probe [--node-id N] [--iface ADDR] [--timeout S]`` exits 0 once a heartbeat
from node N arrives with mode OPERATIONAL and health below WARNING, else 1 (printing what it saw). The node-ID and
the interface default to the environment the node itself runs with (``UAVCAN__NODE__ID``, ``UAVCAN__UDP__IFACE``;
``auto`` or unset: this host's own address), so ``HEALTHCHECK CMD python -m cyphal_common.heartbeat_probe`` needs
no arguments.

``--canopen N --can IFACE``: a CANopen node's heartbeat (COB-ID 0x700 + N, NMT state PRE-OPERATIONAL, OPERATIONAL or
STOPPED) on a CAN bus (``uavcan.can.iface`` syntax, e.g. ``udpmc:239.24.0.4:40404``): the healthcheck of an emulated
CiA 402 drive (``sim-plant --canopen``), which is no Cyphal node. Only this path imports python-can.

Standard library only, no DSDL and no pycyphal: a healthcheck runs every few seconds in every container, and
importing pycyphal would cost a second of CPU each time. It reads the frame as the Cyphal/UDP specification lays it
out (24-byte header with CRC-16/CCITT-FALSE, single-frame payload with CRC-32C) and drops anything that does not
check.
"""

from __future__ import annotations

import argparse
import functools
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

HEARTBEAT_SUBJECT_ID = 7509
CYPHAL_UDP_PORT = 9382
MODE_OPERATIONAL = 0
HEALTH_WARNING = 3
_HEADER = struct.Struct("<BBHHHQIH")  # version, priority, source, destination, data specifier, transfer-ID, index, user
_HEADER_SIZE = _HEADER.size + 2  # + CRC-16
_HEARTBEAT_SIZE = 7  # uptime uint32, health uint2 (padded to a byte), mode uint3 (padded), vendor-specific uint8


@dataclass(frozen=True)
class Heartbeat:
    """What one heartbeat says."""

    source: int
    uptime: int
    health: int
    mode: int

    @property
    def well(self) -> bool:
        """OPERATIONAL and health NOMINAL, ADVISORY or CAUTION."""
        return self.mode == MODE_OPERATIONAL and self.health < HEALTH_WARNING


def crc16_ccitt_false(data: bytes, crc: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE (the Cyphal/UDP header's): polynomial 0x1021, initial 0xFFFF, no reflection, no XOR."""
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


@functools.cache
def _crc32c_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, the transfer CRC): reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF."""
    table = _crc32c_table()
    crc = 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


def parse_heartbeat(datagram: bytes) -> Heartbeat | None:
    """The heartbeat in one Cyphal/UDP datagram, or None if it is not a valid single-frame heartbeat."""
    if len(datagram) < _HEADER_SIZE + _HEARTBEAT_SIZE + 4:
        return None
    version, _prio, source, _dest, specifier, _tid, index_eot, _user = _HEADER.unpack_from(datagram)
    header = datagram[:_HEADER_SIZE]
    if version != 1 or crc16_ccitt_false(header[:-2]) != int.from_bytes(header[-2:], "big"):
        return None
    if specifier != HEARTBEAT_SUBJECT_ID or index_eot != 1 << 31 or source > 0xFFFE:  # a message, frame 0, last
        return None
    payload, crc = datagram[_HEADER_SIZE:-4], datagram[-4:]
    if crc32c(payload) != int.from_bytes(crc, "little"):
        return None
    uptime = int.from_bytes(payload[0:4], "little")
    return Heartbeat(source, uptime, payload[4] & 0x03, payload[5] & 0x07)


def own_address() -> str:
    """This host's address as its name resolves (a container's address on its network)."""
    return socket.gethostbyname(socket.gethostname())


def udp_iface(value: str | None) -> str:
    """``UAVCAN__UDP__IFACE`` as the probe binds it: the first address; ``auto``/empty: :func:`own_address`."""
    first = (value or "").split()[0] if (value or "").split() else ""
    return own_address() if first in ("", "auto") else first


def wait_heartbeat(node_id: int, iface: str, timeout: float) -> tuple[Heartbeat | None, Heartbeat | None]:
    """(the first well heartbeat of ``node_id``, or None; the last heartbeat seen from it) within ``timeout``."""
    group = socket.inet_aton(f"239.0.{HEARTBEAT_SUBJECT_ID >> 8}.{HEARTBEAT_SUBJECT_ID & 0xFF}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    last: Heartbeat | None = None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((socket.inet_ntoa(group), CYPHAL_UDP_PORT))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group + socket.inet_aton(iface))
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([sock], [], [], left)[0]:
                break
            hb = parse_heartbeat(sock.recv(2048))
            if hb is not None and hb.source == node_id:
                last = hb
                if hb.well:
                    return hb, last
    finally:
        sock.close()
    return None, last


CANOPEN_HEARTBEAT_COB_BASE = 0x700
CANOPEN_ALIVE = {0x04: "STOPPED", 0x05: "OPERATIONAL", 0x7F: "PRE-OPERATIONAL"}
"""NMT states a heartbeat names once the node has booted (0x00 is the boot-up message)."""


def wait_canopen_heartbeat(node_id: int, iface: str, timeout: float) -> str | None:
    """The NMT state of the first heartbeat of CANopen node ``node_id`` on ``iface`` within ``timeout``, or None."""
    from cyphal_common.transport import open_can_bus

    bus = open_can_bus(iface)
    try:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            msg = bus.recv(left)
            if msg is not None and msg.arbitration_id == CANOPEN_HEARTBEAT_COB_BASE + node_id and len(msg.data) >= 1:
                state = CANOPEN_ALIVE.get(msg.data[0] & 0x7F)
                if state is not None:
                    return state
    finally:
        bus.shutdown()
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit 0 if the node is alive and well, 1 if not, 2 on bad arguments."""
    ap = argparse.ArgumentParser(prog="python -m cyphal_common.heartbeat_probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node-id", type=int, default=None, help="default: UAVCAN__NODE__ID")
    ap.add_argument("--iface", default=None, help="local address to listen on; default: UAVCAN__UDP__IFACE")
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (heartbeats come at 1 Hz)")
    ap.add_argument("--canopen", type=int, default=None, metavar="N", help="a CANopen node-ID instead (with --can)")
    ap.add_argument("--can", default=None, metavar="IFACE", help="the CANopen bus, uavcan.can.iface syntax")
    args = ap.parse_args(argv)
    if args.canopen is not None:
        if not 1 <= args.canopen <= 127 or not args.can:
            ap.error("--canopen takes a node-ID 1..127 and needs --can IFACE")
        state = wait_canopen_heartbeat(args.canopen, args.can, args.timeout)
        print(f"CANopen node {args.canopen}: " + (state or f"no heartbeat on {args.can} within {args.timeout} s"))
        return 0 if state is not None else 1
    node_id = args.node_id if args.node_id is not None else int(os.environ.get("UAVCAN__NODE__ID", "-1"))
    if not 0 <= node_id <= 0xFFFE:
        ap.error("give --node-id or set UAVCAN__NODE__ID")
    iface = udp_iface(args.iface if args.iface is not None else os.environ.get("UAVCAN__UDP__IFACE"))
    well, last = wait_heartbeat(node_id, iface, args.timeout)
    if well is not None:
        print(f"node {node_id}: OPERATIONAL, health {well.health}, uptime {well.uptime} s")
        return 0
    if last is None:
        print(f"node {node_id}: no heartbeat on {iface} within {args.timeout} s")
    else:
        print(f"node {node_id}: mode {last.mode}, health {last.health} (not OPERATIONAL below WARNING)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
