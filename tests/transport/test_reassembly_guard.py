"""The reassembly guard against pycyphal's real ``TransferReassembler``, and the contract it is written against.

If pycyphal changes the patched symbol, these tests fail loudly (and ``install()`` raises at start-up); if pycyphal
fixes the defect upstream, ``test_upstream_defect_still_present`` says so and the guard can be reconsidered.
"""

from __future__ import annotations

import inspect
import math
import tracemalloc

import pycyphal
import pytest
from pycyphal.transport import Priority, Timestamp
from pycyphal.transport.commons.crc import CRC16CCITT
from pycyphal.transport.commons.high_overhead_transport import Frame, TransferCRC, TransferReassembler
from pycyphal.transport.udp import UDPFrame

from cyphal_common.transport import _reassembly_guard as guard
from cyphal_common.transport import make_transport
from tests import cyphal_udp as wire


def frame(index: int, eot: bool, payload: bytes, transfer_id: int = 5) -> Frame:
    return Frame(
        priority=Priority.NOMINAL,
        transfer_id=transfer_id,
        index=index,
        end_of_transfer=eot,
        payload=memoryview(payload),
    )


def reassembler(extent: int) -> TransferReassembler:
    return TransferReassembler(source_node_id=42, extent_bytes=extent, on_error_callback=lambda _: None)


def test_pinned_pycyphal_contract() -> None:
    """The guard wraps exactly this: pycyphal 1.27's process_frame(self, timestamp, frame, transfer_id_timeout)."""
    assert pycyphal.__version__.startswith("1.27."), f"guard written against 1.27, found {pycyphal.__version__}"
    guard.install()
    assert guard.installed()
    original = TransferReassembler.process_frame.__wrapped_original__  # type: ignore[attr-defined]
    assert tuple(inspect.signature(original).parameters) == ("self", "timestamp", "frame", "transfer_id_timeout")
    assert reassembler(77)._extent_bytes == 77
    # UDP and serial input sessions use this very class (so patching it covers them).
    from pycyphal.transport.serial._session import _input as serial_input
    from pycyphal.transport.udp._session import _input as udp_input

    assert udp_input.TransferReassembler is TransferReassembler
    assert serial_input.TransferReassembler is TransferReassembler


def test_upstream_defect_still_present() -> None:
    """Unguarded, one frame grows the reassembler's list to its index: the defect the guard exists for."""
    guard.install()
    original = TransferReassembler.process_frame.__wrapped_original__  # type: ignore[attr-defined]
    r = reassembler(63)
    assert original(r, Timestamp.now(), frame(100_000, True, b"x" * 8), 2.0) is None
    assert len(r._payloads) == 100_001, (
        "pycyphal bounds reassembly now: revisit cyphal_common/transport/_reassembly_guard.py"
    )


def test_bound() -> None:
    """extent + 4-byte CRC at 4 bytes per frame: extent 63 → 17 frames (indices 0..16)."""
    assert guard.max_frame_index(63) == 16
    assert guard.max_frame_index(0) == 0
    assert guard.max_frame_index(1) == 1
    assert guard.max_frame_index(4) == 1
    assert guard.max_frame_index(5) == 2


@pytest.mark.parametrize("index", [17, 3_000_000, 2**31 - 1])
def test_far_index_dropped_without_allocation(index: int) -> None:
    """The measured drop is not one the guard warns about (the first, then every tenfold total): a log record
    through pytest's capture allocates kilobytes once, not per frame of a flood."""
    guard.install()
    r = reassembler(63)
    while math.log10(guard.dropped_frames() + 1).is_integer():
        r.process_frame(Timestamp.now(), frame(index, True, b"x" * 8), 2.0)
    before = guard.drop_counts()["index"]
    tracemalloc.start()
    try:
        assert r.process_frame(Timestamp.now(), frame(index, True, b"x" * 8), 2.0) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4096, f"{peak} bytes allocated for a dropped frame"
    assert r._payloads == []
    assert guard.drop_counts()["index"] == before + 1


def test_oversize_frame_of_multiframe_transfer_dropped() -> None:
    guard.install()
    r = reassembler(63)
    before = guard.drop_counts()["size"]
    assert r.process_frame(Timestamp.now(), frame(0, False, b"x" * 68), 2.0) is None
    assert guard.drop_counts()["size"] == before + 1 and r._payloads == []


def test_legitimate_transfers_still_pass() -> None:
    """The largest transfer within the extent at the smallest MTU, in reverse order; and an oversize single frame."""
    guard.install()
    payload = bytes(range(63))
    body = payload + TransferCRC.new(payload).value_as_bytes
    chunks = [body[i : i + 4] for i in range(0, len(body), 4)]
    assert len(chunks) == guard.max_frame_index(63) + 1
    r = reassembler(63)
    before = guard.dropped_frames()
    results = [
        r.process_frame(Timestamp.now(), frame(i, i == len(chunks) - 1, c), 2.0)
        for i, c in reversed(list(enumerate(chunks)))
    ]
    assert results[-1] is not None and b"".join(results[-1].fragmented_payload) == payload
    big = bytes(200)  # Single-frame transfers longer than the extent pass (implicit truncation is up to the reader).
    done = reassembler(63).process_frame(
        Timestamp.now(), frame(0, True, big + TransferCRC.new(big).value_as_bytes), 2.0
    )
    assert done is not None and b"".join(done.fragmented_payload) == big
    assert guard.dropped_frames() == before


def test_make_transport_installs_the_guard() -> None:
    tr = make_transport({"uavcan.node.id": 3001, "uavcan.udp.iface": "127.0.0.1"})
    assert tr is not None
    tr.close()
    assert guard.installed()


def test_wire_helper_matches_pycyphal() -> None:
    """The hand-built header and CRCs the bus tests send are what pycyphal itself produces and parses."""
    head = wire.header(source=3001, subject=6101, transfer_id=123456789, index=2**31 - 1, eot=True, priority=3)
    assert CRC16CCITT.new(head[:22]).value_as_bytes == head[22:]
    parsed = UDPFrame.parse(memoryview(head + b"abcd"))
    assert parsed is not None
    assert (parsed.source_node_id, parsed.index, parsed.end_of_transfer, parsed.transfer_id) == (
        3001,
        2**31 - 1,
        True,
        123456789,
    )
    assert parsed.data_specifier == pycyphal.transport.MessageDataSpecifier(6101)
    assert wire.crc32c(b"123456789") == 0xE3069283
    assert TransferCRC.new(b"hello").value_as_bytes == wire.crc32c(b"hello").to_bytes(4, "little")
    svc = UDPFrame.parse(memoryview(wire.header(source=1, service=384, destination=3713, eot=True) + b"xxxx"))
    assert svc is not None and svc.destination_node_id == 3713
    assert svc.data_specifier == pycyphal.transport.ServiceDataSpecifier(
        384, pycyphal.transport.ServiceDataSpecifier.Role.REQUEST
    )


async def test_per_source_state_is_bounded() -> None:
    """Spoofed source node-IDs cannot grow a UDP session's per-source state beyond the cap (oldest evicted)."""
    import pycyphal.transport
    from pycyphal.transport.udp import UDPTransport

    guard.install()
    transport = UDPTransport("127.0.0.1", local_node_id=None)
    try:
        session = transport.get_input_session(
            pycyphal.transport.InputSessionSpecifier(pycyphal.transport.MessageDataSpecifier(3733), None),
            pycyphal.transport.PayloadMetadata(63),
        )
        before = guard.evicted_sources()
        n = guard.MAX_SOURCES_PER_SESSION + 300
        for source in range(n):
            session._get_reassembler(source)  # What every frame from a new source does.
        assert len(session._reassemblers) == guard.MAX_SOURCES_PER_SESSION
        assert guard.evicted_sources() == before + 300
        assert set(session._reassemblers) == set(range(300, n))  # The newest stay.
        assert len(session.sample_statistics().reassembly_errors_per_source_node_id) <= guard.MAX_SOURCES_PER_SESSION
    finally:
        transport.close()
