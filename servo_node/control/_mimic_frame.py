"""The mimic reference frame: the target moving with the leader, which the control stages add to the relative plan
(:func:`sample_relative`), and the mimic fields of the published sample (:func:`publish_into`).

Apart from :mod:`._mimic` so that the stages of :mod:`._stages` can read the reference without importing mimic's
own stages (which use the stop of :mod:`._stages`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..otg import sample_into
from . import _layout as L
from ._layout import LoopArrays


@njit(cache=True, nogil=True)
def add_target(A: LoopArrays, t: float, out: np.ndarray) -> None:
    """Add the target's state at ``t`` after the plan start (``ST_T0``) to a relative sample ``out[0:3]``."""
    mi = A.mim
    out[0] += mi[L.MI_P] + t * (mi[L.MI_V] + 0.5 * mi[L.MI_A] * t)
    out[1] += mi[L.MI_V] + mi[L.MI_A] * t
    out[2] += mi[L.MI_A]


@njit(cache=True, nogil=True)
def sample_relative(A: LoopArrays, t: float, out: np.ndarray) -> None:
    """The reference at ``t`` after the plan start: the relative plan plus the target (mimic mode)."""
    sample_into(A.prof, t, out)
    add_target(A, t, out)


@njit(cache=True, nogil=True)
def publish_into(now: float, A: LoopArrays, following: bool) -> None:
    """The mimic fields of ``out`` (inside the publisher's seqlock)."""
    out, mi, st = A.out, A.mim, A.st
    t = now - st[L.ST_T0]
    if following:
        out[L.O_MIM_TARGET] = mi[L.MI_P] + t * (mi[L.MI_V] + 0.5 * mi[L.MI_A] * t)
        out[L.O_MIM_ERROR] = mi[L.MI_ERROR]
    else:
        out[L.O_MIM_TARGET] = np.nan
        out[L.O_MIM_ERROR] = np.nan
    out[L.O_MIM_LAG] = mi[L.MI_LAG] if following else 0.0
    out[L.O_MIM_LAG_COUNT] = mi[L.MI_LAG_COUNT]
    out[L.O_MIM_REASON] = mi[L.MI_REASON]
    out[L.O_MIM_STOP_LATENCY] = mi[L.MI_STOP_LATENCY]
    out[L.O_MIM_EXTRAP] = mi[L.MI_EXTRAP]
    out[L.O_MIM_LEAD_AGE] = now - A.lead_c[L.LD_RX_T]
