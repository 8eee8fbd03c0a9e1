"""``sim-plant arm-step``: the paper's Fig. 9 with a number: the arm's step response on our numba plant against an
independent high-accuracy integration of the same equations (scipy ``solve_ivp``, DOP853, rtol 1e-10).

The reference integrates A(q)·q̈ = Q − C − g with A, C, g from :mod:`sim_plant.arm` (tested against a symbolic
Euler–Lagrange derivation) and the same law: evaluated continuously, or sampled and held with ``--control-period``
(each hold interval integrated on its own). For the computed-torque law the closed form of the critically damped
error, e(t) = (e0 + (ė0 + 6·e0)·t)·e^(−6t) (K_P = 36, K_D = 12), is overlaid too. Needs scipy; ``--figure``
needs matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

import numpy as np
import numpy.typing as npt

from sim_plant import arm

FloatArray = npt.NDArray[np.float64]
RTOL = 1e-10
ATOL = 1e-12


def _vector(text: str) -> tuple[float, float, float]:
    """'a,b,c' → three floats (argparse type)."""
    parts = [float(x) for x in text.split(",")]
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"three comma-separated numbers expected, got {text!r}")
    return parts[0], parts[1], parts[2]


def _law_torque(p: arm.ArmParams, law: str, kp: float, kd: float, qd: FloatArray, q: FloatArray,
                w: FloatArray) -> FloatArray:
    """The law's torques at one state (e = q_d − q, ė = −q̇), written out again from A, C and g."""
    v = kp * (qd - q) - kd * w
    if law == "pd":
        return v
    if law == "pdg":
        return v + arm.gravity(p, q)
    return arm.mass_matrix(p, q) @ v + arm.velocity_terms(p, q, w) + arm.gravity(p, q)


def reference(p: arm.ArmParams, law: str, q0: FloatArray, w0: FloatArray, qd: FloatArray, t: FloatArray,
              control_period: float | None, kp: float, kd: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(q, q̇, torque) at the times t by solve_ivp: one call for the continuous law, one per hold interval else."""
    from scipy.integrate import solve_ivp  # Deferred: optional, and slow to import.

    def rhs(_t: float, s: FloatArray, tau: FloatArray | None) -> FloatArray:
        q, w = s[:3], s[3:]
        u = _law_torque(p, law, kp, kd, qd, q, w) if tau is None else tau
        acc = np.linalg.solve(arm.mass_matrix(p, q), u - arm.velocity_terms(p, q, w) - arm.gravity(p, q))
        return np.concatenate([w, acc])

    x0 = np.concatenate([q0, w0])
    if control_period is None:
        sol = solve_ivp(rhs, (0.0, t[-1]), x0, method="DOP853", t_eval=t, rtol=RTOL, atol=ATOL, args=(None,))
        xs = sol.y.T
        taus = np.array([_law_torque(p, law, kp, kd, qd, x[:3], x[3:]) for x in xs])
        return xs[:, :3], xs[:, 3:], taus
    n, hold = len(t) - 1, round(control_period / (t[1] - t[0]))
    xs = np.empty((n + 1, 6))
    taus = np.empty((n + 1, 3))
    xs[0] = x0
    tau = np.zeros(3)
    for start in range(0, n, hold):  # Sample at t[start], hold until t[stop].
        stop = min(start + hold, n)
        tau = _law_torque(p, law, kp, kd, qd, xs[start, :3], xs[start, 3:])
        sol = solve_ivp(rhs, (t[start], t[stop]), xs[start], method="DOP853", t_eval=t[start:stop + 1], rtol=RTOL,
                        atol=ATOL, args=(tau,))
        xs[start:stop + 1] = sol.y.T
        taus[start:stop] = tau
    taus[n] = _law_torque(p, law, kp, kd, qd, xs[n, :3], xs[n, 3:]) if n % hold == 0 else tau
    return xs[:, :3], xs[:, 3:], taus


def closed_form(q0: FloatArray, w0: FloatArray, qd: FloatArray, t: FloatArray) -> FloatArray:
    """q(t) = q_d − e(t) of the critically damped error under computed torque (K_P = 36, K_D = 12)."""
    e0, de0 = qd - q0, -w0
    return qd - (e0 + (de0 + 6.0 * e0) * t[:, None]) * np.exp(-6.0 * t)[:, None]


def _figure(path: str, t: FloatArray, ours: tuple[FloatArray, FloatArray], ref: tuple[FloatArray, FloatArray],
            closed: FloatArray | None, title: str) -> None:
    """Joint angles (top) and torques (bottom) of the numba plant over the reference (and the closed form)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), sharex=True, constrained_layout=True)
    names = ("q1 base", "q2 shoulder", "q3 elbow")
    for j in range(3):
        ax = axes[0, j]
        ax.plot(t, ours[0][:, j], lw=3.0, color="tab:blue", alpha=0.45, label="numba plant (RK4)")
        ax.plot(t, ref[0][:, j], lw=1.2, color="k", ls="--", label="solve_ivp rtol 1e-10")
        if closed is not None:
            ax.plot(t, closed[:, j], lw=1.0, color="tab:red", ls=":", label="closed form")
        ax.set_title(names[j])
        ax.set_ylabel("angle [rad]")
        ax.grid(alpha=0.3)
        ax = axes[1, j]
        ax.plot(t, ours[1][:, j], lw=3.0, color="tab:orange", alpha=0.45, label="numba plant")
        ax.plot(t, ref[1][:, j], lw=1.2, color="k", ls="--", label="solve_ivp")
        ax.set_ylabel("torque [N·m]")
        ax.set_xlabel("t [s]")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _write_csv(path: str, columns: dict[str, FloatArray]) -> None:
    """One row per sample, one column per named series."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(list(columns))
        for row in zip(*columns.values(), strict=True):
            out.writerow([f"{v:.12g}" for v in row])


def main(argv: list[str]) -> int:
    """``sim-plant arm-step [options]``; exit 0, or 2 on a bad option or a missing optional package."""
    ap = argparse.ArgumentParser(prog="sim-plant arm-step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--law", choices=sorted(arm.LAWS), default="ct", help="computed torque, PD + gravity, PD")
    ap.add_argument("--target", type=_vector, default=(1.0, 1.0, 1.0), help="q_d [rad], e.g. 1,1,1 (default)")
    ap.add_argument("--start", type=_vector, default=(0.0, 0.0, 0.0), help="q(0) [rad] (default 0,0,0)")
    ap.add_argument("--start-velocity", type=_vector, default=(0.0, 0.0, 0.0), help="q̇(0) [rad/s]")
    ap.add_argument("--duration", type=float, default=3.0, help="[s] (default 3)")
    ap.add_argument("--dt", type=float, default=1e-3, help="RK4 step of the plant [s] (default 0.001)")
    ap.add_argument("--control-period", type=float, help="sample and hold the law at this period [s], a multiple "
                    "of --dt (default: continuous)")
    ap.add_argument("--figure", help="write the figure (PNG) here")
    ap.add_argument("--csv", help="write the series here")
    args = ap.parse_args(argv)
    try:
        import scipy  # noqa: F401  (only to fail early and clearly)
    except ImportError:
        print("sim-plant arm-step: needs scipy for its reference integration: pip install scipy", file=sys.stderr)
        return 2
    if args.figure:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("sim-plant arm-step: --figure needs matplotlib: pip install 'cyphal-servo[plot]'", file=sys.stderr)
            return 2
    p = arm.ArmParams()
    q0, w0, qd = (np.array(v, dtype=np.float64) for v in (args.start, args.start_velocity, args.target))
    try:
        t, q, w, tau = arm.simulate(p, args.law, q0, w0, qd, args.duration, args.dt, args.control_period)
    except ValueError as ex:
        ap.error(str(ex))
    rq, rw, rtau = reference(p, args.law, q0, w0, qd, t, args.control_period, 36.0, 12.0)
    dq, dw, dtau = (float(np.abs(a - b).max()) for a, b in ((q, rq), (w, rw), (tau, rtau)))
    mode = "continuous" if args.control_period is None else f"sampled every {args.control_period * 1e3:g} ms"
    print(f"law {args.law} ({mode}), RK4 dt {args.dt * 1e3:g} ms, {args.duration:g} s, target {args.target}")
    print(f"largest difference to solve_ivp (DOP853, rtol {RTOL:g}): angle {dq:.3e} rad, "
          f"velocity {dw:.3e} rad/s, torque {dtau:.3e} N·m")
    closed = closed_form(q0, w0, qd, t) if args.law == "ct" else None
    columns: dict[str, Any] = {"t": t}
    for j in range(3):
        columns[f"q{j + 1}"] = q[:, j]
        columns[f"qdot{j + 1}"] = w[:, j]
        columns[f"torque{j + 1}"] = tau[:, j]
        columns[f"ref_q{j + 1}"] = rq[:, j]
        columns[f"ref_torque{j + 1}"] = rtau[:, j]
    if closed is not None:
        print("largest difference to the closed form q_d − (e0 + (ė0 + 6·e0)·t)·e^(−6t): "
              f"numba {np.abs(q - closed).max():.3e} rad, solve_ivp {np.abs(rq - closed).max():.3e} rad")
        for j in range(3):
            columns[f"closed_q{j + 1}"] = closed[:, j]
    if args.csv:
        _write_csv(args.csv, columns)
    if args.figure:
        title = (f"Arm step, law {args.law} ({mode}), K_P = 36, K_D = 12: numba RK4 vs solve_ivp, largest "
                 f"difference {dq:.1e} rad, {dtau:.1e} N·m")
        _figure(args.figure, t, (q, tau), (rq, rtau), closed, title)
    return 0
