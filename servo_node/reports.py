"""What an axis reports: the JSON register views (``sys.status``, ``sys.motion``, ``sys.counters``) and the messages
``feedback``, ``status`` and ``dynamics``, built from a loop sample and the axis's state. Pure functions, no I/O.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zubax.physics.dynamics
import zubax.physics.kinematics
import zubax.service
import zubax.service.actuator
from pycyphal.application import register
from pycyphal.application.heartbeat_publisher import Health

from .arming import ServoState
from .control import LoopError, LoopSample
from .errors import ErrorCode
from .setpoint import Setpoint

REGISTER_STRING_MAX = 255
"""uavcan.register.Value strings hold at most 256 bytes; keep one spare."""


@dataclass
class AxisCounters:
    """Event counts of one axis since the process started (they survive RESTART)."""

    setpoints_accepted: int = 0
    setpoints_rejected: int = 0
    setpoints_ignored_unarmed: int = 0
    """Valid setpoints not applied: not armed, still initialising, or stopping for a close/RESTART."""
    setpoints_ignored_error: int = 0
    """Valid setpoints not applied because the error that stopped the servo persists."""
    last_rejection: str = ""
    last_rejection_at: float = -math.inf
    """When [second, time.monotonic] the last setpoint was rejected."""


def status_view(
    state: ServoState, reason: str, error: ErrorCode, setpoint: Setpoint | None, expired_after_s: float
) -> dict[str, Any]:
    """``sys.status``: the servo's state, active target and limits, last error code and reason (≤ 256 bytes)."""
    servo: dict[str, Any] = {"state": str(state), "error": int(error)}
    if setpoint is not None:
        servo.update(setpoint.summary())
    if state is ServoState.EXPIRED:
        servo["expired_after_s"] = round(expired_after_s, 4)
    servo["reason"] = reason
    doc = {"servo": servo}
    while len(json.dumps(doc, separators=(",", ":")).encode()) > REGISTER_STRING_MAX and servo["reason"]:
        servo["reason"] = servo["reason"][:-8]  # Shorten the words, never the numbers.
    return doc


def motion_view(s: LoopSample | None) -> dict[str, Any]:
    """``sys.motion``: reference and measured state, the plan, engagement."""
    if s is None:
        return {"engaged": False}
    return {
        "ref": _g(s.ref_position, s.ref_velocity, s.ref_acceleration),
        "meas": _g(s.position, s.velocity, s.acceleration, s.force),
        "plan": {"status": s.plan_status, "repaired": s.repaired, "T": _g(s.plan_duration)[0]},
        "settled": _g(s.settled_after_s)[0],
        "track_max": _g(s.tracking_error_max)[0],
        "stop": _g(s.stop_planned_s, s.stop_took_s),
        "engaged": s.engaged,
        "t": _g(s.time_s)[0],
    }


def counters_view(
    c: AxisCounters, refused_writes: int, restarts: int, loop_errors: int, uptime_s: float
) -> dict[str, Any]:
    """``sys.counters``: event counts since the process started."""
    return {
        "accepted": c.setpoints_accepted,
        "rejected": c.setpoints_rejected,
        "ignored_unarmed": c.setpoints_ignored_unarmed,
        "ignored_error": c.setpoints_ignored_error,
        "refused_writes": refused_writes,
        "restarts": restarts,
        "loop_errors": loop_errors,
        "uptime_s": round(uptime_s, 1),
    }


def json_register(view: Callable[[], dict[str, Any]]) -> Callable[[], register.Value]:
    """A read-only register getter serving ``view()`` as compact JSON."""

    def get() -> register.Value:
        text = json.dumps(view(), separators=(",", ":")).encode()[:REGISTER_STRING_MAX]
        return register.Value(string=register.String(text))

    return get


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
        mechanical=s.error is LoopError.DRIVE_LOST,
        configuration=error in (ErrorCode.INFEASIBLE, ErrorCode.NUMERICAL_FAILURE),
        other=in_error,
    )
    return zubax.service.actuator.Status_1_0(
        motor_temperature=math.nan, controller_temperature=math.nan, error_count=error_count, fault_flags=flags
    )


def dynamics_message(s: LoopSample) -> zubax.physics.dynamics.DoF3rdTs_1_0:
    """``dynamics``: measured position, velocity, acceleration and force, stamped with the wall clock [µs]."""
    kin = zubax.physics.kinematics.DoF3rd_1_0(
        base=zubax.physics.kinematics.DoF2nd_1_0(position=s.position, velocity=s.velocity),
        acceleration=s.acceleration,
    )
    return zubax.physics.dynamics.DoF3rdTs_1_0(
        timestamp=zubax.Timestamp_1_0(microsecond=int(time.time() * 1e6)),
        value=zubax.physics.dynamics.DoF3rd_1_0(kinematics=kin, force=s.force),
    )


def _g(*x: float) -> list[float | str]:
    """Floats rounded to 7 significant digits for compact JSON; non-finite as strings."""
    return [float(f"{v:.7g}") if math.isfinite(v) else str(v) for v in x]
