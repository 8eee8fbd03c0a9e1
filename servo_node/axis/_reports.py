"""What an axis reports: the JSON register views (``sys.status``, ``sys.motion``, ``sys.counters``, …) and the messages
``feedback``, ``status`` and ``dynamics``, built from a loop sample and the axis's state. Pure functions, no I/O.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zubax.physics.dynamics
import zubax.physics.kinematics
import zubax.service
import zubax.service.actuator
from pycyphal.application import register
from pycyphal.application.heartbeat_publisher import Health

from cyphal_common.clocks import system_minus_monotonic_s
from cyphal_common.transport import dropped_frames

from ..arming import ServoState
from ..control import Envelope, LinkStats, LoopSample
from ..control import _layout as L
from ..errors import ErrorCode
from ..setpoint import Setpoint
from ._counters import COUNT_MAX, AxisCounters, EventCounts

REGISTER_STRING_MAX = 255
"""uavcan.register.Value strings hold at most 256 bytes; keep one spare."""

RESIDUAL = 1e-9
"""Velocities, accelerations and forces below this magnitude [SI] show as 0 in ``sys.motion``: a joint at rest
reports residuals like -6.9e-10 whose exponent form crowded out ``over`` beside a bus drive's ``link`` (a CI run)."""


def status_view(
    state: ServoState,
    reason: str,
    error: ErrorCode,
    setpoint: Setpoint | None,
    expired_after_s: float,
    expired_at_s: float = math.nan,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``sys.status``: the servo's state, active target and limits, last error code and reason (≤ 255 bytes);
    once expired, the last setpoint's age at expiry and the expiry's time on the system clock [second]; ``extra``
    (the pinned peers, the latest refusal). Too long: the reason is shortened, then the extra words, then the
    least needed keys are dropped."""
    servo: dict[str, Any] = {"state": str(state), "error": int(error)}
    if setpoint is not None:
        servo.update(setpoint.summary())
    if state is ServoState.EXPIRED:
        servo["expired_after_s"] = round(expired_after_s, 4)
        if math.isfinite(expired_at_s):
            servo["expired_at"] = round(expired_at_s, 4)
    servo.update(extra or {})
    servo["reason"] = reason
    doc = {"servo": servo}
    texts = [k for k, v in servo.items() if isinstance(v, str) and k not in ("state", "mode", "reason")]
    while not _fits(doc) and servo["reason"]:
        servo["reason"] = servo["reason"][:-8]  # Shorten the words, never the numbers.
    for key in ("foreign", "expired_at", "j_lim", "a_lim", "f_lim", "v_lim"):
        if _fits(doc):
            break
        servo.pop(key, None)  # The least needed first; state, error, target and the peers stay.
    for key in texts:
        while not _fits(doc) and servo[key]:
            servo[key] = servo[key][:-8]
    return doc


def motion_view(s: LoopSample | None, link: LinkStats | None, loop_clock: str) -> dict[str, Any]:
    """``sys.motion``: reference and measured state, the plan (``t0``: its start on the system clock, the clock of
    the dynamics timestamps [second], µs resolution — a setpoint's plan starts at its reception, see
    ``control._stages.plan_start``; ``kind``: ``move`` for a setpoint's plan, ``stop`` for a stop's, which
    replaces it, ``off`` once disengaged), the last stop, the link to a bus drive, engagement; ``measured``: false
    while ``meas`` is no fresh, trusted measurement (absent otherwise).

    Kept within a register string: the reference and measured positions keep their digits longest (a position
    shown to 3 digits is no position): first the other numbers get fewer digits, then ``t`` and ``limited`` go,
    the positions keep at least 5 digits, and only then ``over``, ``settled`` and ``stop`` go (how the last motion
    ended: the tests and the compose checks judge them).
    """
    if s is None:
        return {"engaged": False}
    t0 = system_minus_monotonic_s() + s.plan_start_s if loop_clock == "real" else math.nan
    kind = "stop" if s.stopping else "move" if s.engaged else "off"

    def build(state: int, other: int) -> dict[str, Any]:
        doc = {
            "ref": _g(s.ref_position, digits=state) + _g(s.ref_velocity, s.ref_acceleration, digits=other,
                                                          floor=RESIDUAL),
            "meas": _g(s.position, digits=state) + _g(s.velocity, s.acceleration, s.force, digits=other,
                                                      floor=RESIDUAL),
            "plan": {"status": s.plan_status, **({"repaired": True} if s.repaired else {}),
                     "T": _g(s.plan_duration)[0], "t0": round(t0, 6) if math.isfinite(t0) else str(t0), "kind": kind},
            "settled": _g(s.settled_after_s, digits=other)[0],
            "track_max": _g(s.tracking_error_max, digits=min(other, 4))[0],
            "over": _g(s.overshoot, digits=3)[0],
            **({"stop": _g(s.stop_planned_s, s.stop_took_s, s.stop_bound_s, digits=other)}
               if math.isfinite(s.stop_bound_s) else {}),  # Absent before the first stop.
            "limited": s.limited,
            **({"wait": _g(s.drive_waited_s, digits=3)[0]} if s.drive_waited_s > 0.0 else {}),  # For its drive.
            "engaged": s.engaged,
            **({} if s.measured else {"measured": False}),  # meas: the last good values (zeros before any)
            "t": _g(s.time_s)[0],
        }
        if link is not None:
            ms = (link.age_p50, link.age_max, link.delay_p50, link.delay_max)
            doc["link"] = _g(*(1e3 * x for x in ms), digits=3)
        return doc

    for other in (7, 5, 4, 3):
        doc = build(7, other)
        if _fits(doc):
            return doc
    optional = ("t", "wait", "limited", "over", "settled", "stop")  # Dropped in this order: the least needed first.
    for state, other, droppable in ((7, 3, 3), (7, 2, 3), (6, 2, 3), (5, 2, 3), (5, 2, 6), (4, 2, 6), (3, 2, 6)):
        doc = build(state, other)  # Positions keep 5 digits longest, the rest go down to 2, then keys go.
        for key in optional[:droppable]:
            if _fits(doc):
                return doc
            doc.pop(key, None)
        if _fits(doc):
            return doc
    return doc


def _fits(doc: dict[str, Any]) -> bool:
    """True if the JSON of ``doc`` fits a register string."""
    return len(json.dumps(doc, separators=(",", ":")).encode()) <= REGISTER_STRING_MAX


def _count(n: int) -> int:
    return min(int(n), COUNT_MAX)


def counters_view(c: AxisCounters, refused_writes: int, restarts: int) -> dict[str, Any]:
    """``sys.counters``: setpoint intake counts since the process started, refused register writes, restarts
    (≤ 255 bytes with every count at :data:`COUNT_MAX`)."""
    return {
        "accepted": _count(c.setpoints_accepted),
        "rejected": _count(c.setpoints_rejected),
        "ignored_unarmed": _count(c.setpoints_ignored_unarmed),
        "ignored_error": _count(c.setpoints_ignored_error),
        "bad_payload": _count(c.setpoints_bad_payload),
        "coalesced": _count(c.setpoints_coalesced),
        "publishers": _count(c.setpoint_publishers),
        "ignored_mimic": _count(c.setpoints_ignored_mimic),
        "refused_writes": _count(refused_writes),
        "restarts": _count(restarts),
    }


def events_view(c: AxisCounters, e: EventCounts, uptime_s: float) -> dict[str, Any]:
    """``sys.events``: the coordinated start, frames dropped by the reassembly guard, loop errors, feedback faults,
    clipped drive commands, dropped messages of foreign drives, time master changes and clock steps, uptime
    (≤ 255 bytes with every count at :data:`COUNT_MAX`)."""
    return {
        "staged": _count(c.setpoints_staged),
        "starts": _count(c.starts),
        "starts_refused": _count(c.starts_refused),
        "dropped_frames": _count(dropped_frames()),
        "loop_errors": _count(e.loop_errors),
        "fb_faults": _count(e.feedback_faults),
        "clipped": _count(e.commands_clipped),
        "foreign": _count(e.foreign_drive),
        "masters": _count(e.master_changes),
        "steps": _count(e.clock_steps),
        "uptime_s": min(round(uptime_s), COUNT_MAX),
    }


def timing_view(s: LoopSample | None, lateness_s: np.ndarray, dynamics_lost: int = 0) -> dict[str, Any]:
    """``sys.timing``: the loop's ticks, the ticks it missed (due while its thread was more than a period late: a host
    too busy for ``servo.loop_rate``), the largest lateness of a tick, the p99 of its thread's recent wake-ups
    (``lateness_s``, the latest 65,536) [millisecond], and the ``dynamics`` samples lost: traced by the loop but
    overwritten before this node's event loop published them (``control/_trace.py``: it fell that far behind)."""
    if s is None:
        return {"ticks": 0}
    p99 = float(np.percentile(lateness_s, 99.0)) if len(lateness_s) else 0.0
    return {"ticks": _count(s.ticks), "missed": _count(s.missed_ticks), "late_max_ms": round(s.late_max_s * 1e3, 3),
            "late_p99_ms": round(p99 * 1e3, 3), "dynamics_lost": _count(dynamics_lost)}


def envelope_view(env: Envelope | None) -> list[float]:
    """``sys.envelope``: the envelope in force [|v|, |a|, |j|, force] (NaNs before the loop runs). Every setpoint's
    limits are clipped into it, so a coordinator that plans within it plans what the node will run."""
    if env is None:
        return [math.nan] * 4
    return [env.velocity, env.acceleration, env.jerk, env.force]


def reference_view(s: LoopSample | None) -> list[float]:
    """``sys.reference``: the reference [p, v, a] at full precision while the loop commands the drive, else NaNs.

    A coordinator predicts a node's next plan from it (an engaged node plans from its reference, not from the
    measured position); ``sys.motion`` rounds it to fit its JSON.
    """
    if s is None or not s.engaged:
        return [math.nan] * 3
    return [s.ref_position, s.ref_velocity, s.ref_acceleration]


def real64_register(view: Callable[[], list[float]]) -> Callable[[], register.Value]:
    """A read-only register getter serving ``view()`` as a real64 array."""
    return lambda: register.Value(real64=register.Real64(view()))


def json_register(view: Callable[[], dict[str, Any]]) -> Callable[[], register.Value]:
    """A read-only register getter serving ``view()`` as compact JSON."""

    def get() -> register.Value:
        return register.Value(string=register.String(fit_json(view())))

    return get


def fit_json(doc: dict[str, Any]) -> bytes:
    """Compact JSON of ``doc`` within a register string, always valid: a view that still comes out too long loses
    its last keys (``"cut": true`` says so) rather than being cut mid-value."""
    text = json.dumps(doc, separators=(",", ":")).encode()
    if len(text) <= REGISTER_STRING_MAX:
        return text
    items = list(doc.items())
    while items:
        items.pop()
        text = json.dumps({**dict(items), "cut": True}, separators=(",", ":")).encode()
        if len(text) <= REGISTER_STRING_MAX:
            return text
    return b'{"cut":true}'


def text_register(text: Callable[[], str]) -> Callable[[], register.Value]:
    """A read-only register getter serving ``text()``."""
    return lambda: register.Value(string=register.String(text().encode()[:REGISTER_STRING_MAX]))


def feedback_message(engaged: bool, health: Health, demand_factor: float) -> zubax.service.actuator.Feedback_1_0:
    """``feedback``: readiness (ENGAGED/STANDBY), health, and the demand factor [percent]."""
    return zubax.service.actuator.Feedback_1_0(
        heartbeat=zubax.service.Heartbeat_1_0(
            readiness=zubax.service.Readiness_1_0(3 if engaged else 2),
            health=zubax.service.Health_1_0(int(health)),
        ),
        demand_factor_pct=int(max(-128, min(127, round(demand_factor * 100)))),
    )


def status_message(
    s: LoopSample, error: ErrorCode, in_error: bool, error_count: int
) -> zubax.service.actuator.Status_1_0:
    """``status``: error count and fault flags (temperatures unknown)."""
    flags = zubax.service.actuator.FaultFlags_1_0(
        overload=s.demand_factor >= 1.0,
        mechanical=s.error in (ErrorCode.DRIVE_LOST, ErrorCode.FOLLOWING_ERROR, ErrorCode.STOP_TIMEOUT),
        configuration=error in (ErrorCode.INFEASIBLE, ErrorCode.NUMERICAL_FAILURE, ErrorCode.DRIVE_INCAPABLE),
        other=in_error,
    )
    return zubax.service.actuator.Status_1_0(
        motor_temperature=math.nan, controller_temperature=math.nan, error_count=_count(error_count), fault_flags=flags
    )


def dynamics_message(
    s: LoopSample, real_clock: bool = True, sync_offset_s: float = 0.0
) -> zubax.physics.dynamics.DoF3rdTs_1_0:
    """``dynamics``: measured position, velocity, acceleration and force, stamped [µs, synchronized time: the
    system clock + ``sync_offset_s``] with the sample's own time (``real_clock``: the loop runs on the monotonic
    clock; else the time of publication)."""
    stamp_s = (system_minus_monotonic_s() + s.time_s if real_clock else time.time()) + sync_offset_s
    kin = zubax.physics.kinematics.DoF3rd_1_0(
        base=zubax.physics.kinematics.DoF2nd_1_0(position=s.position, velocity=s.velocity),
        acceleration=s.acceleration,
    )
    return zubax.physics.dynamics.DoF3rdTs_1_0(
        timestamp=zubax.Timestamp_1_0(microsecond=int(stamp_s * 1e6)),
        value=zubax.physics.dynamics.DoF3rd_1_0(kinematics=kin, force=s.force),
    )


def traced_dynamics_message(row: Any, loop_to_synchronized_s: float) -> zubax.physics.dynamics.DoF3rdTs_1_0:
    """``dynamics`` of one traced sample (a row of ``control/_trace.py``'s columns ``L.TR_*``), stamped [µs] with
    its loop time plus ``loop_to_synchronized_s`` (synchronized time − monotonic clock)."""
    t, p, v, a, f = (float(x) for x in row[: L.TR_N])
    kin = zubax.physics.kinematics.DoF3rd_1_0(base=zubax.physics.kinematics.DoF2nd_1_0(position=p, velocity=v),
                                              acceleration=a)
    return zubax.physics.dynamics.DoF3rdTs_1_0(
        timestamp=zubax.Timestamp_1_0(microsecond=int((t + loop_to_synchronized_s) * 1e6)),
        value=zubax.physics.dynamics.DoF3rd_1_0(kinematics=kin, force=f),
    )


def _g(*x: float, digits: int = 7, floor: float = 0.0) -> list[float | str]:
    """Floats rounded to ``digits`` significant digits for compact JSON, magnitudes below ``floor`` as 0; non-finite
    as strings."""
    return [(0.0 if abs(v) < floor else float(f"{v:.{digits}g}")) if math.isfinite(v) else str(v) for v in x]
