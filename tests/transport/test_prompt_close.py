"""Prompt close of Cyphal/UDP input sessions against pycyphal's real UDP transport, and the contract it relies on.

The verdicts are liveness, not speed: with the reader threads' poll stretched to an hour, a close that did not wake
its thread would hang, and the helper thread running it would still be alive when the test looks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pycyphal
import pytest
from pycyphal.transport import (
    InputSessionSpecifier,
    MessageDataSpecifier,
    OutputSessionSpecifier,
    PayloadMetadata,
    Priority,
    Timestamp,
    Transfer,
    Transport,
)

from cyphal_common.transport import _prompt_close as prompt
from cyphal_common.transport import make_transport

NODE, PEER, SUBJECT = 3911, 3912, 3950
"""Uncommon IDs (each pytest worker also has a network of its own)."""


def _udp(node_id: int) -> Transport:
    transport = make_transport({"uavcan.node.id": node_id, "uavcan.udp.iface": "127.0.0.1"})
    assert transport is not None
    return transport


def _listen(transport: Transport, subject: int) -> pycyphal.transport.InputSession:
    spec = InputSessionSpecifier(MessageDataSpecifier(subject), None)
    return transport.get_input_session(spec, PayloadMetadata(1024))


def _close_in_thread(transport: Transport) -> threading.Thread:
    """``transport.close()`` in a thread of its own, joined for up to 30 s: alive afterwards means it hung."""
    closer = threading.Thread(target=transport.close, daemon=True)
    closer.start()
    closer.join(30)
    return closer


@pytest.fixture
def hour_long_polls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Reader threads that, unless woken, wait an hour in ``select``."""
    prompt.install()
    monkeypatch.setattr(prompt, "POLL_S", 3600.0)
    yield


def test_pinned_pycyphal_contract() -> None:
    """Written against pycyphal 1.27's reader: ``select.select`` in ``_reader_thread``, kept as ``self._thread``."""
    assert pycyphal.__version__.startswith("1.27."), f"written against 1.27, found {pycyphal.__version__}"
    prompt.install()
    prompt.install()  # Idempotent.
    assert prompt.installed()
    from pycyphal.transport.udp._session import _input

    # Every session class closes through the patched base method.
    assert {c.__name__ for c in _input.UDPInputSession.__subclasses__()} == {"PromiscuousUDPInputSession",
                                                                           "SelectiveUDPInputSession"}
    assert not any("close" in vars(c) for c in _input.UDPInputSession.__subclasses__())
    patched = vars(_input)["select"]
    assert isinstance(patched, prompt._WakeableSelect)
    assert patched.error is OSError  # Everything else is the real module.


async def test_sessions_close_without_waiting_for_their_poll(hour_long_polls: None) -> None:
    """Twelve polling sessions, each thread waiting in ``select`` for an hour: the transport closes them all, and no
    reader thread is left behind."""
    transport = _udp(NODE)
    sessions = [_listen(transport, SUBJECT + k) for k in range(12)]
    threads = [s._thread for s in sessions]  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not all(t.ident in prompt._wakers for t in threads) and loop.time() < deadline:
        await asyncio.sleep(0.01)  # Every reader inside its first poll (its wake-up socket made there).
    assert all(t.ident in prompt._wakers for t in threads)
    closer = _close_in_thread(transport)
    assert not closer.is_alive(), "close() waited for a reader's poll"
    assert not any(t.is_alive() for t in threads)
    assert not any(t.ident in prompt._wakers for t in threads), "wake-up sockets left open"


async def test_a_session_closed_before_its_first_poll_is_not_missed(hour_long_polls: None) -> None:
    """Closed the moment it is made: the wake-up is kept for a thread that has not polled yet."""
    transport = _udp(NODE)
    session = _listen(transport, SUBJECT)
    closer = _close_in_thread(transport)
    assert not closer.is_alive(), "a wake-up sent before the reader's first poll was lost"
    assert not session._thread.is_alive()  # type: ignore[attr-defined]


async def test_frames_still_arrive_through_the_patched_poll(hour_long_polls: None) -> None:
    """The reader still gets its datagrams at once (the wake-up socket only adds to its readable set)."""
    rx, tx = _udp(NODE), _udp(PEER)
    try:
        session = _listen(rx, SUBJECT)
        out = tx.get_output_session(OutputSessionSpecifier(MessageDataSpecifier(SUBJECT), None), PayloadMetadata(1024))
        for transfer_id in range(3):
            await asyncio.sleep(0.05)
            assert await out.send(Transfer(Timestamp.now(), Priority.NOMINAL, transfer_id, [memoryview(b"abc")]),
                                  asyncio.get_running_loop().time() + 1.0)
        received = [await session.receive(asyncio.get_running_loop().time() + 10.0) for _ in range(3)]
        assert [r.transfer_id for r in received if r is not None] == [0, 1, 2]
        assert all(r is not None and r.source_node_id == PEER for r in received)
    finally:
        tx.close()
        assert not _close_in_thread(rx).is_alive()
