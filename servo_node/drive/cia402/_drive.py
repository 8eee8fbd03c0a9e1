"""A CiA 402 drive on a CANopen bus as the control loop's drive (``servo.drive.backend = cia402``).

The loop sees the same seqlocked link as for a UDRAL drive (:mod:`.._remote_link`), so the same laws and the same
link model apply: a command takes effect at a SYNC boundary. This module is the network side, outside the tick:
every cycle (:mod:`._network`) the loop's command becomes RPDO1/2 (CSV: 0x60FF; CST: 0x6071 in ‰ of the rated
torque; CSP: 0x607A at the effect time with the velocity and torque offsets 0x60B1/0x60B2 from the reference),
the controlword follows the loop's engagement (Enable Operation while it commands, Disable Operation once it let
go: the loop lets go only at rest), and TPDO1/2 (statusword, position, velocity, torque) become the measurement,
stamped with the SYNC they answer. A drive that keeps its own PDO mapping is commanded and read through it
(:class:`._bringup.PdoLayout`). A fault (statusword, EMCY), an unexpected quick stop, a silent heartbeat or a
failed bring-up is :meth:`Cia402Drive.fault`; only :meth:`Cia402Drive.rearm` resets a drive fault.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._seqlock import read_seqlocked
from ...errors import ErrorCode
from .. import _remote_link as link
from .._bus import BusDrive
from .._table import require
from . import _dictionary as od
from . import _network
from ._bringup import BringUpError, Identity, PdoLayout, Settings, configure, identify
from ._registers import specs
from ._units import I32, clip_counts, cycle_targets, drive_view

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterReader, RegisterSpec

_logger = logging.getLogger(__name__)

FAULT_STATES = ("FAULT", "FAULT REACTION ACTIVE", "QUICK STOP ACTIVE")
ANSWER_RETRY_S = 1.0
"""A drive that does not answer, or did not take a transition of the bring-up in time, is tried again this often
(reported as error 11 meanwhile) [second]."""


class Cia402Drive(BusDrive):
    """One axis's CiA 402 drive; the CANopen network is shared with the other axes on its bus."""

    modes = ("velocity", "torque", "position")

    def __init__(self, bus: _network.CanopenBus, settings: Settings) -> None:
        super().__init__()
        self._bus = bus
        self.s = settings
        self._rx_lock = threading.Lock()  # Two writers of rx (the cycle and the TPDO callbacks): one at a time.
        self._node: Any = None
        self._ident = Identity()
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._ready = False  # PDOs mapped, NMT operational: the cycle commands the drive.
        self._tx = np.empty(link.N_TX)
        self._cw = od.CW_SHUTDOWN
        self._walking = False  # Bring-up, re-arm or homing owns the controlword.
        self._enable_asked_at = math.nan
        self.statusword = -1
        self._p_counts = 0
        self._p_received = 0.0
        self._layout: PdoLayout | None = None  # Where the cycle's objects travel (set by the bring-up).
        self._mode_cmd = od.MODE_OF_LAW[settings.law]  # 0x6060 as an RPDO carries it (a drive's own mapping may).
        self._v_counts = 0
        self._f_permille = 0
        self._last_v = math.nan
        self._last_stamp = math.nan
        self._fault: tuple[ErrorCode, str] | None = None
        self._error_code = 0
        self._emcy: tuple[int, str] | None = None
        self._events: list[str] = []
        self._last_heartbeat = math.nan
        self.released = False

    # ---------------------------------------------------------------- backend hooks

    @classmethod
    def register_specs(cls) -> Mapping[str, RegisterSpec]:
        """``servo.drive.can.*`` and ``servo.drive.canopen.*`` (:mod:`._registers`)."""
        return specs()

    @classmethod
    def create(cls, reg: RegisterReader, node: Any, port_prefix: str = "") -> Cia402Drive:
        """Open (or share) the CANopen bus; the drive is brought up by :meth:`start`.

        :raises ConfigurationError: canopen missing, or the iface cannot be opened.
        """
        require("canopen", "cia402", "pip install 'canopen>=2.4,<3'")
        s = Settings(
            node_id=int(reg.real("servo.drive.canopen.node_id")),
            law=reg.text("servo.drive.mode"),
            counts_per_unit=reg.real("servo.drive.canopen.counts_per_unit"),
            rated_torque=reg.real("servo.drive.canopen.rated_torque"),
            period_s=1.0 / reg.real("servo.drive.rate"),
            heartbeat_s=reg.real("servo.drive.canopen.heartbeat"),
            master_id=int(reg.real("servo.drive.canopen.master_id")),
            timeout_s=reg.real("servo.drive.canopen.timeout"),
            homing_method=int(reg.real("servo.drive.canopen.homing_method")),
            home_offset=reg.real("servo.drive.canopen.home_offset"),
            inertia=reg.real("servo.control.inertia") or 1.0,
            compensation=reg.text("servo.drive.compensation") == "predict",
            lost_after_s=reg.real("servo.drive.feedback_timeout"),
        )
        bus = _network.acquire(
            reg.text("servo.drive.can.iface"), int(reg.real("servo.drive.can.bitrate")), 1.0 / s.period_s,
            reg.flag("servo.drive.canopen.sync_producer"), s.master_id, s.heartbeat_s,
        )
        return cls(bus, s)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Bring the drive up in a thread of its own (SDO is blocking); idempotent."""
        if self._thread is None and not self.released:
            self._thread = threading.Thread(target=self._bring_up, name=f"cia402 {self.s.node_id}", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop commanding and leave the bus at once (the drive's heartbeat watch then quick-stops it); idempotent."""
        if self.released:
            return
        self.released = True
        self._closing.set()
        self._bus.remove_cycler(self._cycle)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.s.timeout_s * 3 + 1.0)
        if self._node is not None:
            self._bus.network.nodes.pop(self.s.node_id, None)
        self._bus.release()

    async def stop(self) -> None:
        """After the loop let go (at rest): Disable Operation, Shutdown, NMT pre-operational, the drive's watch of
        our heartbeat off, then leave the bus; idempotent."""
        import asyncio

        if not self.released:
            await asyncio.get_running_loop().run_in_executor(None, self._stand_down)
        self.close()

    def _stand_down(self) -> None:
        node = self._node
        if node is None or not self._ready:
            return
        self._walking = True
        try:
            for cw, want in ((od.CW_SWITCH_ON, "SWITCHED ON"), (od.CW_SHUTDOWN, "READY TO SWITCH ON")):
                if self.state() in FAULT_STATES:
                    break
                self._cw = cw
                self._wait_state(want, min(self.s.timeout_s, 0.5))
            self._bus.remove_cycler(self._cycle)
            node.nmt.state = "PRE-OPERATIONAL"
            node.sdo[od.CONSUMER_HEARTBEAT][1].raw = 0
        except Exception as ex:  # Leaving anyway: the drive's own watch covers what did not get through.
            _logger.info("CANopen node %d: stand-down incomplete: %s", self.s.node_id, ex)

    # ---------------------------------------------------------------- bring-up (its own thread)

    def _bring_up(self) -> None:
        """Bring the drive up; any failure (no answer, a refusal, a transition not taken in time) is reported as
        error 11 and the whole bring-up tried again every :data:`ANSWER_RETRY_S` until it succeeds (a drive booting
        after us, power-cycled, or a host stalled by kernel compilation), then the error is cleared."""
        import canopen

        s = self.s
        reported: tuple[ErrorCode, str] | None = None
        node = canopen.RemoteNode(s.node_id, od.dictionary())
        node.sdo.RESPONSE_TIMEOUT = s.timeout_s
        self._bus.network.add_node(node)
        self._node = node
        for n in range(1, 5):
            node.tpdo[n].add_callback(lambda m, n=n: self._on_tpdo(n, m))
        node.emcy.add_callback(self._on_emcy)
        node.nmt.add_heartbeat_callback(self._on_heartbeat)
        try:
            while not self._closing.is_set():
                self._walking = True
                try:
                    self._attempt(node)
                    if reported is not None and self._fault == reported:
                        self._fault = None  # It is up now.
                    if self.state() in ("FAULT", "FAULT REACTION ACTIVE"):
                        self._read_fault(self.state(), self.statusword)  # Stays so until an explicit re-arm.
                    _logger.info("CANopen node %d up: %s, %s", s.node_id, self.state(), self._ident.view())
                    return
                except Exception as ex:  # canopen/bus errors too: reported, never a silent hang.
                    text = str(ex) if isinstance(ex, BringUpError) else f"bring-up failed: {ex!r}"
                    failure = (ErrorCode.DRIVE_FAULT, f"CANopen node {s.node_id}: {text}")
                    if self._fault is None or self._fault == reported:
                        if self._fault != failure:
                            _logger.warning("%s", failure[1])
                        self._fault = reported = failure
                    elif self._fault != reported:
                        return  # A fault of the drive itself: it waits for a re-arm.
                if self._closing.wait(ANSWER_RETRY_S):
                    return
                while not node.sdo.responses.empty():  # Late answers to what timed out must not answer anew.
                    node.sdo.responses.get_nowait()
        finally:
            self._walking = False

    def _attempt(self, node: Any) -> None:
        """One bring-up: identify, configure, NMT operational, the first statusword, the walk to SWITCHED ON."""
        s = self.s
        t0 = time.monotonic()
        self._ident = identify(node, s, self._bus.iface)
        self._layout = configure(node, s)
        _logger.info("CANopen node %d identified and configured in %.3g s", s.node_id, time.monotonic() - t0)
        if not self._layout.own:
            self._events.append(f"remapping refused: {self._layout.view()}")
            _logger.warning("CANopen node %d refused the PDO remapping; using %s", s.node_id, self._layout.view())
        self._ready = True
        self._bus.add_cycler(self._cycle)
        node.nmt.state = "OPERATIONAL"
        self._wait(lambda: self.statusword >= 0, "the first TPDO (statusword) after NMT OPERATIONAL")
        self._walk_to_switched_on()

    def _walk_to_switched_on(self) -> None:
        """Shutdown → Switch On, each transition within ``timeout``; a drive in fault waits for a re-arm."""
        state = self.state()
        if state in ("FAULT", "FAULT REACTION ACTIVE"):
            return  # Reported by the caller; it stays so until an explicit re-arm.
        if state != "SWITCHED ON":
            self._cw = od.CW_SHUTDOWN
            self._wait_state("READY TO SWITCH ON")
            self._cw = od.CW_SWITCH_ON
            self._wait_state("SWITCHED ON")

    def _wait_state(self, want: str, timeout: float | None = None) -> None:
        self._wait(lambda: self.state() == want, f"state {want} (controlword 0x{self._cw:04X})", timeout)

    def _wait(self, predicate: Any, what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.s.timeout_s if timeout is None else timeout)
        while not predicate():
            if self._closing.is_set():
                raise BringUpError("closed")
            if time.monotonic() > deadline:
                raise BringUpError(f"timed out waiting for {what}; the drive is in {self.state()}")
            time.sleep(0.002)

    # ---------------------------------------------------------------- the cycle (bus thread)

    def _cycle(self) -> None:
        """Put this cycle's command on the bus: controlword and targets by RPDO; record what was sent."""
        node, lay = self._node, self._layout
        if not self._ready or node is None or lay is None:
            return

        def put(index: int, value: int) -> None:
            node.rpdo[lay.rpdo[index]][index].raw = value

        tx = self._tx
        read_seqlocked(self.arrays.tx, tx)
        engaged = tx[link.TX_ENABLE] != 0.0
        state = self.state()
        if not self._walking:
            self._cw = self._controlword(engaged, state)
        applied = engaged and state == "OPERATION ENABLED"
        put(od.CONTROLWORD, self._cw)
        if od.MODES_OF_OPERATION in lay.rpdo:
            put(od.MODES_OF_OPERATION, self._mode_cmd)
        targets, v, f = cycle_targets(self.s, self._ident.rated_torque, tx, applied, self._p_counts)
        for index, value in targets:
            put(index, value)
        for n in lay.rpdos:
            node.rpdo[n].transmit()
        if applied:
            with self._rx_lock:
                self.record_send(time.monotonic(), v, f, self._bus.next_cycle_at())
        self._supervise(engaged, state)

    def _controlword(self, engaged: bool, state: str) -> int:
        """Enable Operation while the loop commands, Disable Operation once it let go (at rest)."""
        if state in ("SWITCHED ON", "OPERATION ENABLED"):
            if engaged and self._fault is None:
                if state == "SWITCHED ON" and math.isnan(self._enable_asked_at):
                    self._enable_asked_at = time.monotonic()
                return od.CW_ENABLE
            return od.CW_SWITCH_ON
        return self._cw  # Fault, quick stop, or not up: unchanged until a re-arm walks it.

    def _supervise(self, engaged: bool, state: str) -> None:
        """Transition timeout of Enable Operation; the drive's heartbeat."""
        now = time.monotonic()
        if state == "OPERATION ENABLED" or not engaged:
            self._enable_asked_at = math.nan
        elif now - self._enable_asked_at > self.s.timeout_s:
            self._enable_asked_at = math.nan
            self._set_fault(ErrorCode.DRIVE_FAULT, f"CANopen node {self.s.node_id}: Enable Operation not taken "
                            f"within {self.s.timeout_s:g} s; the drive is in {state}")
        silent = now - self._last_heartbeat
        limit = max(3.0 * self.s.heartbeat_s, self.s.lost_after_s)
        lost = self._fault is not None and self._fault[0] is ErrorCode.DRIVE_LOST
        if silent > limit and self._fault is None:
            self._set_fault(ErrorCode.DRIVE_LOST, f"CANopen node {self.s.node_id}: heartbeat silent for "
                            f"{silent:.3g} s (> {limit:g} s)")
        elif lost and silent <= limit:
            self._fault = None  # It is heard again: lost, not faulted (as the loop's own drive-lost ends).
            self._events.append("heartbeat heard again")

    # ---------------------------------------------------------------- receptions (canopen's receive thread)

    def _on_tpdo(self, n: int, m: Any) -> None:
        """A TPDO of this cycle: the objects the layout reads from it; the last one completes the measurement."""
        lay = self._layout
        if lay is None or n not in lay.tpdo.values():
            return
        received = time.monotonic()
        if n == lay.first_tpdo:
            self._p_received = received
        sw = -1
        for index, k in lay.tpdo.items():
            if k != n:
                continue
            value = int(m[index].raw)
            if index == od.STATUSWORD:
                sw = value
            elif index == od.POSITION_ACTUAL:
                self._p_counts = value
            elif index == od.VELOCITY_ACTUAL:
                self._v_counts = value
            elif index == od.TORQUE_ACTUAL:
                self._f_permille = value
        if sw >= 0 and sw != self.statusword:
            self.statusword = sw
            self._check_statusword(sw)
        if n == lay.last_tpdo:
            self._measured(received)

    def _measured(self, received: float) -> None:
        k = self.s.counts_per_unit
        # The drive sampled its state when the SYNC reached it, between our sending of it and the reception of its
        # answer: the middle of that round trip (the symmetric split NTP makes), good to its asymmetry.
        sync_at = self._bus.sync_at()
        stamp = 0.5 * (sync_at + self._p_received) if self._p_received >= sync_at else sync_at
        v = self._v_counts / k
        rated = self._ident.rated_torque
        f = self._f_permille / 1000.0 * rated
        dt = stamp - self._last_stamp
        a = (v - self._last_v) / dt if dt > 0.0 and math.isfinite(self._last_v) else 0.0
        self._last_v, self._last_stamp = v, stamp
        with self._rx_lock:
            self.record_measurement(self._p_counts / k, v, a, f, received, stamp)

    def _on_emcy(self, err: Any) -> None:
        if err.code == 0:
            return  # Error reset / no error.
        self._emcy = (int(err.code), str(err.get_desc()))
        self._events.append(f"EMCY 0x{err.code:04X} {err.get_desc()} (error register 0x{err.register:02X})")

    def _on_heartbeat(self, _state: int) -> None:
        self._last_heartbeat = time.monotonic()

    def _check_statusword(self, sw: int) -> None:
        state = od.state_of(sw)
        if sw & od.SW_WARNING:
            self._events.append(f"warning bit set (statusword 0x{sw:04X})")
        if self.s.law == "position" and sw & od.SW_FOLLOWING_ERROR and state == "OPERATION ENABLED":
            self._events.append(f"following error (statusword 0x{sw:04X})")
        if state in FAULT_STATES and not self._walking and self._fault is None:
            threading.Thread(target=self._read_fault, args=(state, sw), daemon=True).start()

    def _read_fault(self, state: str, sw: int) -> None:
        """The drive's error code (0x603F) by SDO (not from the receive thread, which SDO answers need)."""
        code = 0
        try:
            code = int(self._node.sdo[od.ERROR_CODE].raw)
        except Exception as ex:  # The code is a detail; the fault stands.
            _logger.info("CANopen node %d: 0x603F unreadable: %s", self.s.node_id, ex)
        self._error_code = code
        emcy = f", EMCY 0x{self._emcy[0]:04X} {self._emcy[1]}" if self._emcy else ""
        self._set_fault(ErrorCode.DRIVE_FAULT, f"CANopen node {self.s.node_id}: {state} (statusword 0x{sw:04X}), "
                        f"error code 0x{code:04X}{emcy}")

    def _set_fault(self, code: ErrorCode, text: str) -> None:
        if self._fault is None:
            self._fault = (code, text)
            _logger.warning("%s", text)

    # ---------------------------------------------------------------- views and commands (event loop)

    def state(self) -> str:
        """The drive's CiA 402 state from its last statusword."""
        return od.state_of(self.statusword)

    def fault(self) -> tuple[ErrorCode, str] | None:
        """The error that keeps this drive from moving (a drive fault, a silent drive, a failed bring-up)."""
        return self._fault

    def events(self) -> list[str]:
        """Warnings and EMCY since the last call (for diagnostics)."""
        out, self._events = self._events, []
        return out

    def view(self) -> dict[str, Any]:
        """The drive's part of the axis's ``sys.drive`` (see :func:`._units.drive_view`)."""
        return drive_view(self.s, self.statusword, self._error_code, self._emcy, self._ident, self._layout)

    def rearm(self) -> bool:
        """Fault reset (the rising edge of controlword bit 7), then Shutdown → Switch On; clears our fault when the
        drive is back in SWITCHED ON (in a thread: the walk waits for the drive). False: not up, or busy."""
        if not self._ready or (self._thread is not None and self._thread.is_alive()):
            return False
        self._thread = threading.Thread(target=self._rearm, name=f"cia402 rearm {self.s.node_id}", daemon=True)
        self._thread.start()
        return True

    def home(self) -> bool:
        """Homing (mode 6, ``servo.drive.canopen.homing_method`` and ``home_offset``) on the user's explicit command
        only, with the loop disengaged; then back to the cyclic mode in SWITCHED ON (in a thread). False: not
        possible now (not up, busy, or the loop commands the drive)."""
        read_seqlocked(self.arrays.tx, self._tx)
        busy = self._thread is not None and self._thread.is_alive()
        if not self._ready or busy or self._tx[link.TX_ENABLE] != 0.0 or self.state() != "SWITCHED ON":
            return False
        self._thread = threading.Thread(target=self._home, name=f"cia402 home {self.s.node_id}", daemon=True)
        self._thread.start()
        return True

    def _home(self) -> None:
        s, node = self.s, self._node
        self._walking = True
        try:
            node.sdo[od.HOMING_METHOD].raw = s.homing_method
            node.sdo[od.HOME_OFFSET].raw = clip_counts(s.home_offset * s.counts_per_unit, I32)
            node.sdo[od.MODES_OF_OPERATION].raw = od.MODE_HOMING
            self._mode_cmd = od.MODE_HOMING
            self._cw = od.CW_ENABLE
            self._wait_state("OPERATION ENABLED")
            self._cw = od.CW_HOMING_START
            self._wait(lambda: self.statusword & (od.SW_HOMING_ATTAINED | od.SW_TARGET_REACHED)
                       == od.SW_HOMING_ATTAINED | od.SW_TARGET_REACHED, "homing attained")
            if self.statusword & od.SW_FOLLOWING_ERROR:
                raise BringUpError(f"homing error (statusword 0x{self.statusword:04X})")
            self._events.append(f"homed (method {s.homing_method}) at {self._p_counts / s.counts_per_unit:.6g}")
        except Exception as ex:  # Reported; the drive is put back below either way.
            self._events.append(f"homing failed: {ex}")
        finally:
            try:
                self._cw = od.CW_SWITCH_ON
                self._wait_state("SWITCHED ON")
                node.sdo[od.MODES_OF_OPERATION].raw = od.MODE_OF_LAW[s.law]
                self._mode_cmd = od.MODE_OF_LAW[s.law]
            except Exception as ex:
                self._set_fault(ErrorCode.DRIVE_FAULT, f"CANopen node {s.node_id}: after homing: {ex}")
            self._walking = False

    def _rearm(self) -> None:
        self._walking = True
        try:
            if self.state() in ("FAULT", "FAULT REACTION ACTIVE"):
                self._cw = od.CW_DISABLE_VOLTAGE
                time.sleep(2 * self.s.period_s)
                self._cw = od.CW_FAULT_RESET
                self._wait_state("SWITCH ON DISABLED")
            elif self.state() == "QUICK STOP ACTIVE":
                self._cw = od.CW_DISABLE_VOLTAGE
                self._wait_state("SWITCH ON DISABLED")
            self._walk_to_switched_on()
            self._fault, self._emcy, self._error_code = None, None, 0
            self._events.append("re-armed: the drive is SWITCHED ON")
        except BringUpError as ex:
            self._events.append(f"re-arm failed: {ex}")
        finally:
            self._walking = False
