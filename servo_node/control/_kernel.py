"""The control tick and the real-time loop, compiled with numba ``nogil`` so the GIL can never stall them.

One tick (:func:`tick`), at the measured time ``now``:

1. advance the embedded plant to ``now`` (zero-order hold of the last command), or take the remote drive's
   latest feedback;
2. take the newest command; on a change re-plan from the current reference state (or from the measured
   state if the drive was disengaged, so nothing jumps);
3. sample the reference at ``now`` — not at an assumed period;
4. control law: velocity ``v = v_ref + k·e`` or computed torque ``τ = J·a_ref + K_p·e + K_d·ė`` within the limit;
5. push the command to the drive and publish a sample.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sim_plant._kernels import (
    S_ACCELERATION,
    S_MOTOR_FORCE_FEEDBACK,
    S_POSITION,
    S_VELOCITY,
    command_force,
    command_motor_force,
    command_velocity,
    step_joints,
)

from ..otg import plan_into, profile_duration, sample_into
from ..otg._profile import REPAIRED
from . import _layout as L
from ._clock import monotonic_ns, sleep_until_ns
from ._velocity_profile import VP_DURATION, plan_velocity_into, sample_velocity_into

LoopArrays = tuple[np.ndarray, ...]
"""(cmd, cfg, st, out, c, prof, vprof, ref, sim_params, sim_state, remote): every buffer a tick touches.

``c`` is scratch for the command copy (float64[N_CMD]); ``ref`` scratch float64[8] (reference now, and one
period ahead). Passing them as one tuple keeps the kernels' signatures short; numba types it once.
"""

ERR_NONE = 0.0
ERR_INFEASIBLE = 1.0
ERR_NUMERICAL = 2.0
ERR_DRIVE_LOST = 3.0


@njit(cache=True, nogil=True)
def read_seqlocked(src: np.ndarray, dst: np.ndarray) -> None:
    """Copy a seqlocked array consistently (retries while the writer is mid-update)."""
    while True:
        s0 = src[0]
        dst[:] = src
        if s0 == src[0] and (int(s0) & 1) == 0:
            return


@njit(cache=True, nogil=True)
def _begin_write(a: np.ndarray) -> None:
    a[0] += 1.0


@njit(cache=True, nogil=True)
def _end_write(a: np.ndarray) -> None:
    a[0] += 1.0


@njit(cache=True, nogil=True)
def _start_stop(
    st: np.ndarray, c: np.ndarray, vprof: np.ndarray, p: float, v: float, a: float, now: float
) -> None:
    """Begin the jerk-limited stop from the reference state (p, v, a)."""
    a_stop = c[L.C_STOP_A] if c[L.C_STOP_A] > 0.0 else min(c[L.C_AMAX], -c[L.C_AMIN])
    j_stop = c[L.C_STOP_J] if c[L.C_STOP_J] > 0.0 else c[L.C_JMAX]
    if not (a_stop > 0.0 and j_stop > 0.0):  # No limits known yet (never engaged): stop at once.
        st[L.ST_MODE] = L.MODE_DISENGAGE
        st[L.ST_ENGAGED] = 0.0
        return
    plan_velocity_into(p, v, a, 0.0, -a_stop, a_stop, j_stop, vprof)
    st[L.ST_MODE] = L.MODE_STOP
    st[L.ST_T0] = now
    st[L.ST_STOP_TOOK] = np.nan
    st[L.ST_STOP_PLANNED] = vprof[VP_DURATION]


@njit(cache=True, nogil=True)
def tick(now: float, arrays: LoopArrays) -> None:
    """Run one control tick at loop time ``now`` [second]; see the module docstring. Allocates nothing."""
    cmd, cfg, st, out, c, prof, vprof, ref, sim_params, sim_state, remote = arrays
    ref_next = ref[4:]
    remote_drive = cfg[L.K_DRIVE] == L.DRIVE_REMOTE
    dt = now - st[L.ST_PREV_T] if st[L.ST_TICKS] > 0 else 0.0
    st[L.ST_PREV_T] = now
    if st[L.ST_TICKS] == 0:
        st[L.ST_STARTED_T] = now
    st[L.ST_TICKS] += 1.0

    # 1. Measurement.
    if remote_drive:
        p_m = remote[L.R_P]
        v_m = remote[L.R_V]
        a_m = remote[L.R_A]
        f_m = remote[L.R_F]
        last_rx = remote[L.R_RX_T] if remote[L.R_RX_T] > 0.0 else st[L.ST_STARTED_T]
        if now - last_rx > cfg[L.K_FEEDBACK_TIMEOUT]:
            if st[L.ST_ERROR] != ERR_DRIVE_LOST:
                st[L.ST_ERROR] = ERR_DRIVE_LOST
                st[L.ST_ERROR_COUNT] += 1.0
            st[L.ST_ENGAGED] = 0.0
            st[L.ST_MODE] = L.MODE_DISENGAGE
        elif st[L.ST_ERROR] == ERR_DRIVE_LOST:
            st[L.ST_ERROR] = ERR_NONE
    else:
        if dt > 0.0:
            step_joints(sim_params, sim_state, dt)
        p_m = sim_state[0, S_POSITION]
        v_m = sim_state[0, S_VELOCITY]
        a_m = sim_state[0, S_ACCELERATION]
        f_m = sim_state[0, S_MOTOR_FORCE_FEEDBACK]

    # 2. Command changes.
    read_seqlocked(cmd, c)
    if c[L.C_SEQ] != st[L.ST_CMD_SEQ]:
        st[L.ST_CMD_SEQ] = c[L.C_SEQ]
        mode = c[L.C_MODE]
        if st[L.ST_ENGAGED] == 0.0:
            # Start from the actual state: no jump in position or velocity when (re-)engaging.
            p0, v0, a0 = p_m, v_m, 0.0
        else:
            p0, v0, a0 = out[L.O_PREF], out[L.O_VREF], out[L.O_AREF]
        st[L.ST_FLIM] = c[L.C_FLIM]
        if mode == L.MODE_POSITION and (st[L.ST_ERROR] != ERR_DRIVE_LOST):
            status = plan_into(
                p0, v0, a0, c[L.C_PT], c[L.C_VT],
                c[L.C_VMIN], c[L.C_VMAX], c[L.C_AMIN], c[L.C_AMAX], c[L.C_JMAX], prof,
            )  # fmt: skip
            out[L.O_PLAN_STATUS] = status
            out[L.O_REPAIRED] = prof[REPAIRED]
            out[L.O_DURATION] = profile_duration(prof)
            if status == 0:
                st[L.ST_MODE] = L.MODE_POSITION
                st[L.ST_T0] = now
                st[L.ST_TRACK_MAX] = 0.0
                st[L.ST_SETTLED] = np.nan
                st[L.ST_ENGAGED] = 1.0
                st[L.ST_ERROR] = ERR_NONE
            else:
                st[L.ST_ERROR] = ERR_INFEASIBLE if status == 1 else ERR_NUMERICAL
                st[L.ST_ERROR_COUNT] += 1.0
                if st[L.ST_ENGAGED] != 0.0:
                    _start_stop(st, c, vprof, p0, v0, a0, now)
        elif mode == L.MODE_VELOCITY and (st[L.ST_ERROR] != ERR_DRIVE_LOST):
            vt = min(max(c[L.C_VT], c[L.C_VMIN]), c[L.C_VMAX])
            plan_velocity_into(p0, v0, a0, vt, c[L.C_AMIN], c[L.C_AMAX], c[L.C_JMAX], vprof)
            out[L.O_PLAN_STATUS] = 0.0
            out[L.O_REPAIRED] = 1.0 if vt != c[L.C_VT] else 0.0
            out[L.O_DURATION] = vprof[VP_DURATION]
            st[L.ST_MODE] = L.MODE_VELOCITY
            st[L.ST_T0] = now
            st[L.ST_ENGAGED] = 1.0
            st[L.ST_ERROR] = ERR_NONE
        elif mode == L.MODE_STOP:
            if st[L.ST_ENGAGED] != 0.0 and st[L.ST_MODE] != L.MODE_STOP:
                _start_stop(st, c, vprof, p0, v0, a0, now)
        elif mode == L.MODE_DISENGAGE:
            st[L.ST_MODE] = L.MODE_DISENGAGE
            st[L.ST_ENGAGED] = 0.0

    # 3. Reference at the measured time, and one period ahead: a velocity command takes effect over the
    #    coming period (the drive reaches it by the end of the period), so its feed-forward is the velocity the
    #    reference will have then.
    t = now - st[L.ST_T0]
    t_next = t + cfg[L.K_PERIOD]
    mode = st[L.ST_MODE]
    if st[L.ST_ENGAGED] != 0.0 and mode == L.MODE_POSITION:
        sample_into(prof, t, ref)
        sample_into(prof, t_next, ref_next)
        st[L.ST_TRACK_MAX] = max(st[L.ST_TRACK_MAX], abs(ref[0] - p_m))
        if (
            np.isnan(st[L.ST_SETTLED])
            and t >= profile_duration(prof)
            and abs(p_m - c[L.C_PT]) <= cfg[L.K_ARRIVAL_TOLERANCE]
        ):
            st[L.ST_SETTLED] = t
    elif st[L.ST_ENGAGED] != 0.0 and (mode == L.MODE_VELOCITY or mode == L.MODE_STOP):
        sample_velocity_into(vprof, t, ref)
        sample_velocity_into(vprof, t_next, ref_next)
        # The reference is at rest at the end of the stop; the drive may lag it. Hold the final position
        # until the joint is at rest too (or the hold limit passes), then remove the force.
        if (
            mode == L.MODE_STOP
            and t >= vprof[VP_DURATION]
            and (abs(v_m) <= cfg[L.K_REST_VELOCITY] or t >= vprof[VP_DURATION] + cfg[L.K_STOP_HOLD_MAX])
        ):
            st[L.ST_STOP_TOOK] = t
            st[L.ST_ENGAGED] = 0.0
            st[L.ST_MODE] = L.MODE_DISENGAGE
    if st[L.ST_ENGAGED] == 0.0:
        ref[0] = p_m
        ref[1] = 0.0
        ref[2] = 0.0
        ref[3] = 0.0
        ref_next[1] = 0.0

    # 4. Control law and 5. drive command.
    flim = st[L.ST_FLIM]
    v_cmd = np.nan
    f_cmd = np.nan
    if st[L.ST_ENGAGED] != 0.0:
        e = ref[0] - p_m
        if cfg[L.K_LAW] == L.LAW_VELOCITY:
            v_cmd = ref_next[1] + cfg[L.K_VELOCITY_GAIN] * e
            f_cmd = flim  # A remote drive reads a finite force beside a finite velocity as the limit.
        else:
            f = cfg[L.K_INERTIA] * ref[2] + cfg[L.K_KP] * e + cfg[L.K_KD] * (ref[1] - v_m)
            f_cmd = min(max(f, -flim), flim)
    if remote_drive:
        _begin_write(remote)
        remote[L.R_CMD_ENABLE] = st[L.ST_ENGAGED]
        remote[L.R_CMD_V] = v_cmd
        remote[L.R_CMD_F] = f_cmd
        remote[L.R_CMD_T] = now
        _end_write(remote)
    elif st[L.ST_ENGAGED] == 0.0:
        command_force(sim_params, sim_state, 0, 0.0)  # Passive joint: the motor applies no force.
    elif cfg[L.K_LAW] == L.LAW_VELOCITY:
        command_motor_force(sim_params, sim_state, 0, flim)
        command_velocity(sim_params, sim_state, 0, v_cmd)
    else:
        command_motor_force(sim_params, sim_state, 0, flim)
        command_force(sim_params, sim_state, 0, f_cmd)
        f_m = f_cmd

    _begin_write(out)
    out[L.O_TIME] = now
    out[L.O_PREF] = ref[0]
    out[L.O_VREF] = ref[1]
    out[L.O_AREF] = ref[2]
    out[L.O_P] = p_m
    out[L.O_V] = v_m
    out[L.O_A] = a_m
    out[L.O_F] = f_m
    out[L.O_ERROR] = st[L.ST_ERROR]
    out[L.O_TICKS] = st[L.ST_TICKS]
    out[L.O_ENGAGED] = st[L.ST_ENGAGED]
    out[L.O_DEMAND] = abs(f_m) / flim if flim > 0.0 else 0.0
    out[L.O_ERROR_COUNT] = st[L.ST_ERROR_COUNT]
    out[L.O_CMD_SEQ] = st[L.ST_CMD_SEQ]
    out[L.O_MODE] = st[L.ST_MODE]
    out[L.O_PLAN_T0] = st[L.ST_T0]
    out[L.O_VCMD] = v_cmd
    out[L.O_FCMD] = f_cmd
    out[L.O_TRACK_MAX] = st[L.ST_TRACK_MAX]
    out[L.O_SETTLED] = st[L.ST_SETTLED]
    out[L.O_STOP_PLANNED] = st[L.ST_STOP_PLANNED]
    out[L.O_STOP_TOOK] = st[L.ST_STOP_TOOK]
    _end_write(out)


@njit(cache=True, nogil=True)
def run_simulated(ticks: int, start_s: float, arrays: LoopArrays) -> float:
    """Run ``ticks`` ticks on a simulated clock from ``start_s`` at the configured period; returns the end time."""
    period = arrays[1][L.K_PERIOD]
    now = start_s
    for _ in range(ticks):
        now += period
        tick(now, arrays)
    return now


@njit(cache=True, nogil=True)
def run_realtime(arrays: LoopArrays, timing: np.ndarray, timespec: np.ndarray) -> None:
    """Tick at the configured period against CLOCK_MONOTONIC until ``cmd[C_QUIT]`` is set.

    Deadlines are absolute (no drift); after an overrun the schedule restarts from now instead of bursting.
    Each tick's start lateness [second] goes into the ``timing`` ring for measurement.
    """
    cmd, cfg = arrays[0], arrays[1]
    period_ns = int(cfg[L.K_PERIOD] * 1e9)
    next_ns = monotonic_ns(timespec)
    stepped_now = next_ns * 1e-9
    stepped = cfg[L.K_STEPPED] != 0.0
    ring = L.TIMING_RING
    while cmd[L.C_QUIT] == 0.0:
        sleep_until_ns(next_ns, timespec)
        now_ns = monotonic_ns(timespec)
        n = int(timing[ring])
        timing[n % ring] = (now_ns - next_ns) * 1e-9
        timing[ring] = n + 1
        stepped_now += cfg[L.K_PERIOD]
        tick(stepped_now if stepped else now_ns * 1e-9, arrays)
        next_ns += period_ns
        if not stepped and now_ns - next_ns > period_ns:
            next_ns = now_ns + period_ns
