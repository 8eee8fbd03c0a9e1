"""What the threads of one CiA 402 drive share: what the drive reports, what we command, the fault, the requests.

Four threads touch it: canopen's receive thread (the drive's TPDOs, heartbeat, EMCY; frames of other nodes), the
bus's cycle thread (our RPDOs, the per-cycle verdict), the drive's worker (every SDO and NMT exchange: bring-up,
re-arm, homing, the read-back, the stop by every channel) and the node's event loop (views, notes). Each field has
one writer, or is a flag whose last write wins (the GIL makes each assignment atomic); the receive and cycle threads
never block on anything here, and never on the worker: they set a request and :attr:`DriveContext.wake` it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import ErrorCode
from . import _dictionary as od
from ._bringup import Identity, Scale
from ._comm import Comm
from ._notes import Notes
from ._scaling import DEFAULT_COUNTS_PER_UNIT

if TYPE_CHECKING:
    from ._bringup import PdoLayout, Settings
    from ._network import CanopenBus

FOREIGN_RECENT_S = 2.0
"""Another node's SDO write or NMT command this recent is named beside what it changed [second]."""


class DriveContext:
    """The shared state of one drive (see the module docstring)."""

    def __init__(self, bus: CanopenBus, settings: Settings) -> None:
        self.bus = bus
        self.s = settings
        self.node: Any = None
        self.ident = Identity()
        self.layout: PdoLayout | None = None
        k = settings.counts_per_unit or DEFAULT_COUNTS_PER_UNIT
        self.scale = Scale(k, k, "")
        """The drive's units (:mod:`._scaling`; the register or its default until the bring-up reads the drive)."""
        self.comm = Comm()
        """What the bring-up set of its communication objects (:mod:`._comm`)."""
        # ---- what the drive reports (canopen's receive thread; the worker by SDO while no TPDO comes)
        self.statusword = -1
        self.sw_at = -math.inf
        self.mode_display: int | None = None
        self.mode_at = -math.inf
        self.nmt = -1
        """The NMT state of the drive's last heartbeat (-1: none yet)."""
        self.nmt_at = math.nan
        self.booted = False
        """A boot-up was heard since the drive was last brought up: its communication parameters are power-on."""
        self.heard = threading.Event()
        """Set at its boot-up message (a bring-up that waits to try again tries at once)."""
        self.polled_at = -math.inf
        """When the worker last read the objects no TPDO carries (:attr:`._bringup.PdoLayout.polled`)."""
        self.p_counts = 0
        self.v_counts = 0
        self.f_permille = 0
        self.tpdo_at = -math.inf
        self.emcy: tuple[int, int] | None = None
        """The last EMCY's (error code, error register)."""
        self.emcy_at = -math.inf
        """When it came [time.monotonic]."""
        self.error_code = 0
        # ---- what we command
        self.cw = od.CW_SHUTDOWN
        self.mode_cmd = od.MODE_OF_LAW[settings.law]
        self.walking = False
        """A walk (bring-up, re-arm, homing, stand-down, a stop by every channel) owns the controlword."""
        self.ready = False
        """The PDOs are mapped: the cycle sends them."""
        self.up = False
        """Brought up and confirmed (NMT OPERATIONAL by its heartbeat, SWITCHED ON in our mode): supervised."""
        self.stopping = False
        """Stopped by every channel: the cycle sends :attr:`cw` (Quick Stop, Disable Voltage) until a re-arm."""
        self.stop_steps: list[str] = []
        """The steps the last stop by every channel took (:mod:`._escalate`)."""
        self.stopped_at_rest = False
        """Its verdict was "at rest": the worker keeps reading the joint until a re-arm."""
        self.moving_again = 0
        """Readings in a row since then that found the joint moving."""
        self.enabled_by_us = False
        # ---- the fault and the requests to the worker
        self.fault: tuple[ErrorCode, str] | None = None
        self.stop_reason: str | None = None
        self.fault_read: tuple[str, int] | None = None
        self.urgent: str | None = None
        """An object the worker reads before anything else (0x1017 when the heartbeat is silent)."""
        self.wake = threading.Event()
        self.closing = threading.Event()
        self.notes = Notes()
        self.notes_said: set[str] = set()
        """What the bring-up said of the drive (what it lacks, where its units came from): said once."""
        self.foreign_rpdo: dict[int, tuple[int, float]] = {}
        self.listening_since = math.inf
        """Since when the drive's RPDO COB-IDs are watched for another master (monotonic)."""
        self.foreign_write: tuple[int, int, float] | None = None
        self.foreign_nmt: tuple[int, float] | None = None
        self.watch_rpdos: Callable[[list[int]], None] = lambda cob_ids: None
        """Watch these COB-IDs (our RPDOs in the drive's own mapping) for another master (set by the drive)."""

    @property
    def name(self) -> str:
        return f"CANopen drive {self.s.node_id}"

    def set_fault(self, code: ErrorCode, text: str) -> None:
        """The drive's fault, unless one is already held (the first cause is the one named)."""
        if self.fault is None:
            self.fault = (code, text)

    def lose_control(self, text: str, escalate: bool = True) -> None:
        """The drive is no longer as we command it: a fault naming why and, if ``escalate`` (our PDOs may not
        reach it), the stop by every channel; O(1), any thread.

        From then on the cycle's RPDOs carry Quick Stop, before the worker gets to run: a worker a loaded host
        schedules late once left the cycle to send Disable Operation for the fault meanwhile, and its Quick Stop
        then met a drive in SWITCHED ON, where it is transition 10 (power stage off): the joint coasted."""
        stop = escalate and not self.stopping and self.stop_reason is None
        if stop:
            self.stop_reason = text  # Before the fault: a cycle that sees the fault sees this (``_drive._cycle``).
        self.set_fault(ErrorCode.DRIVE_FAULT, f"{text}{self.foreign_cause()}")
        if stop:
            self.wake.set()

    def foreign_cause(self) -> str:
        """", after another node's SDO write of 0x6060:00" and the like, when one came lately."""
        now = time.monotonic()
        parts = []
        if self.foreign_write is not None and now - self.foreign_write[2] <= FOREIGN_RECENT_S:
            parts.append(f"another node wrote 0x{self.foreign_write[0]:04X}:{self.foreign_write[1]:02X} by SDO")
        if self.foreign_nmt is not None and now - self.foreign_nmt[1] <= FOREIGN_RECENT_S:
            parts.append(f"another node sent NMT 0x{self.foreign_nmt[0]:02X}")
        return f" (after {' and '.join(parts)})" if parts else ""

    def tpdo_fresh(self, now: float) -> bool:
        """The TPDOs come: the last one within three cycles (at least 50 ms)."""
        return now - self.tpdo_at <= max(3.0 * self.s.period_s, 0.05)

    def state(self) -> str:
        return od.state_of(self.statusword)

    def foreign_master(self, within_s: float) -> str | None:
        """The drive's RPDO COB-IDs heard from another node within ``within_s``, named."""
        now = time.monotonic()
        heard = [f"0x{cob:03X} ({n} heard)" for cob, (n, at) in sorted(self.foreign_rpdo.items())
                 if now - at <= within_s]
        return f"another master sends its RPDO COB-ID {', '.join(heard)}" if heard else None
