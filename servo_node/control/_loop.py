"""The control loop as an object: shared arrays, the command interface, and a typed view for the node.

The numerical loop (:mod:`._kernel`) is ticked by a GIL-free :class:`~._thread.ControlThread` (its own, or one
shared by every axis of a node); this class only writes commands into the seqlocked ``cmd`` array and reads
samples from ``out``. With ``clock="simulated"`` no thread runs and
the caller advances loop time explicitly (:meth:`advance`), which makes timing-dependent tests deterministic.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from .._seqlock import read_seqlocked
from ..drive import Drive
from ..errors import ErrorCode
from ..otg import PROFILE_SIZE
from ..setpoint import Setpoint
from . import _layout as L
from ._kernel import run_simulated, tick
from ._layout import LoopArrays, new_loop_arrays
from ._thread import ControlThread
from ._trace import read_since


@dataclass(frozen=True)
class Envelope:
    """Hard limits no command can exceed (magnitudes, > 0): the reference's |v|, |a|, |j| and the force."""

    velocity: float = 100.0
    acceleration: float = 1000.0
    jerk: float = 1e5
    force: float = 1000.0


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
    feedback_timeout_s: float = 0.5
    envelope: Envelope = Envelope()
    stop_acceleration: float = 50.0
    """Least deceleration of every stop (a stop is harder if the active setpoint's profile is)."""
    stop_jerk: float = 500.0
    """Least jerk of every stop."""
    stepped_clock: bool = False
    """Loop time advances exactly one period per tick (kept in pace with the wall clock on average); makes the
    embedded simulation deterministic whatever the scheduling jitter. Sim backend only."""
    arrival_tolerance: float = 1e-3
    rest_velocity: float = 1e-3
    """A stop ends (the force is removed) once |v| stayed below this for ``rest_time_s``."""
    rest_time_s: float = 0.01
    stop_hold_max_s: float = 1.0
    """After a stop's planned end, the longest hold waiting for rest; past it the stop is STOP_TIMEOUT."""
    following_error_window: float = 0.5
    following_error_time_s: float = 0.2
    deadman_timeout_s: float = 0.5
    """Age of the last setpoint (from its reception) at which the command expires and the servo stops."""
    realtime_priority: int = 0
    """SCHED_FIFO priority of the loop thread (1..99) where the OS permits it; 0 keeps normal scheduling."""
    compensation: bool = True
    """A drive on the bus: command it through the link model (feed-forward over the interval the command is held
    at the drive, feedback on the predicted position; :mod:`._link`). False: the law as for a local drive
    (reference now, feedback on the latest measurement). No effect on the embedded joint."""
    drive_period_s: float = 0.005
    """How long a drive on the bus holds each command: its setpoint period [second]."""
    trace_rate_hz: float = 0.0
    """Measured samples kept per second of loop time for the node's ``dynamics`` (:mod:`._trace`); 0: none."""

    def cfg_array(self, drive_kind: float) -> np.ndarray:
        """The kernel's cfg array."""
        cfg = np.zeros(L.N_CFG)
        env = self.envelope
        cfg[L.K_LAW] = L.LAW_TORQUE if self.law == "torque" else L.LAW_VELOCITY
        cfg[L.K_VELOCITY_GAIN] = self.velocity_gain
        cfg[L.K_KP], cfg[L.K_KD] = self.torque_gains
        cfg[L.K_INERTIA] = self.inertia
        cfg[L.K_PERIOD] = 1.0 / self.rate_hz
        cfg[L.K_DRIVE] = drive_kind
        cfg[L.K_FEEDBACK_TIMEOUT] = self.feedback_timeout_s
        cfg[L.K_STEPPED] = 1.0 if self.stepped_clock else 0.0
        cfg[L.K_ARRIVAL_TOLERANCE] = self.arrival_tolerance
        cfg[L.K_REST_VELOCITY] = self.rest_velocity
        cfg[L.K_STOP_HOLD_MAX] = self.stop_hold_max_s
        cfg[L.K_ENV_V], cfg[L.K_ENV_A], cfg[L.K_ENV_J], cfg[L.K_ENV_F] = (
            env.velocity, env.acceleration, env.jerk, env.force,
        )  # fmt: skip
        cfg[L.K_STOP_A] = min(self.stop_acceleration, env.acceleration)
        cfg[L.K_STOP_J] = min(self.stop_jerk, env.jerk)
        cfg[L.K_FE_WINDOW] = self.following_error_window
        cfg[L.K_FE_TIME] = self.following_error_time_s
        cfg[L.K_DEADMAN] = self.deadman_timeout_s
        cfg[L.K_REST_TIME] = self.rest_hold_s
        cfg[L.K_COMPENSATE] = 1.0 if self.compensation else 0.0
        cfg[L.K_DRIVE_PERIOD] = self.drive_period_s
        cfg[L.K_TRACE_PERIOD] = 1.0 / self.trace_rate_hz if self.trace_rate_hz > 0.0 else 0.0
        return cfg

    def stop_bound_s(self) -> float:
        """Upper bound on any stop from inside the envelope to rest: the slowest stop plan plus the hold.

        The slowest start moves at the envelope's velocity while accelerating at the envelope's acceleration: the
        jerk ramps that acceleration through zero to the stop's deceleration, the deceleration plateau removes the
        velocity (plus what the ramp added), and a last ramp eases to zero.
        """
        env = self.envelope
        a_s = min(self.stop_acceleration, env.acceleration)
        j_s = min(self.stop_jerk, env.jerk)
        ramp = (env.acceleration + a_s) / j_s
        v_peak = env.velocity + env.acceleration**2 / (2.0 * j_s)
        return ramp + v_peak / a_s + a_s / j_s + self.stop_hold_max_s + self.rest_hold_s + 2.0 / self.rate_hz

    @property
    def rest_hold_s(self) -> float:
        """How long a stop's hold must measure the joint at rest: ``rest_time_s`` in whole loop periods, at least
        two."""
        return max(2.0, math.ceil(self.rest_time_s * self.rate_hz)) / self.rate_hz


class LoopSample(NamedTuple):
    """A consistent snapshot of the loop (a named tuple: the node takes one per axis every supervision pass, and a
    tuple is made in a fraction of a frozen dataclass's time)."""

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
    error: ErrorCode
    error_count: int
    ticks: int
    engaged: bool
    mode: float
    demand_factor: float
    command_seq: int
    tracking_error_max: float
    """Largest |p_ref - p| since the active plan started."""
    settled_after_s: float
    """Plan start to the first tick at or after the planned end within the arrival tolerance; NaN until then."""
    stop_planned_s: float
    """Duration of the last jerk-limited stop, as planned."""
    stop_took_s: float
    """That stop from its start to disengagement (the drive at rest), as it happened; NaN while stopping."""
    stop_bound_s: float
    """The bound on that stop (plan + hold limit), fixed when it started."""
    expired: bool
    """The command expired (deadman): no setpoint received within the timeout."""
    expired_after_s: float
    """Age of the last setpoint when it expired [second]."""
    expired_at_s: float
    """Loop time the command expired [second] (the monotonic clock with the real clock)."""
    limited: bool
    """The active setpoint's limits were clipped into the envelope."""
    overshoot: float = math.nan
    """Largest measured excursion past the active position plan's target, in its direction (0: none)."""
    measured_at_s: float = math.nan
    """When the drive was in the measured state [second, loop clock] (a bus drive's measurement is older)."""
    predicted_position: float = math.nan
    """Bus drive through the link model: its position predicted for when the latest command takes effect."""
    effect_at_s: float = math.nan
    """…and that time [second, loop clock]."""
    feedback_faults: int = 0
    """Times the drive's feedback became distrusted (control._feedback)."""
    feedback_distrusted: int = 0
    """``FB_*`` reason while the latest feedback is distrusted (the stages see the last good sample), else 0."""
    feedback_last: int = 0
    """``FB_*`` reason of the latest feedback fault (0: none yet)."""
    commands_clipped: int = 0
    """Drive commands the loop clipped into the envelope (or replaced because they were not finite)."""
    measured: bool = True
    """``position`` … ``force`` are a fresh, trusted measurement of the drive; False before a bus drive's first
    report, while it is silent beyond ``servo.drive.feedback_timeout`` and while its feedback is distrusted (they
    then hold the last good values, or zeros before any)."""
    missed_ticks: int = 0
    """Ticks the thread skipped because it was more than a period late (a host too busy for the loop)."""
    late_max_s: float = 0.0
    """Largest lateness of a tick behind its due time so far [second] (real clock)."""
    drive_waited_s: float = 0.0
    """How long the latest motion waited for its drive to take commands (asked to enable) [second]."""

    @property
    def stopped(self) -> bool:
        """True when the drive is not commanded (never engaged, stopped, or disengaged)."""
        return not self.engaged

    @property
    def stopping(self) -> bool:
        """True while a stop (or its hold) is in progress."""
        return self.engaged and self.mode == L.MODE_STOP

    @property
    def error_text(self) -> str:
        """The error in words."""
        return self.error.text


@dataclass(frozen=True)
class LinkStats:
    """A drive on the bus: the age of its measurements and the delay of its commands, over the latest
    :data:`~._layout.LINK_STATS_N` measurements [second]."""

    age_p50: float
    """Median age of a measurement at its reception (stamp → reception, the drive's clock mapped onto ours)."""
    age_max: float
    delay_p50: float
    """Median of the command-delay estimate (send → effect seen in the dynamics), per measurement."""
    delay_max: float
    delay: float
    """The estimate in use now."""
    local_clock: bool
    """True if the drive stamps with our clock (same host); else the offset is estimated (symmetric split)."""
    clock_offset: float
    """Drive clock − loop clock as estimated [second] (0 when local)."""


class ControlLoop:
    """Owns the loop's arrays and thread; ``command``/``stop`` are safe to call from any thread.

    :param drive: where the commands go and the measurements come from (:mod:`servo_node.drive`).
    :param clock: ``real`` (a thread against CLOCK_MONOTONIC) or ``simulated`` (advanced by :meth:`advance`).
    :param start_s: where the simulated clock starts [second] (a monotonic clock's hours in, as a node's: its
        ticks are then as far apart as floating point makes them, not exactly a period).
    """

    def __init__(self, config: LoopConfig, drive: Drive, clock: str = "real", start_s: float = 0.0) -> None:
        if clock not in ("real", "simulated"):
            raise ValueError(f"clock must be 'real' or 'simulated', not {clock!r}")
        self.config = config
        self.clock = clock
        self.drive = drive
        self.arrays: LoopArrays = new_loop_arrays(drive.arrays, config.cfg_array(drive.kind), PROFILE_SIZE)
        self.cmd = self.arrays.cmd
        self.cfg = self.arrays.cfg
        self.out = self.arrays.out
        self._sim_now = start_s
        self._started = False
        self._thread: ControlThread | None = None
        self._own_thread = False
        self._cmd_lock = threading.Lock()
        self._trace_rows = np.empty((L.TRACE_N, L.TR_N))

    @property
    def realtime_priority(self) -> int:
        """The SCHED_FIFO priority this loop asks its thread for (0: normal scheduling)."""
        return self.config.realtime_priority

    def start(self, thread: ControlThread | None = None) -> None:
        """Compile or load the kernels (first call), take one tick, and have ``thread`` tick the loop from now on
        (real clock; None: a thread of its own). Idempotent."""
        if self._started:
            return
        self._started = True
        if self.clock == "real":
            tick(time.monotonic(), self.arrays)
            self._own_thread = thread is None
            self._thread = ControlThread() if thread is None else thread
            self._thread.attach(self)
        else:
            tick(self._sim_now, self.arrays)

    def close(self) -> None:
        """Release the drive and stop ticking; idempotent. Stop safely first (:meth:`stop`, then wait for rest)."""
        self._write(L.MODE_DISENGAGE, None, math.nan)
        if self._thread is not None:
            self._thread.detach(self)
            if self._own_thread:
                self._thread.close()
            self._thread = None
        elif self.clock == "simulated" and self._started:
            self.advance(2 * self.cfg[L.K_PERIOD])

    @property
    def timing(self) -> np.ndarray:
        """The ticking thread's ring of wake-up lateness (real clock; empty otherwise); see :meth:`period_errors`."""
        return self._thread.timing if self._thread is not None else np.zeros(L.TIMING_RING + 1)

    def command(self, sp: Setpoint, received_at_s: float | None = None, alive_at_s: float | None = None) -> None:
        """Follow a setpoint received at ``received_at_s`` (loop clock; None: when the loop takes it).

        The deadman counts from the reception time; the same setpoint again only keeps the command alive,
        a different one is re-planned from the current reference state at the next tick. A coordinated start names
        its instant as ``received_at_s`` (ahead: the loop takes it then) and the setpoint's latest reception as
        ``alive_at_s``: until the instant that keeps the command in force alive (its publisher is there).
        """
        rx = math.nan if received_at_s is None else received_at_s
        alive = rx if alive_at_s is None else alive_at_s
        self._write(L.MODE_VELOCITY if sp.velocity_mode else L.MODE_POSITION, sp, rx, alive)

    def follow(self, limits: Setpoint, received_at_s: float) -> None:
        """Mimic: follow the leader (written through :class:`~._leader.LeaderInput`) within ``limits``' profile
        and force limit (its target is not used), from a leader sample received at ``received_at_s``."""
        self._write(L.MODE_MIMIC, limits, received_at_s)

    def stop(self, immediate: bool = False) -> None:
        """The stop (jerk-limited, hold until at rest, then release); ``immediate`` removes the force at once."""
        self._write(L.MODE_DISENGAGE if immediate else L.MODE_STOP, None, math.nan)

    def _write(self, mode: float, sp: Setpoint | None, received_at_s: float, alive_at_s: float = math.nan) -> None:
        with self._cmd_lock:
            cmd = self.cmd
            cmd[L.C_SEQ] += 1.0  # Odd: the loop will not take a half-written command.
            cmd[L.C_MODE] = mode
            cmd[L.C_RX_T] = received_at_s
            cmd[L.C_ALIVE_T] = alive_at_s
            if sp is not None:
                lim = sp.limits
                cmd[L.C_PT] = sp.target_position
                cmd[L.C_VT] = sp.target_velocity
                cmd[L.C_VMIN], cmd[L.C_VMAX] = lim.v_min, lim.v_max
                cmd[L.C_AMIN], cmd[L.C_AMAX] = lim.a_min, lim.a_max
                cmd[L.C_JMAX] = lim.j_max
                cmd[L.C_FLIM] = sp.force_limit
            cmd[L.C_SEQ] += 1.0
        if self._thread is not None:
            self._thread.wake()

    def advance(self, seconds: float) -> None:
        """Simulated clock only: run the loop for ``seconds`` of loop time."""
        if self.clock != "simulated":
            raise RuntimeError("advance() needs clock='simulated'")
        ticks = max(0, round(seconds / self.cfg[L.K_PERIOD]))
        self._sim_now = run_simulated(ticks, self._sim_now, self.arrays)

    def now(self) -> float:
        """Current loop time [second]: the monotonic clock (real), or the simulated time."""
        return time.monotonic() if self.clock == "real" else self._sim_now

    def sample(self) -> LoopSample:
        """A consistent snapshot of the latest tick."""
        buf = np.empty(L.N_OUT)
        read_seqlocked(self.out, buf)
        o = buf.tolist()  # Python floats: one conversion, then plain indexing (the node samples every axis often).
        for k in _INT_OUTPUTS:
            o[k] = int(o[k])
        for k in _BOOL_OUTPUTS:
            o[k] = o[k] != 0.0
        o[L.O_ERROR] = _error_code(o[L.O_ERROR])
        o[L.O_MEASURED] = o[L.O_MEASURED] == 1.0
        if not math.isfinite(o[L.O_DEMAND]):
            o[L.O_DEMAND] = 0.0
        return LoopSample._make(_SAMPLE_OUTPUTS(o))

    def trace_since(self, since: int) -> tuple[int, np.ndarray]:
        """The measured samples the loop traced (``L.TR_*`` columns, oldest first) from entry ``since`` on, and the
        index of the first: later than ``since`` if the loop overwrote older ones before they were read. The rows
        are a view of a buffer the next call reuses."""
        first, count = read_since(self.arrays.trace, since, self._trace_rows)
        return first, self._trace_rows[:count]

    def link_stats(self) -> LinkStats | None:
        """The bus drive's link as the loop measures it (None for the embedded joint or before any measurement).

        Reads the loop's statistics rings without a lock: every entry is one aligned float64 (written whole), and
        an entry being replaced while read only shifts which recent measurements are counted.
        """
        lk = self.arrays.link
        n = int(lk[L.LK_N_STATS])
        if n == 0:
            return None
        m = min(n, L.LINK_STATS_N)
        ages = lk[L.LK_AGES : L.LK_AGES + L.LINK_STATS_N][:m]
        delays = lk[L.LK_DELAYS : L.LK_DELAYS + L.LINK_STATS_N][:m]
        ages = ages[np.isfinite(ages)]
        delays = delays[np.isfinite(delays)]
        nan = math.nan
        return LinkStats(
            age_p50=float(np.median(ages)) if ages.size else nan,
            age_max=float(ages.max()) if ages.size else nan,
            delay_p50=float(np.median(delays)) if delays.size else nan,
            delay_max=float(delays.max()) if delays.size else nan,
            delay=float(lk[L.LK_DELAY]),
            local_clock=bool(lk[L.LK_LOCAL] == 1.0),
            clock_offset=float(lk[L.LK_THETA]),
        )

    def period_errors(self) -> np.ndarray:
        """Wake-up lateness [second] of the ticking thread's most recent ticks (real clock), oldest first."""
        return self._thread.period_errors() if self._thread is not None else np.zeros(0)


_OUTPUT_OF_FIELD = {
    "time_s": L.O_TIME, "ref_position": L.O_PREF, "ref_velocity": L.O_VREF, "ref_acceleration": L.O_AREF,
    "position": L.O_P, "velocity": L.O_V, "acceleration": L.O_A, "force": L.O_F, "plan_status": L.O_PLAN_STATUS,
    "repaired": L.O_REPAIRED, "plan_duration": L.O_DURATION, "plan_start_s": L.O_PLAN_T0, "error": L.O_ERROR,
    "error_count": L.O_ERROR_COUNT, "ticks": L.O_TICKS, "engaged": L.O_ENGAGED, "mode": L.O_MODE,
    "demand_factor": L.O_DEMAND, "command_seq": L.O_CMD_SEQ, "tracking_error_max": L.O_TRACK_MAX,
    "settled_after_s": L.O_SETTLED, "stop_planned_s": L.O_STOP_PLANNED, "stop_took_s": L.O_STOP_TOOK,
    "stop_bound_s": L.O_STOP_BOUND, "expired": L.O_EXPIRED, "expired_after_s": L.O_EXPIRED_AFTER,
    "expired_at_s": L.O_EXPIRED_AT, "limited": L.O_LIMITED, "overshoot": L.O_OVERSHOOT, "measured_at_s": L.O_MEAS_T,
    "predicted_position": L.O_PRED_P, "effect_at_s": L.O_EFFECT_T, "feedback_faults": L.O_FB_FAULTS,
    "feedback_distrusted": L.O_FB_BAD, "feedback_last": L.O_FB_LAST, "commands_clipped": L.O_CMD_CLIPPED,
    "measured": L.O_MEASURED, "missed_ticks": L.O_MISSED, "late_max_s": L.O_LATE_MAX,
    "drive_waited_s": L.O_DRIVE_WAITED,
}
"""Where each field of :class:`LoopSample` is in the loop's outputs (``L.O_*``)."""
_SAMPLE_OUTPUTS = itemgetter(*(_OUTPUT_OF_FIELD[name] for name in LoopSample._fields))
_INT_OUTPUTS = (L.O_PLAN_STATUS, L.O_ERROR_COUNT, L.O_TICKS, L.O_CMD_SEQ, L.O_FB_FAULTS, L.O_FB_BAD, L.O_FB_LAST,
                L.O_CMD_CLIPPED, L.O_MISSED)
_BOOL_OUTPUTS = (L.O_REPAIRED, L.O_ENGAGED, L.O_EXPIRED, L.O_LIMITED)
_ERROR_CODES = {float(c.value): c for c in ErrorCode}


def _error_code(value: float) -> ErrorCode:
    """The loop's error value as an :class:`ErrorCode` (a dict lookup: the enum's call costs more)."""
    code = _ERROR_CODES.get(value)
    return code if code is not None else ErrorCode(int(value))
