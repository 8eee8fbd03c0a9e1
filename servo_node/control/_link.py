"""The link to a drive on the bus, measured and modelled inside the loop: delays, clock offset, prediction.

Why here and not in the drive's Python half: the loop is where the numbers are used (every tick, without the
GIL), it already sees every send and every measurement through the seqlocked ``rx`` array, and a fit that runs
at the measurement rate costs a few microseconds of numba; the Python half only stamps what it sent and when.

**Times.** The network side records each command it sends (time ``t_i`` on our monotonic clock, velocity,
force) and each measurement's reception time ``r_k`` and the drive's own timestamp ``s_k`` (``…Ts`` dynamics; µs
of the drive's clock). On one host the drive's clock *is* ours (sim-plant stamps the host's monotonic clock), so
``r_k − s_k`` is the measurement's age at reception. Across hosts ``s_k = τ_k + θ`` with an unknown offset θ
(another host's monotonic clock, or a network time that is not ours): the stamps are then foreign, detected by
``r − s`` being negative or implausibly large (outside [−1 ms, 250 ms]).

**The command delay** ``d`` (send → effect seen in the drive's dynamics) is fitted continuously: for every
candidate delay on a grid, the drive's displacement between two consecutive measurements (torque law: its change
of velocity) is compared with what the sent commands (sample-and-hold) would have produced over the same interval
shifted back by ``d``; the costs are forgetting sums of the absolute residuals over informative measurements
(those where the candidates disagree, i.e. the command changed), and the best candidate (refined by a parabola)
is the estimate. Absolute, not squared: a loaded host stalls a process now and then, and a stalled delivery is
an outlier that must not drag the typical delay (the one the feed-forward is timed by) towards it.
What the fit actually determines is ``D1 = d + θ``, the
delay in drive-clock minus loop-clock terms; that is all the predictor needs (below), so a foreign clock costs
the predictor nothing. Splitting the round trip ``D1 + (r − s)`` into its two one-way legs needs θ: 0 on one
host; with a foreign clock the split is taken symmetric (NTP's assumption: command delay = the fastest
measurement's age), which only shifts the whole motion in time against our clock by half the asymmetry.

**Prediction** (Smith-predictor-like): the drive's position when the next command takes effect, ``t_e = t_n +
d`` (``t_n`` the next send), is the measured position plus the commanded motion that the measurement cannot yet
show: ``p̂(t_e) = p(τ_k) + ∫ v_sent(u) du`` over ``u ∈ [s_k − D1, t_n]`` (velocity law; the drive follows its
velocity command), or ``p`` and ``v`` integrated through ``f_sent / J`` (torque law). The feedback then acts on
``p_ref(t_e) − p̂(t_e)``: the delay is outside the loop, and what is left for the feedback is the model error.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import tick_jit
from ..drive._base import DRIVE_SIM
from . import _layout as L
from ._layout import LoopArrays

LOCAL_MIN_S = -0.001
"""Reception − stamp below this means the drive's clock is not ours (a clock cannot receive before it sends)."""
LOCAL_MAX_S = 0.25
"""…and above this too: no measurement on one host is that old at reception while the link is alive."""
RS_RELAX_S = 1e-4
"""The running minimum of reception − stamp rises by this per measurement (follows a slower link in seconds)."""
FORGET = 0.98
"""Forgetting factor of the delay fit per informative measurement (memory ≈ 50 measurements)."""
MIN_WEIGHT = 10.0
"""Informative measurements the fit needs before its estimate replaces the prior (the fastest measurement age)."""


@tick_jit
def _held(sends: np.ndarray, n_sends: float, t: float, col: int) -> float:
    """The command (column ``col``) in force at loop time ``t``: the last one sent at or before ``t``. Before the
    first send of this engagement the drive was not commanded: 0 (at rest, no force); NaN if ``t`` precedes what
    the ring still holds of a longer history."""
    n = int(n_sends)
    m = min(n, L.SENDS_N)
    if m == 0:
        return 0.0
    lo = n - m  # oldest logical index
    if sends[lo % L.SENDS_N, L.SEND_T] > t:
        return 0.0 if n <= L.SENDS_N else np.nan
    hi = n - 1
    while lo < hi:  # the last logical index with time <= t
        mid = (lo + hi + 1) // 2
        if sends[mid % L.SENDS_N, L.SEND_T] <= t:
            lo = mid
        else:
            hi = mid - 1
    return sends[lo % L.SENDS_N, col]


@tick_jit
def _stamp(m: np.ndarray) -> float:
    """The measurement's timestamp: the drive's, or the reception time if it sends none (0 means unknown)."""
    s = m[L.M_STAMP]
    return s if (math.isfinite(s) and s > 0.0) else m[L.M_RX_T]


@tick_jit
def _integral(sends: np.ndarray, n_sends: float, a: float, b: float, col: int, scale: float) -> float:
    """∫ of the held command (column ``col``, times ``scale``) over loop time [a, b]; NaN if ``a`` precedes the
    ring."""
    n = int(n_sends)
    x = _held(sends, n_sends, a, col)
    if not math.isfinite(x):
        return np.nan
    total = 0.0
    u = a
    # Walk forward from the first send after a (a linear walk from the oldest: the ring is short).
    for i in range(max(n - L.SENDS_N, 0), n):
        t_i = sends[i % L.SENDS_N, L.SEND_T]
        if t_i <= u:
            continue
        if t_i >= b:
            break
        total += x * (t_i - u)
        u = t_i
        y = sends[i % L.SENDS_N, col]
        if math.isfinite(y):
            x = y
    return (total + x * (b - u)) * scale


@tick_jit
def _fit(A: LoopArrays, s0: float, s1: float, y: float, col: int, scale: float) -> None:
    """Add the change ``y`` between two consecutive measurements (stamps ``s0``, ``s1``) to the delay fit, if it
    is informative: velocity law, the displacement against ∫ v_sent; torque law, the velocity change against
    ∫ f_sent / J, both over the interval shifted back by each candidate delay. The integral is continuous in the
    delay, so the fit resolves delays finer than the send and measurement periods whatever their phases."""
    lk, sends = A.link, A.sends
    n = lk[L.LK_N_SENDS]
    a, b = s0 - lk[L.LK_THETA_REF], s1 - lk[L.LK_THETA_REF]
    lo, hi = math.inf, -math.inf
    for j in range(L.LINK_GRID_N):
        d = L.LINK_GRID_MIN + j * L.LINK_GRID_STEP
        x = _integral(sends, n, a - d, b - d, col, scale)
        if not math.isfinite(x):
            return  # The history does not reach back that far (just engaged): no verdict.
        lo = min(lo, x)
        hi = max(hi, x)
    if not (hi - lo > 1e-12 * (1.0 + abs(hi))) or not math.isfinite(y):
        return  # Every candidate saw the same commands: this measurement cannot tell delays apart.
    g = L.LK_GRID
    best = 0
    for j in range(L.LINK_GRID_N):
        d = L.LINK_GRID_MIN + j * L.LINK_GRID_STEP
        x = _integral(sends, n, a - d, b - d, col, scale)
        lk[g + j] = FORGET * lk[g + j] + abs(y - x)
        if lk[g + j] < lk[g + best]:
            best = j
    lk[L.LK_WEIGHT] = FORGET * lk[L.LK_WEIGHT] + 1.0
    frac = 0.0
    if 0 < best < L.LINK_GRID_N - 1:
        c0, c1, c2 = lk[g + best - 1], lk[g + best], lk[g + best + 1]
        den = c0 - 2.0 * c1 + c2
        if den > 0.0:
            frac = min(max(0.5 * (c0 - c2) / den, -0.5), 0.5)
    lk[L.LK_D1] = lk[L.LK_THETA_REF] + L.LINK_GRID_MIN + (best + frac) * L.LINK_GRID_STEP


@tick_jit
def observe(now: float, A: LoopArrays) -> None:
    """Take a new send into the ring and a new measurement into the model; set ``meas[M_T]`` (when the drive was
    in the measured state, loop clock). The embedded joint is measured now."""
    m, lk, cfg, sends = A.meas, A.link, A.cfg, A.sends
    if cfg[L.K_DRIVE] == DRIVE_SIM:
        m[L.M_T] = now
        return
    engaged = A.st[L.ST_ENGAGED]
    if engaged != lk[L.LK_ENGAGED]:
        lk[L.LK_ENGAGED] = engaged
        lk[L.LK_N_SENDS] = 0.0  # A new engagement: the history of commands starts again (the drive was released).
    sc = m[L.M_SENT_COUNT]
    if sc > 0.0 and sc != lk[L.LK_SENT_COUNT]:
        lk[L.LK_SENT_COUNT] = sc
        i = int(lk[L.LK_N_SENDS]) % L.SENDS_N
        sends[i, L.SEND_T] = m[L.M_SENT_T]
        sends[i, L.SEND_V] = m[L.M_SENT_V]
        sends[i, L.SEND_F] = m[L.M_SENT_F]
        lk[L.LK_N_SENDS] += 1.0
    mc = m[L.M_COUNT]
    if not mc > 0.0:
        m[L.M_T] = np.nan
        return
    s = _stamp(m)
    if mc != lk[L.LK_MEAS_COUNT]:
        lk[L.LK_MEAS_COUNT] = mc
        _take_measurement(A, s)
    m[L.M_T] = s - lk[L.LK_THETA]


@tick_jit
def _take_measurement(A: LoopArrays, s: float) -> None:
    """Update the clock model, the delay fit and the statistics rings with a new measurement stamped ``s``."""
    m, lk, cfg = A.meas, A.link, A.cfg
    x = m[L.M_RX_T] - s
    stamped = math.isfinite(m[L.M_STAMP]) and m[L.M_STAMP] > 0.0
    if math.isnan(lk[L.LK_THETA_REF]):
        lk[L.LK_THETA_REF] = 0.0 if (stamped and LOCAL_MIN_S <= x <= LOCAL_MAX_S) else -x
        lk[L.LK_RS_MIN] = x
    lk[L.LK_RS_MIN] = min(lk[L.LK_RS_MIN] + RS_RELAX_S, x)
    local = stamped and LOCAL_MIN_S <= lk[L.LK_RS_MIN] <= LOCAL_MAX_S
    lk[L.LK_LOCAL] = 1.0 if local else 0.0
    s_prev = lk[L.LK_PREV_S]
    if A.st[L.ST_ENGAGED] != 0.0 and math.isfinite(s_prev) and s > s_prev:
        if cfg[L.K_LAW] == L.LAW_TORQUE:
            _fit(A, s_prev, s, m[L.M_V] - lk[L.LK_PREV_V], L.SEND_F, 1.0 / cfg[L.K_INERTIA])
        else:
            _fit(A, s_prev, s, m[L.M_P] - lk[L.LK_PREV_P], L.SEND_V, 1.0)
    lk[L.LK_PREV_S] = s
    lk[L.LK_PREV_P] = m[L.M_P]
    lk[L.LK_PREV_V] = m[L.M_V]
    informed = lk[L.LK_WEIGHT] >= MIN_WEIGHT
    if local:
        theta = 0.0
    elif informed:
        theta = 0.5 * (lk[L.LK_D1] - lk[L.LK_RS_MIN])  # Symmetric split of the fastest round trip.
    else:
        theta = -lk[L.LK_RS_MIN]  # Nothing known yet: take the fastest measurement as fresh.
    lk[L.LK_THETA] = theta
    min_age = max(lk[L.LK_RS_MIN] + theta, 0.0)
    lk[L.LK_DELAY] = max(lk[L.LK_D1] - theta, 0.0) if informed else min_age
    lk[L.LK_AGE] = x + theta
    k = int(lk[L.LK_N_STATS]) % L.LINK_STATS_N
    A.link[L.LK_AGES + k] = x + theta
    A.link[L.LK_DELAYS + k] = lk[L.LK_DELAY] if informed else np.nan
    lk[L.LK_N_STATS] += 1.0


@tick_jit
def restart_clock(A: LoopArrays) -> None:
    """Forget the drive's clock and the delay fit (a drive that restarted, or whose clock stepped): the next
    measurement starts the model again, as the first one did."""
    lk = A.link
    for k in (L.LK_THETA_REF, L.LK_LOCAL, L.LK_THETA, L.LK_D1, L.LK_DELAY, L.LK_RS_MIN, L.LK_PREV_S):
        lk[k] = np.nan
    lk[L.LK_WEIGHT] = 0.0
    for k in range(L.LK_GRID, L.LK_GRID + L.LINK_GRID_N):
        lk[k] = 0.0
    lk[L.LK_MEAS_COUNT] = 0.0


@tick_jit
def compensated(A: LoopArrays) -> bool:
    """True if this loop commands a drive on the bus through the link model."""
    return A.cfg[L.K_DRIVE] != DRIVE_SIM and A.cfg[L.K_COMPENSATE] != 0.0


@tick_jit
def effect_time(now: float, A: LoopArrays) -> float:
    """When the command written now takes effect at the drive: the next send plus the command delay."""
    nxt = A.meas[L.M_SENT_NEXT]
    t_n = max(now, nxt) if math.isfinite(nxt) else now
    d = A.link[L.LK_DELAY]
    return t_n + (d if math.isfinite(d) else 0.0)


@tick_jit
def predict(A: LoopArrays, t_e: float) -> tuple[float, float]:
    """(p̂, v̂): the drive's state at ``t_e`` (loop clock) from the latest measurement and the commands sent since
    it could last show them, plus the command in ``tx`` from its send on (see the module docstring)."""
    m, lk, sends, cfg = A.meas, A.link, A.sends, A.cfg
    torque = cfg[L.K_LAW] == L.LAW_TORQUE
    col = L.SEND_F if torque else L.SEND_V
    inv_j = 1.0 / cfg[L.K_INERTIA]
    d = lk[L.LK_DELAY] if math.isfinite(lk[L.LK_DELAY]) else 0.0
    u = m[L.M_T] - d  # send time of the command in force when the drive was measured
    u_end = t_e - d  # …and of the command that takes effect at t_e
    p, v = m[L.M_P], m[L.M_V]
    val = _held(sends, lk[L.LK_N_SENDS], u, col)
    if not math.isfinite(val):
        val = 0.0 if torque else v
    n = int(lk[L.LK_N_SENDS])
    first = max(n - L.SENDS_N, 0)
    for i in range(first, n):
        t_i = sends[i % L.SENDS_N, L.SEND_T]
        if t_i <= u:
            continue
        if t_i >= u_end:
            break
        p, v = _advance(p, v, val, t_i - u, torque, inv_j)
        u = t_i
        x = sends[i % L.SENDS_N, col]
        if math.isfinite(x):
            val = x
    if u_end > u:
        p, v = _advance(p, v, val, u_end - u, torque, inv_j)
    return p, v


@tick_jit
def _advance(p: float, v: float, val: float, h: float, torque: bool, inv_j: float) -> tuple[float, float]:
    """The drive model over ``h`` seconds of one held command: it runs at the velocity command, or accelerates
    at force / J."""
    if torque:
        a = val * inv_j
        return p + h * (v + 0.5 * a * h), v + a * h
    return p + val * h, val
