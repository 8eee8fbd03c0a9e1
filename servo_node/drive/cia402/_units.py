"""The loop's command in a CiA 402 drive's units and objects, and the drive's state as ``sys.drive`` shows it:
where a cycle's targets are encoded (CSV: 0x60FF; CST: 0x6071 in ‰ of the rated torque; CSP: 0x607A with the
velocity and torque offsets 0x60B1/0x60B2; IP: 0x60C1:01, the reference one period ahead, since the drive moves
linearly from the previous record to this one over the period that starts at the SYNC)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _remote_link as link
from . import _dictionary as od
from ._bringup import Identity, PdoLayout, Scale, Settings

I32, I16 = 2**31 - 1, 2**15 - 1


def clip_counts(x: float, bound: int) -> int:
    """``x`` rounded into a signed object of ±``bound`` (0 if not finite)."""
    return int(min(max(round(x), -bound), bound)) if math.isfinite(x) else 0


def cycle_targets(s: Settings, mode: int, scale: Scale, rated: float, tx: np.ndarray, applied: bool,
                  p_counts: int) -> tuple[list[tuple[int, int]], float, float]:
    """(the target objects of this cycle with their values, the velocity and force recorded as sent) from the
    loop's command ``tx`` in streaming mode ``mode``; not ``applied`` (not enabled, or the loop let go): zero
    velocity or torque, or hold the measured position ``p_counts``."""
    k, kv = scale.position, scale.velocity
    v, f = (tx[link.TX_V], tx[link.TX_F]) if applied else (0.0, math.nan)
    if mode == od.MODE_CSV:
        return [(od.TARGET_VELOCITY, clip_counts(v * kv, I32) if applied else 0)], v, f
    if mode == od.MODE_CST:
        return [(od.TARGET_TORQUE, clip_counts(f / rated * 1000.0, I16) if applied else 0)], math.nan, f
    if mode == od.MODE_IP:
        if not applied:
            return [(od.IP_DATA, p_counts)], 0.0, math.nan
        t = s.period_s
        ahead = tx[link.TX_P] + tx[link.TX_VREF] * t + 0.5 * tx[link.TX_AREF] * t * t
        return [(od.IP_DATA, clip_counts(ahead * k, I32))], tx[link.TX_VREF], math.nan
    p = tx[link.TX_P] if applied else math.nan
    # The loop's velocity law as the velocity offset: the mean reference velocity over the cycle the target is held
    # for (the velocity at the cycle's start would lag by a·T²/2 each cycle) plus its correction of the predicted
    # position; the drive's own loop then acts on what is left.
    v = tx[link.TX_V] if applied and s.compensation else tx[link.TX_VREF] if applied else 0.0
    ff = s.inertia * tx[link.TX_AREF] / rated * 1000.0 if applied and rated > 0 else 0.0
    targets = [(od.TARGET_POSITION, clip_counts(p * k, I32) if applied else p_counts),
               (od.VELOCITY_OFFSET, clip_counts(v * kv, I32)), (od.TORQUE_OFFSET, clip_counts(ff, I16))]
    return targets, v, math.nan


def drive_view(s: Settings, sw: int, error_code: int, emcy: tuple[int, int] | None, ident: Identity,
               layout: PdoLayout | None, mode: int | None, nmt: int, units: str = "",
               watch: str = "") -> dict[str, Any]:
    """The drive's part of the axis's ``sys.drive`` (compact: a register string holds 256 bytes): node-ID, state
    (UNKNOWN for no recent statusword: ``sw`` < 0), statusword, the mode its 0x6061 shows (the one we set until it
    said), its NMT state by its heartbeat, its error code 0x603F, the last EMCY code, flags (``following_error``,
    ``warning``, ``internal_limit``), identity (vendor/product from 0x1018), where the units came from
    (``units``: ``register``, ``0x60A8``, ``0x6092``, ``0x608F``, ``default``) and how it watches us (``watch``:
    ``heartbeat``, ``guarding``, ``none``), once brought up."""
    flags = [name for bit, name in ((od.SW_FOLLOWING_ERROR, "following_error"), (od.SW_WARNING, "warning"),
                                    (od.SW_INTERNAL_LIMIT, "internal_limit"))
             if sw >= 0 and sw & bit and (bit != od.SW_FOLLOWING_ERROR or ident.mode in (od.MODE_CSP, od.MODE_IP))]
    return {
        "node": s.node_id, "state": od.state_of(sw), "sw": f"0x{sw:04X}" if sw >= 0 else None,
        "mode": od.mode_name((ident.mode or od.MODE_OF_LAW[s.law]) if mode is None else mode),
        "nmt": od.nmt_name(nmt),
        "error_code": f"0x{error_code:04X}",
        "emcy": f"0x{emcy[0]:04X}" if emcy else None, "flags": flags,
        "id": f"0x{ident.vendor:08X}/0x{ident.product:08X}",
        **({"pdo": "drive"} if layout is not None and not layout.own else {}),
        **({"units": units} if units else {}), **({"watch": watch} if watch else {}),
    }
