"""The drive's CANopen face: a :class:`canopen.LocalNode` from the EDS wired to a :class:`~._drive.Cia402Drive`.

canopen's ``LocalNode`` gives the SDO server, the NMT slave with its heartbeat producer (0x1017) and the EMCY
producer; it leaves to the application what makes a device: PDOs that follow their configuration, the SYNC
consumer, the heartbeat consumer. This module adds them, using canopen's PDO maps for every frame:

* The PDOs the dictionary declares (0x1400…/0x1600…/0x1800…/0x1A00…, however many): their configuration is
  re-read after every SDO write to it, so a master remaps by SDO as on any device; mapping entries are checked
  (object exists, is mappable, length), a mapping holds at most the entries its object declares and 64 bits, and
  only parameters the file makes writable take a write. A write beyond an object's LowLimit/HighLimit is refused.
  With ``fixed_mapping`` the mapping parameters (0x1600…, 0x1A00…) are read-only, as on drives whose PDO mapping is
  fixed: every write to them is aborted (0x06010002); the communication parameters stay writable.
* RPDOs of transmission type 0…240 are latched and written into the dictionary at the next SYNC, 254/255 at once;
  TPDOs of type 1…240 are sent every n-th SYNC (0: at a SYNC when their data changed), 254/255 on change and on
  their event timer. PDOs only in NMT OPERATIONAL.
* SYNC (COB-ID 0x1005; 0x080 without it): latch RPDOs, run one drive cycle, send the synchronous TPDOs. Without
  SYNC (none for 3 communication cycle periods 0x1006, at least 50 ms) :meth:`DriveNode.tick` runs the cycle on the
  drive's own clock.
* Heartbeat consumer (0x1016, if the file has it): a monitored node's heartbeat silent for longer than its time
  (after the first one was seen) → :meth:`~._drive.Cia402Drive.communication_lost`; NMT stopped or a reset while
  enabled does the same. Node guarding and life guarding (0x100C/0x100D, if the file has them): :mod:`._guarding`.
* Objects the file declares without a value have the values :func:`._profile.fill_ins` gives (after a reset too).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import canopen
from canopen.pdo import PdoMap
from canopen.sdo import SdoAbortedError

from . import _objects as ob
from ._drive import Cia402Drive, RefusedError
from ._guarding import Guarding
from ._profile import mapping_capacity

_logger = logging.getLogger(__name__)

ABORT_VALUE_RANGE = 0x06090030
ABORT_NOT_MAPPABLE = 0x06040041
ABORT_PDO_LENGTH = 0x06040042
ABORT_READ_ONLY = 0x06010002
ABORT_VALUE_HIGH, ABORT_VALUE_LOW = 0x06090031, 0x06090032
DEFAULT_SYNC_COB_ID = 0x80
NO_SYNC_AFTER_S = 0.05
"""Least SYNC silence after which the drive cycles on its own clock."""


class DriveNode(canopen.LocalNode):  # type: ignore[misc]
    """The CiA 402 device: object dictionary, PDOs, SYNC and heartbeat consumers around a drive."""

    def __init__(self, node_id: int, object_dictionary: Any, drive: Cia402Drive, fixed_mapping: bool = False,
                 fills: dict[tuple[int, int], Any] | None = None) -> None:
        """Build the node from the dictionary (an EDS path or an ``ObjectDictionary``); not yet on a network.
        ``fills``: the values of objects the file declares without one."""
        super().__init__(node_id, object_dictionary)
        self.drive = drive
        self.fixed_mapping = fixed_mapping
        self._fills = dict(fills or {})
        self._apply_fills(0, 0x10000)
        self.guarding: Guarding | None = None
        if ob.GUARD_TIME in self.object_dictionary and ob.LIFE_TIME_FACTOR in self.object_dictionary:
            self.guarding = Guarding(node_id, lambda cob, data: self.network.send_message(cob, data),
                                     lambda: int(self.nmt._state), self._guard_times, drive.communication_lost,
                                     drive.communication_restored)
        self._lock = threading.RLock()
        self._pending: set[int] = set()  # RPDO numbers received since the last SYNC (synchronous types).
        self._sync_count = 0
        self._sync_cob_id: int | None = None
        self._last_sync = -math.inf
        self._sent: dict[int, tuple[bytes, float]] = {}  # TPDO number → (data, monotonic) of its last transmission
        self._heartbeats: dict[int, float] = {}  # monitored node-ID → consumer time [s]
        self._seen: dict[int, float] = {}  # monitored node-ID → monotonic time of its last heartbeat
        self._lost: set[int] = set()
        self.syncs = 0
        """SYNC messages received (diagnostics)."""
        self.add_read_callback(self._on_read)
        self.add_write_callback(self._on_write)
        for m in self.rpdo.map.values():
            m.add_callback(self._on_rpdo)

    def _apply_fills(self, low: int, high: int) -> None:
        for (index, sub), value in self._fills.items():
            if low <= index < high:
                var = self._find_object(index, sub)
                self.data_store.setdefault(index, {})[sub] = var.encode_raw(value)

    def value(self, index: int, sub: int = 0) -> int | None:
        """An object's value as a number (None: absent or not a number); what the drive looks up."""
        try:
            return int(self._find_object(index, sub).decode_raw(self.get_data(index, sub)))
        except (SdoAbortedError, KeyError, TypeError, ValueError):
            return None

    def _guard_times(self) -> tuple[int, int, int]:
        return (self.value(ob.PRODUCER_HEARTBEAT) or 0, self.value(ob.GUARD_TIME) or 0,
                self.value(ob.LIFE_TIME_FACTOR) or 0)

    # ------------------------------------------------------------------ lifecycle

    def boot(self) -> None:
        """Join the network's traffic: boot-up message, PDO/SYNC/heartbeat configuration, NMT PRE-OPERATIONAL."""
        self.network.subscribe(0, self._on_nmt)
        self._configure_all()
        self.nmt.state = "INITIALISING"  # Sends the boot-up message.
        self.nmt.state = "PRE-OPERATIONAL"  # Starts the heartbeat producer (0x1017).

    def shutdown(self) -> None:
        """Stop the heartbeat and leave the network's traffic (the network itself is the caller's)."""
        self.nmt.stop_heartbeat()
        with self._lock:
            self._unsubscribe_all()
        if self.has_network():
            self.network.unsubscribe(0, self._on_nmt)

    def _configure_all(self) -> None:
        with self._lock:
            for m in (*self.rpdo.map.values(), *self.tpdo.map.values()):
                self._reload(m)
            self._configure_sync()
            self._configure_heartbeat_consumer()

    def _unsubscribe_all(self) -> None:
        for m in (*self.rpdo.map.values(), *self.tpdo.map.values()):
            self._unsubscribe(m.cob_id if m.enabled else None, m.on_message)
        self._unsubscribe(self._sync_cob_id, self._on_sync)
        for nid in self._heartbeats:
            self._unsubscribe(0x700 + nid, self._on_heartbeat)

    def _unsubscribe(self, cob_id: int | None, callback: Any) -> None:
        if cob_id is not None and callback in self.network.subscribers.get(cob_id, ()):
            self.network.unsubscribe(cob_id, callback)

    def _reload(self, m: PdoMap) -> None:
        """Re-read one PDO's configuration from the dictionary (canopen subscribes it if enabled). An RPDO waiting
        for its SYNC is dropped: its data belonged to the old configuration, and the re-read map's is zeros (as a
        controlword, Disable Voltage)."""
        self._unsubscribe(m.cob_id if m.enabled else None, m.on_message)
        if m.pdo_node is self.rpdo:
            self._pending.discard(self._number(m))
        m.read()
        if m.pdo_node is self.tpdo:  # A TPDO is ours to send, not to receive.
            self._unsubscribe(m.cob_id if m.enabled else None, m.on_message)

    def _configure_sync(self) -> None:
        self._unsubscribe(self._sync_cob_id, self._on_sync)
        cob_id = (self.value(ob.SYNC_COB_ID) or DEFAULT_SYNC_COB_ID) & 0x7FF
        self._sync_cob_id = cob_id
        self.network.subscribe(cob_id, self._on_sync)

    def _configure_heartbeat_consumer(self) -> None:
        for nid in self._heartbeats:
            self._unsubscribe(0x700 + nid, self._on_heartbeat)
        self._heartbeats.clear()
        self._seen.clear()
        self._lost.clear()
        for sub in range(1, (self.value(ob.CONSUMER_HEARTBEAT, 0) or 0) + 1):
            entry = self.value(ob.CONSUMER_HEARTBEAT, sub) or 0
            nid, ms = (entry >> 16) & 0x7F, entry & 0xFFFF
            if nid and ms:
                self._heartbeats[nid] = ms / 1000.0
                self.network.subscribe(0x700 + nid, self._on_heartbeat)

    # ------------------------------------------------------------------ dictionary access

    def _on_read(self, index: int, subindex: int, od: Any) -> int | None:
        if (index in ob.DRIVE_OBJECTS or index == ob.DIGITAL_INPUTS) and subindex == 0:
            return self.drive.read(index)
        if index == ob.ERROR_REGISTER:
            return self.drive.error_register
        return None

    def _on_write(self, index: int, subindex: int, od: Any, data: bytes) -> None:
        """Check and forward a write before the dictionary stores it (a raised abort refuses it)."""
        value = od.decode_raw(data)
        if isinstance(value, int) and od.min is not None and value < od.min:
            raise SdoAbortedError(ABORT_VALUE_LOW)
        if isinstance(value, int) and od.max is not None and value > od.max:
            raise SdoAbortedError(ABORT_VALUE_HIGH)
        if (index in ob.DRIVE_OBJECTS and subindex == 0) or (index, subindex) == (ob.INTERPOLATION_DATA, 1):
            try:
                if subindex == 0:
                    self.drive.write(index, value)
                else:
                    self.drive.write_entry(index, subindex, value)
            except RefusedError as ex:
                _logger.info("Refused 0x%04X: %s", index, ex)
                raise SdoAbortedError(ABORT_VALUE_RANGE) from None
            return
        pdo = ob.pdo_parameter(index)
        if pdo is None:
            return
        receive, mapping, _ = pdo
        if mapping and self.fixed_mapping:
            raise SdoAbortedError(ABORT_READ_ONLY)
        if mapping:
            self._check_mapping(receive, index, subindex, od.decode_raw(data))
        elif subindex == 2:  # Transmission type: synchronous 0…240 or event-driven 254/255 (no RTR-only types).
            trans_type = od.decode_raw(data)
            if not (trans_type <= 240 or trans_type >= 254):
                raise SdoAbortedError(ABORT_VALUE_RANGE)

    def _check_mapping(self, receive: bool, index: int, subindex: int, value: int) -> None:
        """A mapping entry names an existing, mappable object of the PDO's direction with its length; the count
        keeps the PDO within the entries its mapping object declares and 64 bits."""
        if subindex == 0:
            if value > mapping_capacity(self.object_dictionary, index):
                raise SdoAbortedError(ABORT_VALUE_RANGE)
            bits = sum(int(self.sdo[index][s].raw) & 0xFF for s in range(1, value + 1))
            if bits > 64:
                raise SdoAbortedError(ABORT_PDO_LENGTH)
            return
        if value == 0:
            return
        target, sub, bits = value >> 16, (value >> 8) & 0xFF, value & 0xFF
        try:
            obj = self.object_dictionary[target]
            var = obj if isinstance(obj, canopen.objectdictionary.ODVariable) else obj[sub]
        except KeyError:
            raise SdoAbortedError(ABORT_NOT_MAPPABLE) from None
        usable = var.writable if receive else var.readable
        if not (var.pdo_mappable and usable and len(var) == bits):
            raise SdoAbortedError(ABORT_NOT_MAPPABLE)

    def set_data(self, index: int, subindex: int, data: bytes, check_writable: bool = False) -> None:
        """Store a value (canopen), then apply what it configures: PDOs, SYNC, heartbeat consumer."""
        super().set_data(index, subindex, data, check_writable)
        with self._lock:
            pdo = ob.pdo_parameter(index)
            if pdo is not None:
                receive, _, number = pdo
                self._reload((self.rpdo if receive else self.tpdo).map[number])
            elif index == ob.SYNC_COB_ID:
                self._configure_sync()
            elif index == ob.CONSUMER_HEARTBEAT:
                self._configure_heartbeat_consumer()

    # ------------------------------------------------------------------ traffic

    @property
    def operational(self) -> bool:
        """True in NMT OPERATIONAL (PDOs flow)."""
        return bool(self.nmt.state == "OPERATIONAL")

    def _on_nmt(self, can_id: int, data: bytes, timestamp: float) -> None:
        """After canopen's NMT slave took the command: resets boot again; stopped/resets react as a lost link."""
        if len(data) < 2 or data[1] not in (0, self.id):
            return  # A command to another node.
        state = self.nmt.state
        if state in ("INITIALISING", "STOPPED"):
            self.drive.connection_ended()
        if state == "INITIALISING":  # Reset node / reset communication: power-on communication parameters.
            with self._lock:
                for index in [i for i in self.data_store if 0x1000 <= i < 0x2000]:
                    del self.data_store[index]
                self._pending.clear()
                self._unsubscribe_all()
                self._configure_all()
            self.nmt.state = "INITIALISING"  # Boot-up message…
            self.nmt.state = "PRE-OPERATIONAL"  # …and the heartbeat at the power-on 0x1017.

    def _on_rpdo(self, m: PdoMap) -> None:
        if not self.operational:
            return
        with self._lock:
            if m.trans_type is not None and m.trans_type <= 240:
                self._pending.add(self._number(m))
            else:
                self._apply_rpdo(m)

    def _number(self, m: PdoMap) -> int:
        return next(n for n, x in m.pdo_node.map.items() if x is m)

    def _apply_rpdo(self, m: PdoMap) -> None:
        """Write the received PDO's variables into the dictionary (the drive takes them through the callback)."""
        for var in m.map:
            try:
                self.set_data(var.index, var.subindex, var.get_data())
            except SdoAbortedError as ex:
                _logger.debug("RPDO value for 0x%04X refused: %s", var.index, ex)

    def _on_sync(self, can_id: int, data: bytes, timestamp: float) -> None:
        with self._lock:
            self.syncs += 1
            self._last_sync = time.monotonic()
            if self.operational:
                for n in sorted(self._pending):
                    self._apply_rpdo(self.rpdo.map[n])
            self._pending.clear()
            self.drive.cycle()
            self.drive.supervise()
            if self.operational:
                self._sync_count += 1
                for n, m in self.tpdo.map.items():
                    tt = m.trans_type
                    if not m.enabled or tt is None or tt > 240:
                        continue
                    data_now = self._fill(m)
                    if (tt == 0 and self._sent.get(n, (b"", 0.0))[0] != data_now) or (
                        tt > 0 and self._sync_count % tt == 0
                    ):
                        self._transmit(n, m, data_now)

    def _fill(self, m: PdoMap) -> bytes:
        """Put the current values of the mapped objects into the TPDO's data (canopen's PDO variables)."""
        for var in m.map:
            var.set_data(self.get_data(var.index, var.subindex))
        return bytes(m.data)

    def _transmit(self, n: int, m: PdoMap, data: bytes) -> None:
        m.transmit()
        self._sent[n] = (data, time.monotonic())

    def _on_heartbeat(self, can_id: int, data: bytes, timestamp: float) -> None:
        nid = can_id - 0x700
        with self._lock:
            self._seen[nid] = time.monotonic()
            if nid in self._lost:
                self._lost.discard(nid)
                _logger.info("Heartbeat of node %d is back", nid)
                if not self._lost:
                    self.drive.communication_restored()

    def tick(self) -> None:
        """Housekeeping, called often (≥ 50 Hz): the drive's own-clock cycle without SYNC, supervision, heartbeat
        consumer timeouts, event-driven TPDOs."""
        now = time.monotonic()
        with self._lock:
            period = (self.value(ob.CYCLE_PERIOD) or 0) * 1e-6
            if now - self._last_sync > max(3.0 * period, NO_SYNC_AFTER_S):
                self.drive.cycle()
            self.drive.supervise(now)
            for nid, limit in self._heartbeats.items():
                seen = self._seen.get(nid)
                if seen is not None and nid not in self._lost and now - seen > limit:
                    self._lost.add(nid)
                    _logger.warning("Heartbeat of node %d lost (consumer time %.3f s)", nid, limit)
                    self.drive.communication_lost()
            if self.guarding is not None:
                self.guarding.tick(now)
            if not self.operational:
                return
            for n, m in self.tpdo.map.items():
                if not m.enabled or m.trans_type is None or m.trans_type < 254:
                    continue
                data_now = self._fill(m)
                last, at = self._sent.get(n, (b"", -math.inf))
                inhibit = (m.inhibit_time or 0) * 1e-4
                timer = (m.event_timer or 0) * 1e-3
                if (data_now != last and now - at >= inhibit) or (timer > 0.0 and now - at >= timer):
                    self._transmit(n, m, data_now)
