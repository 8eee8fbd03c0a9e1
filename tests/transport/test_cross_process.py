"""Frames cross process boundaries on the multicast bus; each side drops its own echoed frames."""

from __future__ import annotations

import asyncio
import json

import pytest
from pycyphal.transport import (
    InputSessionSpecifier,
    MessageDataSpecifier,
    OutputSessionSpecifier,
    PayloadMetadata,
    Priority,
    Timestamp,
    Transfer,
)
from pycyphal.transport.can import CANTransportStatistics

from cyphal_common.transport import udpmc_transport

from ._peer import payload_for
from .conftest import RECEIVE_TIMEOUT, Endpoint, Processes

META = PayloadMetadata(4096)
PEER_SUBJECT = 2000  # The peer publishes here.
OUR_SUBJECT = 2001  # We publish here; the peer listens.
PEER_NODE = 42
OUR_NODE = 43


@pytest.mark.parametrize(("mtu", "size"), [(8, 40), (64, 150)])
async def test_subprocess_to_us_and_back(endpoint: Endpoint, processes: Processes, mtu: int, size: int) -> None:
    """A peer process publishes multi-frame transfers we receive intact; ours reach it; nobody hears itself."""
    tr = udpmc_transport(endpoint.spec, OUR_NODE, mtu)
    try:
        peer_in = tr.get_input_session(InputSessionSpecifier(MessageDataSpecifier(PEER_SUBJECT), None), META)
        own_in = tr.get_input_session(InputSessionSpecifier(MessageDataSpecifier(OUR_SUBJECT), None), META)
        out = tr.get_output_session(OutputSessionSpecifier(MessageDataSpecifier(OUR_SUBJECT), None), META)
        peer = processes.peer(endpoint.spec, str(PEER_NODE), str(mtu), str(PEER_SUBJECT), str(OUR_SUBJECT), str(size))
        assert peer.stdout is not None and peer.stdin is not None
        ready = await asyncio.wait_for(asyncio.to_thread(peer.stdout.readline), 120)
        assert ready.strip() == "READY", ready

        loop = asyncio.get_running_loop()
        received = 0
        tid = 0
        deadline = loop.time() + RECEIVE_TIMEOUT * 2
        while received < 3 or tid < 6:  # Keep publishing while waiting, so the peer hears several of ours.
            assert loop.time() < deadline, f"received {received} transfers from the peer"
            data = payload_for(tid, size)
            transfer = Transfer(Timestamp.now(), Priority.NOMINAL, tid, [memoryview(data)])
            assert await out.send(transfer, loop.time() + 10)
            tid += 1
            got = await peer_in.receive(loop.time() + 0.2)
            if got is not None:
                assert got.source_node_id == PEER_NODE
                body = b"".join(bytes(x) for x in got.fragmented_payload)
                assert body[:size] == payload_for(got.transfer_id, size)
                received += 1

        peer.stdin.write("stop\n")
        peer.stdin.flush()
        out_text, err_text = await asyncio.to_thread(peer.communicate, timeout=120)
        assert peer.returncode == 0, err_text
        report = json.loads(out_text.strip().splitlines()[-1])
        assert report["heard"].get(str(OUR_NODE), 0) >= 1, report
        assert report["self_heard"] == 0, report  # The peer's own frames were not delivered back to it.
        assert await own_in.receive(loop.time() + 0.2) is None  # Nor ours to us.
        stats = tr.sample_statistics()
        assert isinstance(stats, CANTransportStatistics) and stats.in_frames_loopback == 0
    finally:
        tr.close()
