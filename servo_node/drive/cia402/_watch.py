"""The drive's ears on the bus beyond its TPDOs, on canopen's receive thread, each O(1) per frame.

* Its heartbeat (its NMT state) and its EMCY, in place of canopen's own consumers: canopen's EMCY consumer keeps
  every EMCY in two lists forever, and both raise on a short frame (a log line each); here an EMCY is counted into
  a :class:`._notes.Tally` and its last code kept, nothing else.
* What no master of ours sends, since the bus gives us none of our own frames: an SDO download request to the
  drive (another client writes it), an NMT command to it, a frame on one of its RPDO COB-IDs (another master
  commands it), and, through :meth:`._network.CanopenBus.watch`, a SYNC we did not send or our own heartbeat from
  another node. The writes and commands are named beside what they changed (:meth:`._context.DriveContext
  .foreign_cause`); another master is a loss of control at once once we command the drive, and refuses the
  bring-up before (:func:`._walks.attempt`).
* A statusword in FAULT, FAULT REACTION ACTIVE or QUICK STOP ACTIVE that no walk of ours caused: its code 0x603F
  is read by the worker (asked here, never a thread per fault).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import _dictionary as od
from ._context import DriveContext

FAULT_STATES = ("FAULT", "FAULT REACTION ACTIVE", "QUICK STOP ACTIVE")
RPDO_COB_BASES = (0x200, 0x300, 0x400, 0x500)
"""The predefined connection set's RPDO1..4 COB-IDs, less the node-ID."""


def emcy_text(payload: tuple[int, int]) -> str:
    from canopen.emcy import EmcyError

    code, register = payload
    desc = EmcyError(code, register, b"", 0.0).get_desc()
    return f"EMCY 0x{code:04X}{f' {desc}' if desc else ''} (error register 0x{register:02X})"


class Watch:
    """The subscriptions of one drive (see the module docstring)."""

    def __init__(self, c: DriveContext) -> None:
        self.c = c
        p = f"{c.name}: "
        self.emcy = c.notes.tally(p, "EMCY", emcy_text)
        self.writes = c.notes.tally(p, "SDO writes to it by another node",
                                    lambda x: f"another node writes its 0x{x[0]:04X}:{x[1]:02X} by SDO")
        self.commands = c.notes.tally(p, "NMT commands to it by another node",
                                      lambda x: f"another node sends it NMT 0x{x:02X}")
        self.masters = c.notes.tally(p, "frames of another master",
                                     lambda x: f"another master sends its RPDO COB-ID 0x{x:03X}")
        self.warnings = c.notes.tally(p, "statusword warnings", lambda sw: f"warning bit set (statusword 0x{sw:04X})")
        self.following = c.notes.tally(p, "following errors", lambda sw: f"following error (statusword 0x{sw:04X})")
        self._subscribed: list[tuple[int, Callable[..., None]]] = []
        self._on_heartbeat_state: Callable[[int], None] | None = None

    def attach(self, node: Any, on_heartbeat: Callable[[int], None]) -> None:
        """Subscribe (after ``network.add_node(node)``), replacing canopen's heartbeat and EMCY consumers."""
        c = self.c
        network, nid = c.bus.network, c.s.node_id
        network.unsubscribe(0x80 + nid, node.emcy.on_emcy)
        network.unsubscribe(0x700 + nid, node.nmt.on_heartbeat)
        self._on_heartbeat_state = on_heartbeat
        subs: list[tuple[int, Callable[..., None]]] = [
            (0x80 + nid, self._on_emcy), (0x700 + nid, self._on_heartbeat), (0x600 + nid, self._on_sdo_request),
            (0x000, self._on_nmt), *((base + nid, self._on_rpdo) for base in RPDO_COB_BASES)]
        for cob_id, fn in subs:
            network.subscribe(cob_id, fn)
        self._subscribed = subs
        c.listening_since = time.monotonic()
        c.bus.watch(self._on_bus_conflict)

    def watch_rpdos(self, cob_ids: list[int]) -> None:
        """Also the COB-IDs a drive's own mapping uses for our RPDOs (any thread; idempotent)."""
        network = self.c.bus.network
        for cob_id in cob_ids:
            if (cob_id, self._on_rpdo) not in self._subscribed:
                network.subscribe(cob_id, self._on_rpdo)
                self._subscribed.append((cob_id, self._on_rpdo))

    def detach(self, node: Any) -> None:
        c = self.c
        c.bus.unwatch(self._on_bus_conflict)
        for cob_id, fn in self._subscribed:
            if fn in c.bus.network.subscribers.get(cob_id, ()):
                c.bus.network.unsubscribe(cob_id, fn)
        self._subscribed = []

    # ---------------------------------------------------------------- the frames

    def _on_heartbeat(self, _can_id: int, data: bytes, _timestamp: float) -> None:
        """A heartbeat, a boot-up or an answer to node guarding (its state; bit 7, guarding's toggle, aside)."""
        if data and self._on_heartbeat_state is not None:
            self._on_heartbeat_state(data[0] & 0x7F)
            if data[0] == od.NMT_BOOT_UP:
                self.c.heard.set()

    def _on_emcy(self, _can_id: int, data: bytes, _timestamp: float) -> None:
        if len(data) < 3:
            return
        code, register = data[0] | (data[1] << 8), data[2]
        if code & 0xFF00 == 0:
            return  # Error reset / no error.
        self.c.emcy, self.c.emcy_at = (code, register), time.monotonic()
        self.emcy.hit((code, register))

    def _on_sdo_request(self, _can_id: int, data: bytes, _timestamp: float) -> None:
        from canopen.sdo.constants import REQUEST_DOWNLOAD

        if len(data) >= 4 and data[0] & 0xE0 == REQUEST_DOWNLOAD:
            index, sub = data[1] | (data[2] << 8), data[3]
            self.c.foreign_write = (index, sub, time.monotonic())
            self.writes.hit((index, sub))

    def _on_nmt(self, _can_id: int, data: bytes, _timestamp: float) -> None:
        if len(data) >= 2 and data[1] in (0, self.c.s.node_id):
            self.c.foreign_nmt = (data[0], time.monotonic())
            self.commands.hit(data[0])

    def _on_rpdo(self, can_id: int, _data: bytes, _timestamp: float) -> None:
        c = self.c
        count = c.foreign_rpdo.get(can_id, (0, 0.0))[0] + 1
        c.foreign_rpdo[can_id] = (count, time.monotonic())
        self.masters.hit(can_id)
        if c.up and c.stop_reason is None:
            c.lose_control(f"{c.name} has another master: its RPDO COB-ID 0x{can_id:03X} from another node ({count} "
                           "heard)")

    def _on_bus_conflict(self, describe: Callable[[], str]) -> None:
        c = self.c
        if c.up and c.stop_reason is None:
            c.lose_control(f"{c.name}: {describe()}")

    def statusword(self, sw: int) -> None:
        """A new statusword (from :meth:`~._drive.Cia402Drive._on_tpdo`)."""
        c = self.c
        state = od.state_of(sw)
        if sw & od.SW_WARNING:
            self.warnings.hit(sw)
        if c.ident.mode in (od.MODE_CSP, od.MODE_IP) and sw & od.SW_FOLLOWING_ERROR and state == "OPERATION ENABLED":
            self.following.hit(sw)
        if state in FAULT_STATES and not c.walking and not c.stopping and c.fault is None and c.up:
            c.fault_read = (state, sw)
            c.wake.set()
