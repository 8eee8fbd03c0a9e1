"""Raw Cyphal/UDP datagrams built by hand, for hostile-input tests: no pycyphal on the sending side.

Wire format (Cyphal/UDP header version 1, as pycyphal 1.27 ``transport/udp/_frame.py`` parses it), little-endian,
24 bytes, then the payload:

====== ====== ================================================================================
offset bytes  field
====== ====== ================================================================================
0      1      version = 1 (low 4 bits), reserved
1      1      priority 0..7 (low 3 bits), reserved
2      2      source node-ID (65535: anonymous)
4      2      destination node-ID (65535: broadcast)
6      2      message: subject-ID (bit 15 clear); service: bit 15 set, bit 14 request, service-ID in bits 0..13
8      8      transfer-ID
16     4      frame index (bits 0..30), end-of-transfer (bit 31)
20     2      user data
22     2      header CRC-16/CCITT-FALSE over bytes 0..21, big-endian
====== ====== ================================================================================

The payload of every transfer ends with its CRC-32C (Castagnoli), little-endian, split across frames like the rest.
Both CRCs come from :mod:`cyphal_common.heartbeat_probe` (the containers' healthcheck reads frames too).
Messages go to 239.0.<subject-ID>, service transfers to 239.1.<destination node-ID>, UDP port 9382.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from cyphal_common.heartbeat_probe import crc16_ccitt_false, crc32c  # the one implementation of both

CYPHAL_UDP_PORT = 9382
HEADER = struct.Struct("<BBHHHQIH")
HEADER_BYTES = HEADER.size + 2
ANONYMOUS = 0xFFFF


def header(
    *,
    source: int,
    subject: int | None = None,
    service: int | None = None,
    request: bool = True,
    destination: int = ANONYMOUS,
    transfer_id: int = 0,
    index: int = 0,
    eot: bool = True,
    priority: int = 4,
    version: int = 1,
    user_data: int = 0,
    header_crc: int | None = None,
) -> bytes:
    """A 24-byte Cyphal/UDP header; ``header_crc`` overrides the computed CRC (to corrupt it)."""
    if (subject is None) == (service is None):
        raise ValueError("give exactly one of subject and service")
    port = subject if subject is not None else (1 << 15) | (int(request) << 14) | int(service or 0)
    head = HEADER.pack(version, priority, source, destination, port, transfer_id, (int(eot) << 31) | index, user_data)
    crc = crc16_ccitt_false(head) if header_crc is None else header_crc
    return head + crc.to_bytes(2, "big")


def transfer_frames(payload: bytes, mtu: int, **fields: object) -> list[bytes]:
    """The datagrams of one transfer: ``payload`` + CRC-32C split into frames of ``mtu`` bytes."""
    body = payload + crc32c(payload).to_bytes(4, "little")
    chunks = [body[i : i + mtu] for i in range(0, len(body), mtu)] or [b""]
    return [
        header(index=i, eot=i == len(chunks) - 1, **fields) + chunk  # type: ignore[arg-type]
        for i, chunk in enumerate(chunks)
    ]


def subject_group(subject: int) -> str:
    """Multicast group of a subject."""
    return f"239.0.{(subject >> 8) & 0x7F}.{subject & 0xFF}"


def service_group(destination: int) -> str:
    """Multicast group of service transfers to a node."""
    return f"239.1.{(destination >> 8) & 0xFF}.{destination & 0xFF}"


class Sender:
    """A plain UDP socket that sends datagrams to Cyphal multicast groups on the loopback interface only."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)

    def send(self, group: str, datagrams: Iterable[bytes]) -> int:
        """Send each datagram to ``group``; returns the number sent."""
        n = 0
        for d in datagrams:
            self.sock.sendto(d, (group, CYPHAL_UDP_PORT))
            n += 1
        return n

    def close(self) -> None:
        self.sock.close()


@contextmanager
def sender() -> Iterator[Sender]:
    """A :class:`Sender`, closed at the end of the block."""
    s = Sender()
    try:
        yield s
    finally:
        s.close()
