"""Figure of a planned trajectory: p, v, a, j over time with the limits dashed (matplotlib is optional)."""

from __future__ import annotations

import argparse

import numpy as np

from ._trajectory import plan, sample_batch


def render_figure(
    path: str, p0: float, v0: float, a0: float, pt: float, vt: float,
    v_min: float, v_max: float, a_min: float, a_max: float, j_max: float,
) -> None:
    """Render four stacked axes (p, v, a, j vs t) to PNG/SVG; acceleration limits follow the sign of v."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traj = plan(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max)
    if traj.status != 0:
        raise ValueError(f"no trajectory: status {traj.status.name}")
    t_end = max(traj.duration * 1.08, 1e-9)
    t = np.linspace(0.0, t_end, 4000)
    cuts = traj.profile[8 : 8 + 5 * traj.phase_count : 5]
    t = np.unique(np.concatenate((t, cuts, [traj.duration])))
    p, v, a, j = (np.asarray(x)[0] for x in sample_batch(traj.profile[None, :], t[None, :]))
    a_hi = np.where(v >= 0.0, a_max, -a_min)
    a_lo = np.where(v >= 0.0, a_min, -a_max)
    fig, axes = plt.subplots(4, 1, sharex=True, figsize=(8, 8.5), constrained_layout=True)
    dash = {"color": "tab:red", "linestyle": "--", "linewidth": 1.0}
    axes[0].plot(t, p, color="tab:blue")
    axes[0].axhline(pt, color="tab:gray", linestyle=":", linewidth=1.0)
    axes[0].set_ylabel("position p")
    axes[1].plot(t, v, color="tab:blue")
    axes[1].axhline(v_max, **dash)
    axes[1].axhline(v_min, **dash)
    axes[1].axhline(0.0, color="black", linewidth=0.5)
    axes[1].set_ylabel("velocity v")
    axes[2].plot(t, a, color="tab:blue")
    axes[2].plot(t, a_hi, **dash, label="direction-relative limits")
    axes[2].plot(t, a_lo, **dash)
    axes[2].axhline(0.0, color="black", linewidth=0.5)
    axes[2].legend(loc="upper right", fontsize=8)
    axes[2].set_ylabel("acceleration a")
    axes[3].step(t, j, where="post", color="tab:blue")
    axes[3].axhline(j_max, **dash)
    axes[3].axhline(-j_max, **dash)
    axes[3].set_ylabel("jerk j")
    axes[3].set_xlabel("time t [s]")
    for ax in axes:
        ax.axvline(traj.duration, color="tab:gray", linestyle=":", linewidth=1.0)
        ax.grid(alpha=0.3)
    axes[0].set_title(
        f"({p0:g}, {v0:g}, {a0:g}) → ({pt:g}, {vt:g}, 0) in {traj.duration:.4g} s; "
        f"v ∈ [{v_min:g}, {v_max:g}], a ∈ [{a_min:g}, {a_max:g}] (v ≥ 0), |j| ≤ {j_max:g}",
        fontsize=9,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """`servo-node plot-otg` entry: plan with the given start, target and limits and write the figure."""
    ap = argparse.ArgumentParser(prog="servo-node plot-otg", description=__doc__)
    for name, default in (("p0", 0.0), ("v0", 1.4), ("a0", 0.0), ("pt", -1.5), ("vt", 0.0), ("v-min", -1.0),
                          ("v-max", 1.5), ("a-min", -3.0), ("a-max", 1.0), ("j-max", 10.0)):
        ap.add_argument(f"--{name}", type=float, default=default)
    ap.add_argument("-o", "--output", default="docs/otg.png", help="PNG or SVG path")
    ns = ap.parse_args(argv)
    render_figure(ns.output, ns.p0, ns.v0, ns.a0, ns.pt, ns.vt, ns.v_min, ns.v_max, ns.a_min, ns.a_max, ns.j_max)
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
