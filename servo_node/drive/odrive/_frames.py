"""The loop's command as CAN Simple frames, in the ODrive's units: turns, turns/s and N·m at its shaft.

Velocity: Set_Input_Vel (velocity, torque feed-forward J·a_ref); torque: Set_Input_Torque; position: Set_Input_Pos
(the reference's mean over the period the drive holds it, the velocity feed-forward — the loop's velocity command
with the link model, else the reference's velocity — and the torque feed-forward J·a_ref). J is
``servo.control.inertia``: unset (0), no torque feed-forward is sent (a wrong one would push the motor; the drive's
own loops do without). The torque at the shaft is the servo's force·units_per_turn/2π (the power of both sides
equal). Not commanded, the frame holds: zero velocity or torque, or the position measured last.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cyphal_common import odrive as cs

from .. import _remote_link as link

TWO_PI = 2.0 * math.pi


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one ODrive axis is driven with (from the registers)."""

    iface: str
    node_id: int
    law: str  # servo.drive.mode: velocity, torque or position
    units_per_turn: float
    period_s: float
    timeout_s: float
    lost_after_s: float  # the heartbeat silent this long: the drive lost
    endpoints: str  # flat_endpoints.json, or "": the watchdog is the user's
    watchdog_s: float
    inertia: float  # 0: no torque feed-forward
    compensation: bool


CONTROL_MODE = {"velocity": cs.ControlMode.VELOCITY_CONTROL, "torque": cs.ControlMode.TORQUE_CONTROL,
                "position": cs.ControlMode.POSITION_CONTROL}


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def command_frame(s: Settings, tx: np.ndarray, commanded: bool, p_turns: float) -> tuple[int, bytes, float, float]:
    """(command, payload, velocity and force recorded as sent [servo units]) of this period."""
    upt = s.units_per_turn
    if not commanded:
        if s.law == "velocity":
            return cs.SET_INPUT_VEL, cs.pack_floats(0.0, 0.0), 0.0, math.nan
        if s.law == "torque":
            return cs.SET_INPUT_TORQUE, cs.pack_float(0.0), math.nan, 0.0
        return cs.SET_INPUT_POS, cs.pack_input_pos(_finite(p_turns), 0.0, 0.0), 0.0, math.nan
    ff = _finite(s.inertia * tx[link.TX_AREF]) * upt / TWO_PI if s.inertia > 0.0 else 0.0
    if s.law == "velocity":
        v = _finite(tx[link.TX_V])
        return cs.SET_INPUT_VEL, cs.pack_floats(v / upt, ff), v, tx[link.TX_F]
    if s.law == "torque":
        f = _finite(tx[link.TX_F])
        return cs.SET_INPUT_TORQUE, cs.pack_float(f * upt / TWO_PI), math.nan, f
    # The ODrive holds Input_Pos until the next frame (PASSTHROUGH, no interpolation): the position that errs least
    # over that hold is the reference's mean over it, the middle of [effect time, one drive period later].
    p = 0.5 * (tx[link.TX_P] + tx[link.TX_P_NEXT])
    if not math.isfinite(p):
        return cs.SET_INPUT_POS, cs.pack_input_pos(_finite(p_turns), 0.0, 0.0), 0.0, math.nan
    v = _finite(tx[link.TX_V] if s.compensation else tx[link.TX_VREF])
    return cs.SET_INPUT_POS, cs.pack_input_pos(p / upt, v / upt, ff), v, math.nan
