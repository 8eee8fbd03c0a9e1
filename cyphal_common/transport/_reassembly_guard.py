"""Guard against unbounded transfer reassembly in pycyphal's high-overhead transports (Cyphal/UDP, Cyphal/serial).

Why: pycyphal 1.27.1 ``TransferReassembler.process_frame``
(``pycyphal/transport/commons/high_overhead_transport/_transfer_reassembler.py``) stores a frame at its index with
``while len(self._payloads) <= frame.index: self._payloads.append(memoryview(b""))`` — bounded by nothing but the
31-bit frame index of the wire format. One 48-byte Cyphal/UDP datagram with index 2³¹−1 on any subscribed subject
makes the event loop append 2³¹ list items: the node stops (no heartbeat, no services, no deadman) for tens of
seconds and takes gigabytes. See ``docs/upstream-pycyphal-reassembly.md``.

What: :func:`install` wraps ``TransferReassembler.process_frame`` once per process. Before pycyphal sees a frame
that belongs to a multi-frame transfer, the wrapper drops it (no allocation, the reassembler state is untouched)
when it cannot be part of a transfer that fits the session's extent:

- **index**: a transfer within the extent is at most ``extent + 4`` bytes (payload + transfer CRC-32C) on the wire;
  at the smallest per-frame payload a Cyphal/UDP sender may use (pycyphal's ``UDPTransport.MTU_MIN`` = 4 bytes:
  the transfer CRC must fit, the Cyphal/UDP wire format sets no other minimum, libudpard's ``UDPARD_MTU_MIN`` is
  far larger) that is ``ceil((extent + 4) / 4)`` frames, so the largest acceptable index is
  :func:`max_frame_index` = ``(extent + 3) // 4`` (extent 63 → 16; Cyphal/serial senders use ≥ 1024-byte MTUs,
  so the same bound is lenient there too);
- **size**: one frame of such a transfer carries at most ``extent + 4`` bytes.

Single-frame transfers (index 0 with end-of-transfer) are never touched: they complete at once and keep nothing,
and pycyphal passes oversize ones up for the implicit truncation rule. The trade-off: a *multi-frame* transfer
longer than the receiver's extent (a sender of a structural subtype using a small MTU) is dropped instead of
truncated — a compliant sender with the default MTU (1408 bytes) only does that for payloads > 1.4 kB, far above
any extent of this node's subscriptions. Retained memory per (session, source node) is then at most
``max_frame_index + 1`` frames of ``extent + 4`` bytes each.

Scope: ``TransferReassembler`` is the reassembler of every pycyphal high-overhead transport (UDP and serial input
sessions refer to this one class); patching the class covers instances created before and after installation,
in every transport of this process. Cyphal/CAN has its own reassembler, which truncates at the extent and is not
affected. The patch is written against pycyphal 1.27 (pinned in ``pyproject.toml``); :func:`install` checks the
patched symbol's signature and the extent attribute it reads and raises :class:`ReassemblyGuardError` if pycyphal
changed underneath, and ``tests/transport/test_reassembly_guard.py`` fails loudly for the same reason.

Drops are counted (:func:`dropped_frames`, :func:`drop_counts`) for the node's ``sys.counters``; the first drop and
every tenfold count are logged as warnings (never one line per frame: the flood is the attack).
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from pycyphal.transport import Timestamp, TransferFrom
from pycyphal.transport.commons.high_overhead_transport import Frame, TransferReassembler
from pycyphal.transport.udp._session._input import PromiscuousUDPInputSession

__all__ = [
    "CRC_BYTES",
    "MAX_SOURCES_PER_SESSION",
    "MIN_FRAME_PAYLOAD_BYTES",
    "ReassemblyGuardError",
    "drop_counts",
    "dropped_frames",
    "evicted_sources",
    "install",
    "installed",
    "max_frame_index",
]

_logger = logging.getLogger(__name__)

CRC_BYTES = 4
"""Transfer CRC-32C appended to every Cyphal/UDP and multi-frame Cyphal/serial transfer."""

MIN_FRAME_PAYLOAD_BYTES = 4
"""Smallest payload per frame a sender may use: pycyphal's ``UDPTransport.MTU_MIN`` (room for the transfer CRC)."""

_EXPECTED_PARAMETERS = ("self", "timestamp", "frame", "transfer_id_timeout")
_MARK = "__servo_node_reassembly_guard__"

MAX_SOURCES_PER_SESSION = 512
"""Per-source reassembly state a UDP input session keeps; beyond it the oldest source's state is evicted.

pycyphal keeps a reassembler (and an error-statistics entry) per source node-ID for ever, ~1 KiB each: spoofed
sources (any of 65,535 on UDP, per subscribed port) grow memory without bound. A real bus has far fewer nodes; an
evicted source loses only a transfer in progress and its duplicate filter (one repeated transfer may pass)."""

_lock = threading.Lock()
_counts = {"index": 0, "size": 0, "evicted": 0}
_next_warning = 1


class ReassemblyGuardError(RuntimeError):
    """pycyphal's reassembler is not the one this guard was written against (see the module docstring)."""


def max_frame_index(extent_bytes: int) -> int:
    """Largest frame index of a transfer of ``extent_bytes`` payload + CRC at the smallest legal frame payload."""
    return (int(extent_bytes) + CRC_BYTES + MIN_FRAME_PAYLOAD_BYTES - 1) // MIN_FRAME_PAYLOAD_BYTES - 1


def dropped_frames() -> int:
    """Frames dropped by the guard in this process since start (both reasons)."""
    with _lock:
        return _counts["index"] + _counts["size"]


def evicted_sources() -> int:
    """Per-source reassembly states evicted to keep UDP sessions within :data:`MAX_SOURCES_PER_SESSION`."""
    with _lock:
        return _counts["evicted"]


def drop_counts() -> dict[str, int]:
    """Drops by reason: ``index`` (frame index beyond the extent's bound), ``size`` (frame larger than extent+CRC);
    and ``evicted`` per-source states."""
    with _lock:
        return dict(_counts)


def installed() -> bool:
    """True once :func:`install` has wrapped ``TransferReassembler.process_frame`` in this process."""
    return bool(getattr(TransferReassembler.process_frame, _MARK, False))


def install() -> None:
    """Wrap ``TransferReassembler.process_frame`` with the guard; idempotent, thread-safe.

    :raises ReassemblyGuardError: pycyphal's reassembler changed (signature or extent attribute); the guard refuses
        to guess — pin or update it.
    """
    with _lock:
        if installed():
            return
        original = TransferReassembler.process_frame
        _check_contract(original)

        @functools.wraps(original)
        def process_frame(
            self: TransferReassembler, timestamp: Timestamp, frame: Frame, transfer_id_timeout: float
        ) -> TransferFrom | None:
            if not (frame.index == 0 and frame.end_of_transfer):  # Multi-frame; single-frame ones never stay.
                extent = self._extent_bytes
                if frame.index > (extent + CRC_BYTES + MIN_FRAME_PAYLOAD_BYTES - 1) // MIN_FRAME_PAYLOAD_BYTES - 1:
                    _drop("index", self, frame)
                    return None
                if len(frame.payload) > extent + CRC_BYTES:
                    _drop("size", self, frame)
                    return None
            return original(self, timestamp, frame, transfer_id_timeout)

        setattr(process_frame, _MARK, True)
        setattr(process_frame, "__wrapped_original__", original)  # noqa: B010  For the contract test.
        TransferReassembler.process_frame = process_frame  # type: ignore[method-assign]
        _cap_sources()
        _logger.debug("Reassembly guard installed on %s", TransferReassembler)


def _cap_sources() -> None:
    """Bound the per-source state of UDP input sessions (:data:`MAX_SOURCES_PER_SESSION`, oldest out first)."""
    original = PromiscuousUDPInputSession._get_reassembler

    @functools.wraps(original)
    def get_reassembler(self: PromiscuousUDPInputSession, source_node_id: int) -> TransferReassembler:
        table = self._reassemblers
        if source_node_id not in table and len(table) >= MAX_SOURCES_PER_SESSION:
            stats = self._statistics.reassembly_errors_per_source_node_id
            for old in list(table)[: len(table) - MAX_SOURCES_PER_SESSION + 1]:  # Insertion order: oldest first.
                del table[old]
                stats.pop(old, None)  # type: ignore[arg-type]
                with _lock:
                    _counts["evicted"] += 1
        return original(self, source_node_id)

    PromiscuousUDPInputSession._get_reassembler = get_reassembler  # type: ignore[method-assign]


def _check_contract(original: Callable[..., Any]) -> None:
    """The symbols the guard relies on exist as in pycyphal 1.27; else raise :class:`ReassemblyGuardError`."""
    params = tuple(inspect.signature(original).parameters)
    if params != _EXPECTED_PARAMETERS:
        raise ReassemblyGuardError(
            f"pycyphal TransferReassembler.process_frame{params} is not the 1.27 signature {_EXPECTED_PARAMETERS}; "
            "the reassembly guard must be revised (cyphal_common/transport/_reassembly_guard.py)"
        )
    if not callable(getattr(PromiscuousUDPInputSession, "_get_reassembler", None)):
        raise ReassemblyGuardError(
            "pycyphal PromiscuousUDPInputSession has no _get_reassembler; "
            "the reassembly guard must be revised (cyphal_common/transport/_reassembly_guard.py)"
        )
    probe = TransferReassembler(source_node_id=1, extent_bytes=123, on_error_callback=lambda _: None)
    if getattr(probe, "_extent_bytes", None) != 123:
        raise ReassemblyGuardError(
            "pycyphal TransferReassembler no longer keeps the extent in _extent_bytes; "
            "the reassembly guard must be revised (cyphal_common/transport/_reassembly_guard.py)"
        )


def _drop(reason: str, reassembler: TransferReassembler, frame: Frame) -> None:
    """Count a dropped frame; warn on the first and on every tenfold total."""
    global _next_warning
    with _lock:
        _counts[reason] += 1
        total = _counts["index"] + _counts["size"]
        warn = total >= _next_warning
        if warn:
            _next_warning = total * 10
    if warn:
        _logger.warning(
            "Dropped a frame that cannot belong to a transfer within the extent (%s): source %d, index %d, "
            "%d payload bytes, extent %d; %d frames dropped so far",
            reason,
            reassembler.source_node_id,
            frame.index,
            len(frame.payload),
            reassembler._extent_bytes,
            total,
        )
