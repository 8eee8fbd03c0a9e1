"""The containers' healthcheck reads heartbeats off the wire itself: pycyphal-serialized heartbeats in hand-built
Cyphal/UDP frames are read exactly, and anything that is not one valid single-frame heartbeat is ignored."""

from __future__ import annotations

import pycyphal.dsdl
import pytest
import uavcan.node

from cyphal_common.heartbeat_probe import HEARTBEAT_SUBJECT_ID, Heartbeat, parse_heartbeat
from tests.cyphal_udp import header, transfer_frames

HEALTH = uavcan.node.Health_1_0
MODE = uavcan.node.Mode_1_0


def _payload(uptime: int, health: int, mode: int) -> bytes:
    msg = uavcan.node.Heartbeat_1_0(uptime=uptime, health=HEALTH(health), mode=MODE(mode),
                                    vendor_specific_status_code=0xA5)
    return b"".join(bytes(f) for f in pycyphal.dsdl.serialize(msg))


def _datagram(source: int = 42, uptime: int = 7, health: int = HEALTH.NOMINAL, mode: int = MODE.OPERATIONAL,
              **fields: object) -> bytes:
    (frame,) = transfer_frames(_payload(uptime, health, mode), 1200, source=source,
                               subject=fields.pop("subject", HEARTBEAT_SUBJECT_ID), **fields)
    return frame


@pytest.mark.parametrize(
    ("health", "mode", "well"),
    [
        (HEALTH.NOMINAL, MODE.OPERATIONAL, True),
        (HEALTH.ADVISORY, MODE.OPERATIONAL, True),
        (HEALTH.CAUTION, MODE.OPERATIONAL, True),
        (HEALTH.WARNING, MODE.OPERATIONAL, False),
        (HEALTH.NOMINAL, MODE.INITIALIZATION, False),
        (HEALTH.NOMINAL, MODE.MAINTENANCE, False),
    ],
)
def test_a_heartbeat_is_read_exactly(health: int, mode: int, well: bool) -> None:
    hb = parse_heartbeat(_datagram(source=1234, uptime=0xDEADBEEF, health=health, mode=mode))
    assert hb == Heartbeat(source=1234, uptime=0xDEADBEEF, health=health, mode=mode)
    assert hb.well is well


def test_anything_else_is_ignored() -> None:
    good = _datagram()
    assert parse_heartbeat(good) is not None
    bad_header_crc = header(source=42, subject=HEARTBEAT_SUBJECT_ID, header_crc=0x1234) + good[24:]
    flipped_payload = good[:26] + bytes([good[26] ^ 0x01]) + good[27:]
    two_frames = transfer_frames(_payload(7, 0, 0), 8, source=42, subject=HEARTBEAT_SUBJECT_ID)
    assert len(two_frames) == 2
    for datagram in [
        bad_header_crc,
        flipped_payload,                                            # transfer CRC does not check
        _datagram(subject=7510),                                    # another subject
        header(source=42, service=430, destination=7) + good[24:],  # a service transfer
        _datagram(version=0),
        *two_frames,                                                # a heartbeat fits one frame
        _datagram(source=0xFFFF),                                   # anonymous
        good[:30],                                                  # truncated
        b"",
    ]:
        assert parse_heartbeat(datagram) is None, datagram.hex()
