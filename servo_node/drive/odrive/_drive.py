"""An ODrive axis on CAN (CAN Simple protocol, firmware 0.6) as the control loop's drive (``servo.drive.backend =
odrive``).

The loop sees the same seqlocked link as for the other bus drives (:mod:`.._remote_link`). This module is the
network side, outside the tick. A cycle thread sends, every ``servo.drive.rate`` period, the loop's command as a
Set_Input_* frame (:mod:`._frames`; not engaged: a holding one, which also keeps the drive's watchdog fed while
this node lives), asks for CLOSED_LOOP_CONTROL when the loop engages and for IDLE once it let go (at rest), and
watches the heartbeat. The bus's receive thread (:mod:`._canbus`) turns Get_Encoder_Estimates into the measurement
(stamped by the cadence of the drive's sending, :mod:`._cadence`) and the heartbeat into the drive's state. The
bring-up (:mod:`._bringup`) waits for the heartbeat, reads the
version, configures the watchdog where the endpoints are known, and sets the controller mode (PASSTHROUGH: the
servo plans, the drive's own trajectories are never used).

A drive's axis error, a closed loop not entered in time or left while commanded, another master commanding this
node-ID, a silent heartbeat or a failed bring-up is :meth:`OdriveDrive.fault`; only :meth:`OdriveDrive.rearm`
(Clear_Errors) resets it. Frames of this node-ID that cannot be decoded are dropped and counted; encoder estimates
that decode to NaN or to motion the drive cannot make are passed on for the loop to distrust (error 8 or 9).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from cyphal_common import odrive as cs

from ..._seqlock import read_seqlocked
from ...errors import ErrorCode
from .. import _remote_link as link
from .._bus import BusDrive
from .._table import require
from . import _bringup
from ._cadence import Cadence
from ._frames import CONTROL_MODE, TWO_PI, Settings, command_frame
from ._registers import specs
from ._state import DriveState

if TYPE_CHECKING:
    import can

    from cyphal_common.registers import RegisterReader, RegisterSpec

    from ._canbus import CanSimpleBus

_logger = logging.getLogger(__name__)

IDLE_REPEAT_S = 0.1
"""Set_Axis_State(IDLE) is sent again this often while the drive, let go, still reports closed loop [second]."""
ACCEL_WINDOW_S = 0.02
"""The measured acceleration is the velocity's change over at least this long (reception jitter) [second]."""


class OdriveDrive(BusDrive):
    """One ODrive axis; the CAN bus is shared with the other axes on it."""

    modes = ("velocity", "torque", "position")

    def __init__(self, bus: CanSimpleBus, settings: Settings) -> None:
        super().__init__()
        self._bus = bus
        self.s = settings
        self.d = DriveState(settings)
        self._rx_lock = threading.Lock()  # Two writers of rx (the cycle and the receive thread): one at a time.
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._attached = False
        self.released = False
        self._tx = np.empty(link.N_TX)
        self._requested_at = math.nan  # When closed loop was asked for (NaN: not asked since the loop engaged).
        self._entered = False  # The drive reported closed loop since.
        self._idle_sent_at = -math.inf
        self._p_turns = math.nan
        self._a_ref = (math.nan, math.nan)  # (reception time, velocity) the acceleration is measured from
        self._a = 0.0
        self._cadence = Cadence()

    # ---------------------------------------------------------------- backend hooks

    @classmethod
    def register_specs(cls) -> Mapping[str, RegisterSpec]:
        """``servo.drive.can.*`` and ``servo.drive.odrive.*`` (:mod:`._registers`)."""
        return specs()

    @classmethod
    def create(cls, reg: RegisterReader, node: Any, port_prefix: str = "") -> OdriveDrive:
        """Open (or share) the CAN bus; the drive is brought up by :meth:`start`.

        :raises ConfigurationError: python-can missing, or the iface cannot be opened.
        """
        require("can", "odrive", "pip install 'python-can>=4.6'")
        from . import _canbus

        iface = reg.text("servo.drive.can.iface")
        s = Settings(
            iface=iface.strip(),
            node_id=int(reg.real("servo.drive.odrive.node_id")),
            law=reg.text("servo.drive.mode"),
            units_per_turn=reg.real("servo.drive.odrive.units_per_turn"),
            period_s=1.0 / reg.real("servo.drive.rate"),
            timeout_s=reg.real("servo.drive.odrive.timeout"),
            lost_after_s=reg.real("servo.drive.feedback_timeout"),
            endpoints=reg.text("servo.drive.odrive.endpoints").strip(),
            watchdog_s=reg.real("servo.drive.odrive.watchdog"),
            inertia=reg.real("servo.control.inertia"),
            compensation=reg.text("servo.drive.compensation") == "predict",
        )
        return cls(_canbus.acquire(iface, int(reg.real("servo.drive.can.bitrate"))), s)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Listen, bring the drive up (its own thread: it waits for answers) and start the cycle; idempotent.

        :raises ConfigurationError: another axis of this node drives the same node-ID on the same bus.
        """
        if self._threads or self.released:
            return
        self._bus.attach(self.s.node_id, self._on_frame)
        self._attached = True
        for target, name in ((self._bring_up, "bring-up"), (self._run_cycle, "cycle")):
            thread = threading.Thread(target=target, name=f"odrive {self.s.node_id} {name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Stop commanding and leave the bus at once (the drive's watchdog then disarms it); idempotent."""
        if self.released:
            return
        self.released = True
        self._closing.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=self.s.timeout_s * 3 + 1.0)
        if self._attached:
            self._bus.detach(self.s.node_id)
        self._bus.release()

    async def stop(self) -> None:
        """After the loop let go (at rest): IDLE, then leave the bus; idempotent."""
        import asyncio

        if not self.released:
            await asyncio.get_running_loop().run_in_executor(None, self._stand_down)
        self.close()

    def _stand_down(self) -> None:
        d = self.d
        if not d.ready or d.heartbeat is None or d.heartbeat.state != cs.AxisState.CLOSED_LOOP_CONTROL:
            return
        d.walking = True
        self.send(cs.SET_AXIS_STATE, cs.pack_u32(cs.AxisState.IDLE))
        deadline = time.monotonic() + min(self.s.timeout_s, 0.5)
        while d.state() == cs.AxisState.CLOSED_LOOP_CONTROL and time.monotonic() < deadline:
            time.sleep(0.01)

    # ---------------------------------------------------------------- to the drive

    def send(self, command: int, data: bytes, rtr: bool = False) -> bool:
        """One frame to this node-ID (a remote frame asks for ``command``'s answer)."""
        import can

        msg = can.Message(arbitration_id=cs.arbitration_id(self.s.node_id, command), is_extended_id=False,
                          is_remote_frame=rtr, data=None if rtr else data, dlc=8 if rtr else len(data))
        return self._bus.send(msg)

    # ---------------------------------------------------------------- bring-up and re-arm (their own threads)

    def _bring_up(self) -> None:
        _bringup.bring_up(self, self._closing)

    def rearm(self) -> Future[bool]:
        """Clear_Errors, then clear our fault once a heartbeat after it shows no axis error (in a thread: it waits
        for the drive); the future holds False if the drive is not up, busy, or keeps its error."""
        done: Future[bool] = Future()
        if not self.d.ready or self.d.walking:
            done.set_result(False)
            return done
        thread = threading.Thread(target=_bringup.rearm, args=(self, done), name=f"odrive {self.s.node_id} rearm",
                                  daemon=True)
        thread.start()
        return done

    # ---------------------------------------------------------------- the cycle (its own thread)

    def _run_cycle(self) -> None:
        next_at = time.monotonic()
        while not self._closing.is_set():
            next_at += self.s.period_s
            if self.d.ready:
                try:
                    self._cycle(next_at)
                except Exception:  # Never let the command stream end silently (the watchdog would then act).
                    _logger.exception("ODrive node %d: cycle failed", self.s.node_id)
            delay = next_at - time.monotonic()
            if delay < -self.s.period_s:  # Overrun: restart the schedule from now instead of bursting.
                next_at = time.monotonic()
            self._closing.wait(max(0.0, delay))

    def _cycle(self, next_at: float) -> None:
        """This period's frames: the state the loop's engagement asks for, the command, the supervision."""
        d = self.d
        tx = self._tx
        read_seqlocked(self.arrays.tx, tx)
        engaged = tx[link.TX_ENABLE] != 0.0
        now = time.monotonic()
        closed = d.state() == cs.AxisState.CLOSED_LOOP_CONTROL
        if engaged:
            if closed:
                self._entered = True
            if not closed and not d.walking and d.fault is None and math.isnan(self._requested_at):
                self.send(cs.SET_CONTROLLER_MODE, cs.pack_u32(CONTROL_MODE[self.s.law], cs.InputMode.PASSTHROUGH))
                self.send(cs.SET_AXIS_STATE, cs.pack_u32(cs.AxisState.CLOSED_LOOP_CONTROL))
                self._requested_at, self._entered = now, False
        else:
            self._requested_at, self._entered = math.nan, False
            if closed and not d.walking and now - self._idle_sent_at >= IDLE_REPEAT_S:
                self.send(cs.SET_AXIS_STATE, cs.pack_u32(cs.AxisState.IDLE))
                self._idle_sent_at = now
        # Taken as in closed loop from the request until a heartbeat sent after it says otherwise.
        applied = engaged and (closed or (not self._entered and d.heard_at < self._requested_at + 0.02))
        command, data, v, f = command_frame(self.s, tx, engaged, self._p_turns)
        sent_at = time.monotonic()
        sent = self.send(command, data)
        with self._rx_lock:
            self.record_taking(applied or not engaged)
            if sent and applied:
                self.record_send(sent_at, v, f, next_at)
        d.supervise(now, engaged, closed, self._requested_at, self._entered)

    # ---------------------------------------------------------------- receptions (the bus's receive thread)

    def _on_frame(self, msg: can.Message, received: float) -> None:
        command = msg.arbitration_id & 0x1F
        data = bytes(msg.data)
        d = self.d
        if msg.is_remote_frame or command in cs.MASTER_COMMANDS:
            d.foreign(command, msg.is_remote_frame)
        elif command == cs.GET_ENCODER_ESTIMATES:
            try:
                p_turns, v_turns = cs.unpack_floats(data)
            except ValueError:
                d.malformed(command, len(data))
                return
            self._measured(p_turns, v_turns, received)
        elif command == cs.HEARTBEAT:
            try:
                d.on_heartbeat(cs.unpack_heartbeat(data), received)
            except ValueError:
                d.malformed(command, len(data))
        elif command == cs.GET_TORQUES:
            try:
                d.torque = cs.unpack_floats(data)[1]
            except ValueError:
                d.malformed(command, len(data))
        elif command in (cs.GET_VERSION, cs.TX_SDO, cs.GET_ERROR):
            d.answer(command, data)

    def _measured(self, p_turns: float, v_turns: float, received: float) -> None:
        upt = self.s.units_per_turn
        p, v = p_turns * upt, v_turns * upt
        self._p_turns = p_turns
        t0, v0 = self._a_ref
        if not math.isfinite(v):
            self._a = math.nan
        elif not math.isfinite(v0):
            self._a_ref, self._a = (received, v), 0.0
        elif received - t0 >= ACCEL_WINDOW_S:
            self._a = (v - v0) / (received - t0)
            self._a_ref = (received, v)
        torque = self.d.torque
        f = torque * TWO_PI / upt if math.isfinite(torque) else 0.0
        stamp = self._cadence.stamp(received)  # The drive stamps nothing: its sending cadence does.
        with self._rx_lock:
            self.record_measurement(p, v, self._a, f, received, stamp)

    # ---------------------------------------------------------------- views (event loop)

    def fault(self) -> tuple[ErrorCode, str] | None:
        """The error that keeps this drive from moving (an axis error, a silent heartbeat, a failed bring-up…)."""
        return self.d.fault

    def events(self) -> list[str]:
        """What happened since the last call (for the diagnostics)."""
        return self.d.take_events()

    def view(self) -> dict[str, Any]:
        """The drive's part of ``sys.drive`` (see :meth:`._state.DriveState.view`)."""
        return self.d.view()
