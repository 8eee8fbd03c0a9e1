"""The node's side of mimic: a thread-safe store of the leader's samples and state (the loop's seqlocked ``lead``
array, :class:`LeaderInput`), and the loop's mimic report read back (:class:`MimicSample`).

No mathematics here: it only copies numbers in and out under the seqlock; the relation, the extrapolation and
the verdicts are all in :mod:`._mimic`."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from .._seqlock import read_seqlocked
from . import _layout as L
from ._mimic import Relation


class LeaderInput:
    """Writes ``lead`` (the node is its only writer; safe from any thread).

    :param lead: the loop's ``lead`` array (``ControlLoop.arrays.lead``).
    """

    def __init__(self, lead: np.ndarray, relation: Relation, compensate: bool) -> None:
        self._lead = lead
        self._lock = threading.Lock()
        with self._writing() as ld:
            ld[L.LD_MULT], ld[L.LD_OFFSET], ld[L.LD_REF] = relation.multiplier, relation.offset, relation.reference
            ld[L.LD_COMPENSATE] = 1.0 if compensate else 0.0

    def sample(self, p: float, v: float, a: float, measured_at_s: float, received_at_s: float) -> None:
        """A leader sample: its state, when it was in it and when it arrived [second, loop clock]."""
        with self._writing() as ld:
            ld[L.LD_P], ld[L.LD_V], ld[L.LD_A] = p, v, a
            ld[L.LD_T], ld[L.LD_RX_T] = measured_at_s, received_at_s

    def state(self, value: float, received_at_s: float) -> None:
        """The leader's state (``L.LEADER_*``) from the message received at ``received_at_s`` [second, loop clock]."""
        with self._writing() as ld:
            ld[L.LD_STATE], ld[L.LD_STATE_RX_T] = value, received_at_s

    def _writing(self) -> _SeqlockWrite:
        return _SeqlockWrite(self._lead, self._lock)


class _SeqlockWrite:
    """``with``: the sequence number is odd inside (readers retry), even after."""

    def __init__(self, a: np.ndarray, lock: threading.Lock) -> None:
        self._a = a
        self._lock = lock

    def __enter__(self) -> np.ndarray:
        self._lock.acquire()
        self._a[L.LD_SEQ] += 1.0
        return self._a

    def __exit__(self, *_: object) -> None:
        self._a[L.LD_SEQ] += 1.0
        self._lock.release()


MIMIC_REASONS = {
    0.0: "",
    L.MIMIC_LOST: "lost leader: no leader sample within the deadman timeout",
    L.MIMIC_DISENGAGED: "the leader disengaged",
    L.MIMIC_LEADER_ERROR: "the leader reports an error",
}
"""Why following ended, in words (``MimicSample.stop_reason``)."""


@dataclass(frozen=True)
class MimicSample:
    """The loop's mimic report of one tick."""

    target: float
    """The relation applied to the extrapolated leader now; NaN when not following."""
    error: float
    """Target − measured position at the measurement's time; NaN when not following."""
    lag: bool
    """The relation demands more velocity or acceleration than the follower's limits."""
    lag_count: int
    stop_reason: str
    """Why following ended last (empty while following or before)."""
    stop_latency_s: float
    """That stop's loop time − reception of the message that caused it (a lost leader: − the deadman's expiry)."""
    extrapolated_s: float
    """The interval the latest leader sample was extrapolated over [second]."""
    leader_age_s: float
    """Now − reception of the latest leader sample [second]."""

    @staticmethod
    def read(out: np.ndarray) -> MimicSample:
        """From the loop's ``out`` array (consistently)."""
        o = np.empty_like(out)
        read_seqlocked(out, o)
        return MimicSample(
            target=float(o[L.O_MIM_TARGET]),
            error=float(o[L.O_MIM_ERROR]),
            lag=bool(o[L.O_MIM_LAG]),
            lag_count=int(o[L.O_MIM_LAG_COUNT]),
            stop_reason=MIMIC_REASONS.get(float(o[L.O_MIM_REASON]), "?"),
            stop_latency_s=float(o[L.O_MIM_STOP_LATENCY]),
            extrapolated_s=float(o[L.O_MIM_EXTRAP]),
            leader_age_s=float(o[L.O_MIM_LEAD_AGE]) if math.isfinite(o[L.O_MIM_LEAD_AGE]) else math.inf,
        )
