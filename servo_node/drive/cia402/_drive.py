"""A CiA 402 drive on a CANopen bus as the control loop's drive (``servo.drive.backend = cia402``).

The loop sees the same seqlocked link as for a UDRAL drive (:mod:`.._remote_link`), so the same laws and the same
link model apply: a command takes effect at a SYNC boundary. This module is the network side, outside the tick:
every cycle (:mod:`._network`) the loop's command becomes the RPDOs of the mode the drive streams in (CSV: 0x60FF;
CST: 0x6071 in ‰ of the rated torque; CSP: 0x607A at the effect time with the velocity and torque offsets
0x60B1/0x60B2 from the reference; IP: 0x60C1:01, with the controlword's bit 4 once enabled), the controlword follows
the loop's engagement (Enable Operation while it commands, Disable Operation once it let go: the loop lets go only
at rest), and the TPDOs (statusword, mode display, position, velocity, torque) become the measurement, stamped with
the SYNC they answer; what the drive's PDOs cannot carry is read by SDO (:mod:`._worker`). Its units are its own
(:mod:`._scaling`). A drive that keeps its own PDO mapping is commanded and read through it
(:class:`._bringup.PdoLayout`).

Nothing the drive does is assumed: each cycle and each heartbeat it is judged by what it says (:mod:`._verify`), its
communication objects are read back, and when it no longer follows us it is stopped by every channel
(:mod:`._escalate`). A fault (statusword, 0x603F), a change we did not make, another master, a silent heartbeat or a
failed bring-up is :meth:`Cia402Drive.fault`; only :meth:`Cia402Drive.rearm` — the whole bring-up again
(:mod:`._walks`) — clears it, except a silence: a drive heard again, or one found idle out of SWITCHED ON after a
communication EMCY, is brought up again by itself (no fault reset; one found in FAULT keeps it until the re-arm).
The receive and cycle threads stay O(1) per frame: what can wait runs on the drive's one worker thread
(:mod:`._worker`), and what a stranger can send at bus rate is counted (:mod:`._notes`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._seqlock import read_seqlocked
from ...errors import ErrorCode
from .. import _remote_link as link
from .._bus import BusDrive
from .._table import require
from . import _dictionary as od
from . import _network
from ._bringup import Settings
from ._context import DriveContext
from ._registers import specs
from ._units import cycle_targets, drive_view
from ._verify import cycle_verdict, heartbeat_verdict
from ._watch import Watch, emcy_text
from ._worker import Worker

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterReader, RegisterSpec

_logger = logging.getLogger(__name__)

FAULT_STATES = ("FAULT", "FAULT REACTION ACTIVE", "QUICK STOP ACTIVE")
EMCY_COMMUNICATION = 0x8100
"""EMCY codes 0x81xx: communication errors (0x8130 life guard or heartbeat), CiA 301."""
EMCY_RECENT_S = 5.0
"""A drive idle out of SWITCHED ON is taken to have reacted to a communication error only if it said so this
recently (its EMCY, then our SYNC and its TPDO after our stall)."""


class Cia402Drive(BusDrive):
    """One axis's CiA 402 drive; the CANopen network is shared with the other axes on its bus."""

    modes = ("velocity", "torque", "position")

    def __init__(self, bus: _network.CanopenBus, settings: Settings) -> None:
        super().__init__()
        import threading

        self.s = settings
        self.c = DriveContext(bus, settings)
        self._rx_lock = threading.Lock()  # Two writers of rx (the cycle and the TPDO callbacks): one at a time.
        self._worker = Worker(self.c, self._cycle)
        self._watch = Watch(self.c)
        self._tx = np.empty(link.N_TX)
        self._enable_asked_at = math.nan
        self._recovering = False  # A bring-up again is under way (the worker's ``recover``).
        self._p_received = 0.0
        self._last_v = math.nan
        self._last_stamp = math.nan
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
            boot_timeout_s=reg.real("servo.drive.canopen.boot_timeout"),
            sdo_timeout_s=reg.real("servo.drive.canopen.sdo_timeout"),
            sdo_retries=int(reg.real("servo.drive.canopen.sdo_retries")),
            homing_speed=reg.real("servo.drive.canopen.homing_speed"),
            homing_timeout_s=reg.real("servo.drive.canopen.homing_timeout"),
            inertia=reg.real("servo.control.inertia") or 1.0,
            compensation=reg.text("servo.drive.compensation") == "predict",
            lost_after_s=reg.real("servo.drive.feedback_timeout"),
            velocity_limit=max(map(abs, reg.reals("servo.profile.velocity"))),
            acceleration_limit=max(map(abs, reg.reals("servo.profile.acceleration"))),
        )
        bus = _network.acquire(
            reg.text("servo.drive.can.iface"), int(reg.real("servo.drive.can.bitrate")), 1.0 / s.period_s,
            reg.flag("servo.drive.canopen.sync_producer"), s.master_id, s.heartbeat_s,
        )
        return cls(bus, s)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Listen on the bus at once; bring the drive up on the worker (SDO is blocking); idempotent."""
        if self.released or self.c.node is not None:
            return
        import canopen

        c = self.c
        node = canopen.RemoteNode(self.s.node_id, od.dictionary())
        node.sdo.RESPONSE_TIMEOUT = self.s.sdo_timeout_s
        node.sdo.MAX_RETRIES = 1 + self.s.sdo_retries  # canopen counts the attempts
        c.bus.network.add_node(node)
        c.node = node
        for n in range(1, 5):
            node.tpdo[n].add_callback(lambda m, n=n: self._on_tpdo(n, m))
        self._watch.attach(node, self._on_heartbeat)
        c.watch_rpdos = self._watch.watch_rpdos
        self._worker.start()

    def close(self) -> None:
        """Stop commanding and leave the bus at once (the drive's heartbeat watch then quick-stops it); idempotent."""
        if self.released:
            return
        self.released = True
        c = self.c
        c.bus.remove_cycler(self._cycle)
        self._worker.close(timeout=self.s.timeout_s * 3 + 1.0)
        if c.node is not None:
            c.node.nmt.stop_node_guarding()
            self._watch.detach(c.node)
            c.bus.network.nodes.pop(self.s.node_id, None)
        c.bus.release()

    async def stop(self) -> None:
        """After the loop let go (at rest): Disable Operation, Shutdown, NMT pre-operational, the drive's watch of
        our heartbeat off, then leave the bus; idempotent."""
        import asyncio

        if not self.released and self.c.ready:
            fut = self._worker.submit("stand_down")
            try:
                await asyncio.wait_for(asyncio.wrap_future(fut), self.s.timeout_s * 3 + 1.0)
            except TimeoutError:
                _logger.info("%s: stand-down not done in time", self.c.name)
        self.close()

    # ---------------------------------------------------------------- the cycle (bus thread)

    def _cycle(self) -> None:
        """Put this cycle's command on the bus: controlword and targets by RPDO; record what was sent; judge."""
        c = self.c
        node, lay = c.node, c.layout
        if not c.ready or node is None or lay is None:
            return

        def put(index: int, value: int) -> None:
            node.rpdo[lay.rpdo[index]][index].raw = value

        tx = self._tx
        read_seqlocked(self.arrays.tx, tx)
        engaged = tx[link.TX_ENABLE] != 0.0
        state = c.state()
        if not c.walking and not c.stopping:
            cw = self._controlword(engaged, state)
            # Lost control (read after the fault, which follows it): Quick Stop until the worker stops by every
            # channel, never Disable Operation first (:meth:`._context.DriveContext.lose_control`).
            c.cw = od.CW_QUICK_STOP if c.stop_reason is not None else cw
        applied = engaged and state == "OPERATION ENABLED" and not c.stopping
        put(od.CONTROLWORD, c.cw)
        if od.MODES_OF_OPERATION in lay.rpdo:
            put(od.MODES_OF_OPERATION, c.mode_cmd)
        targets, v, f = cycle_targets(self.s, c.ident.mode, c.scale, c.ident.rated_torque, tx, applied, c.p_counts)
        for index, value in targets:
            if index in lay.rpdo:  # CSP's offsets where the drive maps them.
                put(index, value)
        for n in lay.rpdos:
            node.rpdo[n].transmit()
        with self._rx_lock:
            self.record_taking(applied or not engaged)
            if applied:
                self.record_send(time.monotonic(), v, f, c.bus.next_cycle_at())
        self._supervise(engaged, state)

    def _controlword(self, engaged: bool, state: str) -> int:
        """Enable Operation while the loop commands, Disable Operation once it let go (at rest)."""
        c = self.c
        if state in ("SWITCHED ON", "OPERATION ENABLED"):
            if engaged and c.fault is None and c.up:
                if c.ident.mode == od.MODE_IP and state == "OPERATION ENABLED":
                    return od.CW_ENABLE | od.CW_IP_ENABLE  # Enabled: now it interpolates our records.
                return od.CW_ENABLE
            return od.CW_SWITCH_ON
        return c.cw  # Fault, quick stop, or not up: unchanged until a re-arm walks it.

    def _supervise(self, engaged: bool, state: str) -> None:
        """The drive judged against what we command (:func:`._verify.cycle_verdict`); the transition timeout of
        Enable Operation; the drive's heartbeat; a drive to bring up again (heard again, or idle out of SWITCHED ON
        on a communication error)."""
        c = self.c
        verdict = cycle_verdict(c)
        if verdict is not None:
            c.lose_control(verdict)
        now = time.monotonic()
        if state == "OPERATION ENABLED" or not engaged or not c.up or c.walking or c.stopping or c.fault is not None:
            self._enable_asked_at = math.nan
        elif math.isnan(self._enable_asked_at):
            self._enable_asked_at = now  # The loop commands: the drive must be enabled, from whatever state.
        elif now - self._enable_asked_at > self.s.timeout_s:
            self._enable_asked_at = math.nan
            c.set_fault(ErrorCode.DRIVE_FAULT, f"{c.name}: Enable Operation not taken within {self.s.timeout_s:g} s; "
                        f"the drive is in {state}")
        silent = now - (c.nmt_at if c.comm.hears else c.tpdo_at)
        limit = max(3.0 * self.s.heartbeat_s, self.s.lost_after_s)
        lost = c.fault is not None and c.fault[0] is ErrorCode.DRIVE_LOST
        if silent > limit and c.fault is None and c.urgent is None:
            if c.tpdo_fresh(now) and c.up and c.comm.hears:
                c.urgent = "0x1017"  # Alive but silent: the worker reads its heartbeat time at once.
                c.wake.set()
            else:
                c.set_fault(ErrorCode.DRIVE_LOST, f"{c.name}: heartbeat silent for {silent:.3g} s (> {limit:g} s)")
        elif lost and silent <= limit and not self._recovering:
            # Heard again: brought up again before the loss ends (its reaction to the silence may have disabled it;
            # a drive left in SWITCH ON DISABLED took no Enable Operation and nothing moved, the axis "engaged").
            self._recover(f"{c.name}: heartbeat heard again")
        elif c.up and c.fault is None and not (engaged or c.walking or c.stopping or self._recovering) \
                and state in ("SWITCH ON DISABLED", "READY TO SWITCH ON") and c.emcy is not None \
                and c.emcy[0] & 0xFF00 == EMCY_COMMUNICATION and now - c.emcy_at <= EMCY_RECENT_S:
            # Idle, it left SWITCHED ON and said why: a communication error (0x8130: our heartbeat held up, a loaded
            # host). Nothing moved and nothing is commanded: brought up again, as when heard again. Left without a
            # word (another node's Disable Voltage?), it stays so: the next setpoint is error 11 naming its state.
            self._recover(f"{c.name} left SWITCHED ON: {state} (statusword 0x{c.statusword:04X}), "
                          f"{emcy_text(c.emcy)}")

    def _recover(self, why: str) -> None:
        """The whole bring-up again on the worker (``recover``: no fault reset), once at a time."""
        self._recovering = True
        self.c.notes.step(f"{why}; bringing it up again")
        _logger.warning("%s; bringing it up again", why)
        self._worker.submit("recover").add_done_callback(self._recovered)

    def _recovered(self, _done: Future[bool]) -> None:
        self._recovering = False

    # ---------------------------------------------------------------- receptions (canopen's receive thread)

    def _on_tpdo(self, n: int, m: Any) -> None:
        """A TPDO of this cycle: the objects the layout reads from it; the last one completes the measurement."""
        c = self.c
        lay = c.layout
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
            elif index == od.MODES_OF_OPERATION_DISPLAY:
                c.mode_display, c.mode_at = value, received
            elif index == od.POSITION_ACTUAL:
                c.p_counts = value
            elif index == od.VELOCITY_ACTUAL:
                c.v_counts = value
            elif index == od.TORQUE_ACTUAL:
                c.f_permille = value
        if sw >= 0:
            c.sw_at = received
            if sw != c.statusword:
                c.statusword = sw
                self._watch.statusword(sw)
        if n == lay.last_tpdo:
            c.tpdo_at = received
            self._measured(received)

    def _measured(self, received: float) -> None:
        c = self.c
        k, kv = c.scale.position, c.scale.velocity
        # The drive sampled its state when the SYNC reached it, between our sending of it and the reception of its
        # answer: the middle of that round trip (the symmetric split NTP makes), good to its asymmetry.
        sync_at = c.bus.sync_at()
        stamp = 0.5 * (sync_at + self._p_received) if self._p_received >= sync_at else sync_at
        v = c.v_counts / kv
        f = c.f_permille / 1000.0 * c.ident.rated_torque
        dt = stamp - self._last_stamp
        a = (v - self._last_v) / dt if dt > 0.0 and math.isfinite(self._last_v) else 0.0
        self._last_v, self._last_stamp = v, stamp
        with self._rx_lock:
            self.record_measurement(c.p_counts / k, v, a, f, received, stamp)

    def _on_heartbeat(self, state: int) -> None:
        """The drive's heartbeat (its NMT state); a state other than OPERATIONAL once up is a loss of control."""
        c = self.c
        c.nmt_at = time.monotonic()
        if state == od.NMT_BOOT_UP:
            c.booted = True
        verdict = heartbeat_verdict(c, state)
        c.nmt = od.NMT_PRE_OPERATIONAL if state == od.NMT_BOOT_UP else state  # A boot-up enters pre-operational.
        if verdict is not None:
            c.lose_control(verdict)

    # ---------------------------------------------------------------- views and commands (event loop)

    @property
    def statusword(self) -> int:
        return self.c.statusword

    def state(self) -> str:
        """The drive's CiA 402 state from its last statusword."""
        return self.c.state()

    def fault(self) -> tuple[ErrorCode, str] | None:
        """The error that keeps this drive from moving (a drive fault, a loss of control, a silent heartbeat, a
        failed bring-up)."""
        return self.c.fault

    def events(self) -> list[str]:
        """The drive's notes since the last call (steps in full, bus-rate events counted: :mod:`._notes`)."""
        return self.c.notes.take()

    def escalate(self, reason: str) -> None:
        """The loop's stop did not take effect: stop by every channel (:mod:`._escalate`)."""
        c = self.c
        if c.up and not c.stopping:
            c.lose_control(f"{c.name}: the loop's stop did not take effect ({reason})")

    def view(self) -> dict[str, Any]:
        """The drive's part of the axis's ``sys.drive`` (see :func:`._units.drive_view`): what the drive said
        lately; a statusword older than a read-back round with no TPDO coming is not shown as its state."""
        c = self.c
        fresh = time.monotonic() - c.sw_at <= 2.0 * max(0.25, 3.0 * self.s.period_s)
        up = c.layout is not None
        return drive_view(self.s, c.statusword if fresh else -1, c.error_code, c.emcy, c.ident, c.layout,
                          c.mode_display, c.nmt, c.scale.tag if up else "", c.comm.watch if up else "")

    def rearm(self) -> Future[bool] | None:
        """Reset a drive fault: the whole bring-up again (in the worker); the future holds True once the drive is
        SWITCHED ON (or OPERATION ENABLED) in our mode, NMT OPERATIONAL by its heartbeat, under our control; at once
        if it is so already. None: closed."""
        c = self.c
        if self.released:
            return None
        if c.up and c.fault is None and not c.stopping and c.nmt == od.NMT_OPERATIONAL \
                and c.state() in ("SWITCHED ON", "OPERATION ENABLED") and c.mode_display in (None, c.mode_cmd):
            done: Future[bool] = Future()
            done.set_result(True)
            return done
        return self._worker.submit("rearm")

    def home(self) -> bool:
        """Homing (mode 6, ``servo.drive.canopen.homing_method`` and ``home_offset``) on the user's explicit command
        only, with the loop disengaged; then back to the cyclic mode in SWITCHED ON (on the worker). False: not
        possible now (not up, busy, a fault, or the loop commands the drive)."""
        c = self.c
        read_seqlocked(self.arrays.tx, self._tx)
        if not c.up or c.fault is not None or self._worker.busy() or self._tx[link.TX_ENABLE] != 0.0 \
                or c.state() != "SWITCHED ON":
            return False
        self._worker.submit("home")
        return True
