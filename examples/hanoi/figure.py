"""The run's figure: every joint's measured trajectory (the scope's panels) and the grip point's path by FK from
the measured joints, seen from above and from the side. Needs matplotlib (the ``plot`` extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servo_node.scope import Trace, draw
from servo_node.scope._plot import pyplot

from .cell import Cell
from .joints import NAMES
from .kinematics import forward


def grip_path(trace: Trace, cell: Cell, step_s: float = 0.01) -> np.ndarray:
    """(t, x, y, z) rows of the grip point: FK of the measured arm joints interpolated onto a common grid."""
    series = [trace.axes[n].measured for n in NAMES[:4]]
    t_from = max(s.t[0] for s in series)
    t_to = min(s.t[-1] for s in series)
    t = np.arange(t_from, t_to, step_s)
    q = [np.interp(t, s.t, s.columns["position"]) for s in series]
    xyz = np.array([forward(cell.arm, (a, b, c, d)) for a, b, c, d in zip(*q, strict=True)])
    return np.column_stack((t, xyz)) if len(t) else np.zeros((0, 4))


def render(trace: Trace, cell: Cell, boxes: int, path: str | Path, title: str) -> None:
    """Write the figure (PNG or SVG)."""
    plt = pyplot()
    fig = plt.figure(figsize=(14, 9), constrained_layout=True)
    grid = fig.add_gridspec(4, 2, width_ratios=(1.5, 1.0))
    panels = [fig.add_subplot(grid[0, 0])]
    panels += [fig.add_subplot(grid[k, 0], sharex=panels[0]) for k in range(1, 4)]
    t0 = trace.t_start()
    draw(trace, panels, t0)
    panels[0].set_ylabel("position [rad | m]")
    panels[1].set_ylabel("velocity [rad/s | m/s]")
    panels[2].set_ylabel("acceleration [rad/s² | m/s²]")
    panels[3].set_ylabel("torque | force [N·m | N]")
    panels[3].set_xlabel("time [s]")
    panels[0].set_title("joints, measured (dynamics); dashed: each node's profile limits", fontsize=9)

    path_xyz = grip_path(trace, cell)
    top, side = fig.add_subplot(grid[0:2, 1]), fig.add_subplot(grid[2:4, 1])
    x, y, z = path_xyz[:, 1], path_xyz[:, 2], path_xyz[:, 3]
    top.plot(x, y, color="tab:blue", linewidth=1.0)
    side.plot(np.hypot(x, y), z, color="tab:blue", linewidth=1.0)
    half = 0.5 * cell.width(boxes - 1)
    for peg, name in enumerate("ABC"):
        px, py = cell.platform_xy(peg)
        r = cell.platforms[peg][0]
        top.add_patch(plt.Circle((px, py), half + 0.01, fill=False, color="tab:gray"))
        top.annotate(name, (px, py), xytext=(px * 1.18, py * 1.18), ha="center", va="center")
        side.plot([r - half - 0.01, r + half + 0.01], [0.0, 0.0], color="tab:gray", linewidth=3)
        side.annotate(name, (r, -0.012), ha="center", va="top")
    top.plot([0], [0], marker="+", color="black")
    top.set_aspect("equal")
    top.set_xlabel("x [m]")
    top.set_ylabel("y [m]")
    top.set_title("grip point from above (FK of the measured joints)", fontsize=9)
    side.axhline(boxes * cell.box_height, color="tab:red", linestyle="--", linewidth=0.8,
                 label="top of a full stack")
    side.set_xlabel("distance from the base axis r [m]")
    side.set_ylabel("height z [m]")
    side.set_title("grip point from the side (unrolled about the base axis)", fontsize=9)
    side.set_ylim(-0.03, max(0.1, float(np.max(z)) * 1.15) if len(z) else 0.3)
    side.legend(loc="upper right", fontsize=7)
    for ax in (top, side):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=100)
    plt.close(fig)

