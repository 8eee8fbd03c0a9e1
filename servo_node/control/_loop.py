"""The control loop as an object: shared arrays, the real-time thread, and a typed view for the node.

The numerical loop (:mod:`._kernel`) runs in its own thread without the GIL; this class only writes commands
into the seqlocked ``cmd`` array and reads samples from ``out``. With ``clock="simulated"`` no thread runs and
the caller advances loop time explicitly (:meth:`advance`), which makes timing-dependent tests deterministic.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import math
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from sim_plant import JointParams
from sim_plant._joint import make_arrays

from ..otg import PROFILE_SIZE
from ..setpoint import Setpoint
from . import _layout as L
from ._kernel import read_seqlocked, run_realtime, run_simulated, tick
from ._velocity_profile import VP_SIZE


class LoopError(enum.IntEnum):
    """Faults the loop reports; the codes 1 and 2 are the OTG's (infeasible, numerical failure)."""

    NONE = 0
    INFEASIBLE = 1
    NUMERICAL_FAILURE = 2
    DRIVE_LOST = 3


_ERROR_TEXT = {
    LoopError.NONE: "",
    LoopError.INFEASIBLE: "trajectory infeasible for the requested target and limits",
    LoopError.NUMERICAL_FAILURE: "trajectory planner numerical failure",
    LoopError.DRIVE_LOST: "no feedback from the drive (feedback timeout)",
}


@dataclass(frozen=True)
class LoopConfig:
    """Everything the loop needs that does not change while it runs."""

    rate_hz: float = 1000.0
    law: str = "velocity"
    """``velocity`` or ``torque``."""
    velocity_gain: float = 20.0
    torque_gains: tuple[float, float] = (36.0, 12.0)
    inertia: float = 1.0
    """J of the computed-torque feed-forward (the embedded joint's inertia for the sim backend)."""
    drive: str = "sim"
    """``sim`` (embedded sim_plant joint) or ``udral`` (a drive on the bus)."""
    feedback_timeout_s: float = 0.5
    stop_acceleration: float = 0.0
    stop_jerk: float = 0.0
    sim_joint: JointParams | None = None
    """The embedded joint of the sim backend."""
    stepped_clock: bool = False
    """Loop time advances exactly one period per tick (kept in pace with the wall clock on average); makes the
    embedded simulation deterministic whatever the scheduling jitter. Sim backend only."""
    arrival_tolerance: float = 1e-3
    rest_velocity: float = 0.01
    """After a jerk-limited stop the force stays on until |v| is below this (the drive may lag the reference)."""
    stop_hold_max_s: float = 1.0
    """…but no longer than this after the stop's planned end."""
    realtime_priority: int = 0
    """SCHED_FIFO priority of the loop thread (1..99) where the OS permits it; 0 keeps normal scheduling."""

    def cfg_array(self) -> np.ndarray:
        """The kernel's cfg array."""
        cfg = np.zeros(L.N_CFG)
        cfg[L.K_LAW] = L.LAW_TORQUE if self.law == "torque" else L.LAW_VELOCITY
        cfg[L.K_VELOCITY_GAIN] = self.velocity_gain
        cfg[L.K_KP], cfg[L.K_KD] = self.torque_gains
        cfg[L.K_INERTIA] = self.inertia
        cfg[L.K_PERIOD] = 1.0 / self.rate_hz
        cfg[L.K_DRIVE] = L.DRIVE_REMOTE if self.drive == "udral" else L.DRIVE_SIM
        cfg[L.K_FEEDBACK_TIMEOUT] = self.feedback_timeout_s
        cfg[L.K_STEPPED] = 1.0 if self.stepped_clock and self.drive == "sim" else 0.0
        cfg[L.K_ARRIVAL_TOLERANCE] = self.arrival_tolerance
        cfg[L.K_REST_VELOCITY] = self.rest_velocity
        cfg[L.K_STOP_HOLD_MAX] = self.stop_hold_max_s
        return cfg


@dataclass(frozen=True)
class LoopSample:
    """A consistent snapshot of the loop."""

    time_s: float
    ref_position: float
    ref_velocity: float
    ref_acceleration: float
    position: float
    velocity: float
    acceleration: float
    force: float
    plan_status: int
    repaired: bool
    plan_duration: float
    plan_start_s: float
    error: LoopError
    error_count: int
    ticks: int
    engaged: bool
    demand_factor: float
    command_seq: int
    tracking_error_max: float
    """Largest |p_ref - p| since the active plan started."""
    settled_after_s: float
    """Plan start to the first tick at or after the planned end within the arrival tolerance; NaN until then."""
    stop_planned_s: float
    """Duration of the last jerk-limited stop (after expiry, readiness loss or an error), as planned."""
    stop_took_s: float
    """That stop from its start to disengagement (the drive at rest), as it happened; NaN while stopping."""

    @property
    def stopped(self) -> bool:
        """True when the drive is not commanded (never engaged, stopped, or disengaged)."""
        return not self.engaged

    @property
    def error_text(self) -> str:
        """The error in words."""
        return _ERROR_TEXT[self.error]


class ControlLoop:
    """Owns the loop's arrays and thread; ``command``/``stop`` are safe to call from any thread."""

    def __init__(self, config: LoopConfig, clock: str = "real") -> None:
        if clock not in ("real", "simulated"):
            raise ValueError(f"clock must be 'real' or 'simulated', not {clock!r}")
        self.config = config
        self.clock = clock
        self.cmd = np.zeros(L.N_CMD)
        self.cfg = config.cfg_array()
        self.st = np.zeros(L.N_ST)
        self.st[L.ST_SETTLED] = np.nan
        self.st[L.ST_STOP_TOOK] = np.nan
        self.st[L.ST_STOP_PLANNED] = np.nan
        self.out = np.zeros(L.N_OUT)
        self.remote = np.zeros(L.N_REMOTE)
        """Drive link for the ``udral`` backend: the networking side writes feedback, reads commands."""
        self.timing = np.zeros(L.TIMING_RING + 1)
        if config.drive == "sim":
            if config.sim_joint is None:
                raise ValueError("the sim backend needs sim_joint")
            self.sim_params, self.sim_state = make_arrays([config.sim_joint])
        else:
            self.sim_params, self.sim_state = make_arrays([JointParams()])  # Unused; keeps the kernel's types.
        self._c = np.zeros(L.N_CMD)
        self._prof = np.zeros(PROFILE_SIZE)
        self._vprof = np.zeros(VP_SIZE)
        self._ref = np.zeros(8)
        self._timespec = np.zeros(2, dtype=np.int64)
        self._sim_now = 0.0
        self._thread: threading.Thread | None = None
        self._cmd_lock = threading.Lock()

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.cmd, self.cfg, self.st, self.out, self._c, self._prof, self._vprof, self._ref,
            self.sim_params, self.sim_state, self.remote,
        )  # fmt: skip

    def start(self) -> None:
        """Compile or load the kernels (first call), take one tick, and start the thread (real clock)."""
        if self._thread is not None:
            return
        if self.clock == "real":
            self._sim_now = 0.0
            tick(time.monotonic(), self._arrays())
            self._thread = threading.Thread(
                target=self._realtime_thread, name="control-loop", daemon=True
            )
            self._thread.start()
        else:
            tick(self._sim_now, self._arrays())

    def _realtime_thread(self) -> None:
        """Thread body: ask the OS for a tight timer and, if configured, real-time priority; then run the kernel."""
        _tighten_timer_slack()
        if self.config.realtime_priority > 0:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.config.realtime_priority))
            except OSError as ex:  # Not permitted (no CAP_SYS_NICE / rtprio limit): run with normal priority.
                _logger.warning("Control loop: SCHED_FIFO %d not permitted (%s)", self.config.realtime_priority, ex)
        run_realtime(self._arrays(), self.timing, self._timespec)

    def close(self) -> None:
        """Disengage the drive and end the thread; idempotent."""
        self._write(L.MODE_DISENGAGE, None)
        self.cmd[L.C_QUIT] = 1.0
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        elif self.clock == "simulated":
            self.advance(2 * self.cfg[L.K_PERIOD])

    def command(self, sp: Setpoint) -> None:
        """Follow a new setpoint (re-planned from the current reference state at the next tick)."""
        self._write(L.MODE_VELOCITY if sp.velocity_mode else L.MODE_POSITION, sp)

    def stop(self, immediate: bool = False) -> None:
        """Jerk-limited stop to zero velocity then disengage; ``immediate`` removes the force at once."""
        self._write(L.MODE_DISENGAGE if immediate else L.MODE_STOP, None)

    def _write(self, mode: float, sp: Setpoint | None) -> None:
        with self._cmd_lock:
            cmd = self.cmd
            cmd[L.C_SEQ] += 1.0  # Odd: the loop will not take a half-written command.
            cmd[L.C_MODE] = mode
            if sp is not None:
                lim = sp.limits
                cmd[L.C_PT] = sp.target_position
                cmd[L.C_VT] = sp.target_velocity
                cmd[L.C_VMIN], cmd[L.C_VMAX] = lim.v_min, lim.v_max
                cmd[L.C_AMIN], cmd[L.C_AMAX] = lim.a_min, lim.a_max
                cmd[L.C_JMAX] = lim.j_max
                cmd[L.C_FLIM] = sp.force_limit
            cmd[L.C_STOP_A] = self.config.stop_acceleration
            cmd[L.C_STOP_J] = self.config.stop_jerk
            cmd[L.C_SEQ] += 1.0

    def advance(self, seconds: float) -> None:
        """Simulated clock only: run the loop for ``seconds`` of loop time."""
        if self.clock != "simulated":
            raise RuntimeError("advance() needs clock='simulated'")
        ticks = max(0, round(seconds / self.cfg[L.K_PERIOD]))
        self._sim_now = run_simulated(ticks, self._sim_now, self._arrays())

    def sample(self) -> LoopSample:
        """A consistent snapshot of the latest tick."""
        o = np.empty(L.N_OUT)
        read_seqlocked(self.out, o)
        return LoopSample(
            time_s=float(o[L.O_TIME]),
            ref_position=float(o[L.O_PREF]),
            ref_velocity=float(o[L.O_VREF]),
            ref_acceleration=float(o[L.O_AREF]),
            position=float(o[L.O_P]),
            velocity=float(o[L.O_V]),
            acceleration=float(o[L.O_A]),
            force=float(o[L.O_F]),
            plan_status=int(o[L.O_PLAN_STATUS]),
            repaired=bool(o[L.O_REPAIRED]),
            plan_duration=float(o[L.O_DURATION]),
            plan_start_s=float(o[L.O_PLAN_T0]),
            error=LoopError(int(o[L.O_ERROR])),
            error_count=int(o[L.O_ERROR_COUNT]),
            ticks=int(o[L.O_TICKS]),
            engaged=bool(o[L.O_ENGAGED]),
            demand_factor=float(o[L.O_DEMAND]) if math.isfinite(o[L.O_DEMAND]) else 0.0,
            command_seq=int(o[L.O_CMD_SEQ]),
            tracking_error_max=float(o[L.O_TRACK_MAX]),
            settled_after_s=float(o[L.O_SETTLED]),
            stop_planned_s=float(o[L.O_STOP_PLANNED]),
            stop_took_s=float(o[L.O_STOP_TOOK]),
        )

    def period_errors(self) -> np.ndarray:
        """Tick start lateness [second] of the most recent ticks (real clock), oldest first."""
        n = int(self.timing[L.TIMING_RING])
        ring = L.TIMING_RING
        if n <= ring:
            return self.timing[:n].copy()
        k = n % ring
        return np.concatenate((self.timing[k:ring], self.timing[:k]))


def _tighten_timer_slack() -> None:
    """Linux delays timer wake-ups by up to 50 µs by default to batch them; 1 ns keeps the loop on time."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
    except (OSError, AttributeError):  # Not Linux: nothing to tighten.
        pass


_PR_SET_TIMERSLACK = 29

_logger = logging.getLogger(__name__)
