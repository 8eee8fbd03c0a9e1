"""What the servo knows of one ODrive axis: its last heartbeat, its fault as the axis's error, the answers the
bring-up waits for, what was dropped and why, and ``sys.drive``.

Written by the bus's receive thread (heartbeats, answers, strangers' frames), the cycle thread (supervision) and the
bring-up or re-arm thread; plain attribute writes and a queue, read by the event loop's views.
"""

from __future__ import annotations

import logging
import math
import queue
from typing import Any

from cyphal_common import odrive as cs

from ...errors import ErrorCode
from ._frames import CONTROL_MODE, Settings

_logger = logging.getLogger(__name__)

EVENTS_MAX = 64
"""Events kept between two reads (more are dropped, counted in ``sys.drive``)."""


class DriveState:
    """One axis's state as heard, and its fault."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.heartbeat: cs.Heartbeat | None = None
        self.heard_at = -math.inf
        """Reception time of the last heartbeat (monotonic)."""
        self.fault: tuple[ErrorCode, str] | None = None
        self.ready = False
        """Brought up: the cycle commands the drive."""
        self.walking = False
        """The bring-up or a re-arm owns the axis state (the cycle asks for none)."""
        self.version: tuple[str, str] | None = None
        self.watchdog: str | None = None
        """How the bring-up left the watchdog: its timeout written and read back, or "user's" (not configured here);
        None before."""
        self.torque = math.nan
        """The last Get_Torques estimate [N·m] (NaN: none heard)."""
        self.dropped = 0
        """Frames of this node-ID dropped: not decodable."""
        self.strangers = 0
        """Frames of this node-ID only a master sends (commands, requests): another master on the bus."""
        self._answers: queue.Queue[tuple[int, bytes]] = queue.Queue(maxsize=64)
        self._events: list[str] = []
        self._reported: set[tuple[str, int]] = set()

    # ---------------------------------------------------------------- receptions

    def on_heartbeat(self, hb: cs.Heartbeat, received: float) -> None:
        """A heartbeat: an axis error is the drive's fault (unless the bring-up or a re-arm is handling it)."""
        self.heartbeat, self.heard_at = hb, received
        if hb.error and self.fault is None and not self.walking and self.ready:
            self.set_fault(ErrorCode.DRIVE_FAULT, self.error_text(hb))

    def error_text(self, hb: cs.Heartbeat) -> str:
        return (f"ODrive node {self.s.node_id}: axis error 0x{hb.error:08X} {cs.error_names(hb.error)}, "
                f"{cs.state_name(hb.state)}, procedure result {cs.result_name(hb.result)}")

    def answer(self, command: int, data: bytes) -> None:
        """An answer the bring-up may be waiting for (the oldest is dropped when nobody reads them)."""
        try:
            self._answers.put_nowait((command, data))
        except queue.Full:
            try:
                self._answers.get_nowait()
            except queue.Empty:
                pass
            self.answer(command, data)

    def await_answer(self, command: int, timeout: float) -> bytes | None:
        """The next answer of ``command`` within ``timeout`` (others are discarded)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            try:
                got, data = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if got == command:
                return data

    def malformed(self, command: int, length: int) -> None:
        """A frame of this node-ID that does not decode: dropped, counted, reported once per command."""
        self.dropped += 1
        self._once(("malformed", command), f"ODrive node {self.s.node_id}: {cs.COMMAND_NAMES.get(command, command)} "
                   f"of {length} bytes dropped (cannot be decoded)")

    def foreign(self, command: int, rtr: bool) -> None:
        """A frame only a master sends, for this node-ID, not from us (our own never come back): another master.

        A request (RTR) changes nothing at the drive: counted and reported. A command does: the drive answers to
        two masters, so this one refuses to move it (the axis's error until a re-arm)."""
        self.strangers += 1
        name = cs.COMMAND_NAMES.get(command, str(command))
        if rtr:
            self._once(("request", command), f"ODrive node {self.s.node_id}: another master requests {name}")
            return
        text = f"ODrive node {self.s.node_id}: another master on {self.s.iface} sends it {name}"
        self._once(("command", command), text)
        if self.fault is None or self.fault[0] is not ErrorCode.DRIVE_FAULT:
            self.fault = None
            self.set_fault(ErrorCode.DRIVE_FAULT, text + "; this servo does not share a drive")

    # ---------------------------------------------------------------- supervision (the cycle thread)

    def state(self) -> int:
        """The axis state of the last heartbeat (UNDEFINED: none)."""
        return int(self.heartbeat.state) if self.heartbeat is not None else int(cs.AxisState.UNDEFINED)

    def supervise(self, now: float, engaged: bool, closed: bool, requested_at: float, entered: bool) -> None:
        """The heartbeat's silence, and closed loop entered in time and kept while commanded."""
        s = self.s
        silent = now - self.heard_at
        lost = self.fault is not None and self.fault[0] is ErrorCode.DRIVE_LOST
        if silent > s.lost_after_s and self.fault is None:
            self.set_fault(ErrorCode.DRIVE_LOST, f"ODrive node {s.node_id}: heartbeat silent for {silent:.3g} s "
                           f"(> {s.lost_after_s:g} s)")
        elif lost and silent <= s.lost_after_s:
            self.fault = None  # Heard again: lost, not faulted (as the loop's own drive-lost ends).
            self.event(f"ODrive node {s.node_id}: heartbeat heard again")
        if not engaged or self.walking or self.fault is not None or math.isnan(requested_at):
            return
        hb = self.heartbeat
        if entered and not closed and hb is not None and self.heard_at > requested_at:
            self.set_fault(ErrorCode.DRIVE_FAULT, f"ODrive node {s.node_id}: left CLOSED_LOOP_CONTROL while "
                           f"commanded; now {cs.state_name(hb.state)}, procedure result {cs.result_name(hb.result)}")
        elif not entered and now - requested_at > s.timeout_s:
            state = cs.state_name(self.state())
            result = cs.result_name(hb.result) if hb is not None else "none"
            self.set_fault(ErrorCode.DRIVE_FAULT, f"ODrive node {s.node_id}: CLOSED_LOOP_CONTROL not entered within "
                           f"{s.timeout_s:g} s; the axis is in {state}, procedure result {result}")

    def set_fault(self, code: ErrorCode, text: str) -> None:
        if self.fault is None:
            self.fault = (code, text)
            _logger.warning("%s", text)

    # ---------------------------------------------------------------- reports

    def event(self, text: str) -> None:
        if len(self._events) < EVENTS_MAX:
            self._events.append(text)

    def _once(self, key: tuple[str, int], text: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            _logger.warning("%s", text)
            self.event(text)

    def take_events(self) -> list[str]:
        out, self._events = self._events, []
        return out

    def view(self) -> dict[str, Any]:
        """``sys.drive`` (a register string holds 256 bytes: compact): node-ID, state, axis error (with its names
        when set), procedure result, control mode, firmware, the watchdog, frames dropped and strangers' frames."""
        hb = self.heartbeat
        error = hb.error if hb is not None else 0
        return {
            "node": self.s.node_id,
            "state": cs.state_name(hb.state) if hb is not None else "UNKNOWN",
            "error": f"0x{error:08X}",
            **({"errors": cs.error_names(error)} if error else {}),
            "result": cs.result_name(hb.result) if hb is not None else None,
            "mode": CONTROL_MODE[self.s.law].name,
            "fw": self.version[0] if self.version else None,
            "watchdog": self.watchdog,
            "dropped": self.dropped,
            "strangers": self.strangers,
        }
