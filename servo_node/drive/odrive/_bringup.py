"""Bring-up and re-arm of an ODrive axis (each in a thread of its own: they wait for the drive's answers).

Bring-up: the heartbeat heard; the version read (Get_Version); with ``servo.drive.odrive.endpoints`` the watchdog
written and read back (:mod:`._endpoints`); the axis left in closed loop by someone else put to IDLE; a
WATCHDOG_TIMER_EXPIRED alone — left by a servo that went silent before this one — cleared; the controller mode set
(PASSTHROUGH). Any failure is error 11 with its reason and the whole bring-up is tried again every
:data:`RETRY_S` until it succeeds (a drive powered after the servo). Any other axis error stays the axis's error
until the user re-arms (Clear_Errors).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from cyphal_common import odrive as cs

from ...errors import ErrorCode
from . import _endpoints as ep
from ._endpoints import BringUpError
from ._frames import CONTROL_MODE, Settings
from ._state import DriveState


class OdriveDrive(Protocol):
    """What the bring-up and the re-arm use of the drive (:class:`._drive.OdriveDrive`)."""

    d: DriveState
    s: Settings

    def send(self, command: int, data: bytes, rtr: bool = False) -> bool: ...

_logger = logging.getLogger(__name__)

RETRY_S = 1.0
"""A failed bring-up is tried again this often (reported as error 11 meanwhile) [second]."""


def bring_up(drive: OdriveDrive, closing: threading.Event) -> None:
    """Bring the drive up (see the module docstring); returns once up or closing."""
    d, s = drive.d, drive.s
    reported: tuple[ErrorCode, str] | None = None
    try:
        while not closing.is_set():
            d.walking = True
            try:
                _attempt(drive, closing)
                if reported is not None and d.fault == reported:
                    d.fault = None  # It is up now.
                d.ready = True
                hb = d.heartbeat
                if hb is not None and hb.error:
                    d.set_fault(ErrorCode.DRIVE_FAULT, d.error_text(hb))  # Stays so until an explicit re-arm.
                _logger.info("ODrive node %d up on %s: firmware %s, watchdog %s", s.node_id, s.iface,
                             d.version[0] if d.version else "unknown", d.watchdog)
                return
            except BringUpError as ex:
                failure = (ErrorCode.DRIVE_FAULT, f"ODrive node {s.node_id} on {s.iface}: {ex}")
                if d.fault is None or d.fault == reported:
                    if d.fault != failure:
                        _logger.warning("%s", failure[1])
                    d.fault = reported = failure
            if closing.wait(RETRY_S):
                return
    finally:
        d.walking = False


def _attempt(drive: OdriveDrive, closing: threading.Event) -> None:
    d, s = drive.d, drive.s
    _wait(lambda: d.heartbeat is not None and time.monotonic() - d.heard_at < s.lost_after_s, closing, s.timeout_s,
          f"no heartbeat from ODrive node-ID {s.node_id} within {s.timeout_s:g} s (its axis0.config.can.node_id, "
          "heartbeat_msg_rate_ms > 0 and the bit rate must match)")

    def send(command: int, data: bytes, rtr: bool) -> None:
        drive.send(command, data, rtr)

    d.version = ep.version(send, d.await_answer, s.timeout_s)
    if s.endpoints:
        eps = ep.Endpoints(s.endpoints)
        ep.configure_watchdog(eps, d.version, s.watchdog_s, send, d.await_answer, s.timeout_s)
        d.watchdog = f"{s.watchdog_s:g} s"
        d.event(f"ODrive node {s.node_id}: watchdog {s.watchdog_s:g} s written and read back ({eps.path}, firmware "
                f"{eps.fw})")
    else:
        d.watchdog = "user's"
        d.event(f"ODrive node {s.node_id}: watchdog not configured by the servo (servo.drive.odrive.endpoints is "
                "empty): set axis0.config.enable_watchdog and watchdog_timeout on the drive")
    if d.state() == cs.AxisState.CLOSED_LOOP_CONTROL:  # Left so by someone else: nothing moves it until we engage.
        drive.send(cs.SET_AXIS_STATE, cs.pack_u32(cs.AxisState.IDLE))
        _wait(lambda: d.state() != cs.AxisState.CLOSED_LOOP_CONTROL, closing, s.timeout_s,
              "the axis, found in CLOSED_LOOP_CONTROL, did not go IDLE")
    hb = d.heartbeat
    if hb is not None and hb.error and not hb.error & ~cs.AxisError.WATCHDOG_TIMER_EXPIRED:
        _clear(drive, closing)
        d.event(f"ODrive node {s.node_id}: cleared a WATCHDOG_TIMER_EXPIRED left from before this servo")
    drive.send(cs.SET_CONTROLLER_MODE, cs.pack_u32(CONTROL_MODE[s.law], cs.InputMode.PASSTHROUGH))


def _clear(drive: OdriveDrive, closing: threading.Event) -> None:
    """Clear_Errors, then a heartbeat sent after it without an axis error. :raises BringUpError: not in time."""
    d = drive.d
    sent_at = time.monotonic()
    drive.send(cs.CLEAR_ERRORS, b"\0")
    _wait(lambda: d.heard_at > sent_at + 0.005 and d.heartbeat is not None and not d.heartbeat.error, closing,
          max(drive.s.timeout_s, 3 * 0.1), "the axis error did not clear after Clear_Errors")


def rearm(drive: OdriveDrive, done: Future[bool]) -> None:
    """The user's re-arm: Clear_Errors; our fault cleared once the drive reports no axis error (``done``: True)."""
    d, s = drive.d, drive.s
    d.walking = True
    ok = False
    try:
        _clear(drive, threading.Event())
        d.fault = None
        ok = True
        d.event(f"ODrive node {s.node_id}: re-armed (Clear_Errors; no axis error)")
    except BringUpError as ex:
        hb = d.heartbeat
        d.event(f"ODrive node {s.node_id}: re-arm failed: {ex}" + (f" ({d.error_text(hb)})" if hb else ""))
    finally:
        d.walking = False
        done.set_result(ok)


def _wait(predicate: Callable[[], bool], closing: threading.Event, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if closing.is_set():
            raise BringUpError("closed")
        if time.monotonic() > deadline:
            raise BringUpError(what)
        time.sleep(0.005)
