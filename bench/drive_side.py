"""Position setpoints to the drive against velocity commands: which tracks better through the bus delay?

On the simulated clock with :mod:`tests.control.bus_model` (sim-plant's joint and setpoint rules behind a bus of
chosen delays and jitter), the 0 → 3 move at the default profile, the true tracking error |p_ref(t) − p(t)|:

- ``velocity``: the servo's law through the link model (``servo.drive.compensation = predict``);
- ``position/webots``: the servo streams UDRAL position setpoints — the reference where the drive will be when
  each arrives, p_ref(t_e), with |v_ref| + 10 % as the velocity limit — to sim-plant as it is: the Webots
  P controller, Vc = P·(Pt − q) clipped to the limit (``sim.control_p`` = 10), lags a moving target by v / P;
- ``position/local``: the same stream to a drive with a proper local loop (velocity feed-forward from consecutive
  setpoints over the nominal period, position gain 100 1/s at the 1 kHz step rate): a CSP-like drive.

Usage: ``python bench/drive_side.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from servo_node._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    import numpy as np

    from servo_node.axis._config import loop_config
    from servo_node.control import _layout as L
    from servo_node.otg import sample_into
    from servo_node.registers import ServoRegistry
    from servo_node.setpoint import ProfileLimits, Setpoint
    from tests.control.bus_model import Bus, make_bus

    limits = ProfileLimits(-10.0, 10.0, -50.0, 50.0, 500.0)
    print("0 → 3 move (plan 0.600 s): largest true tracking error / last time it exceeded 1e-3 [s after the start]")
    print(f"{'one-way':>8s} {'jitter':>7s} | {'velocity':>16s} | {'position/webots':>16s} | {'position/local':>16s}")
    for one_way, jitter in ((0.0005, 0.0), (0.005, 0.0), (0.010, 0.0), (0.020, 0.0), (0.010, 0.004)):
        cells = []
        for variant in ("velocity", "webots", "local"):
            reg = ServoRegistry(None, {"SERVO__DRIVE__BACKEND": "udral", "SERVO__DEADMAN_TIMEOUT": "10"})
            b: Bus = make_bus(loop_config(reg), command_delay=one_way, measure_delay=one_way, jitter=jitter)
            scratch = np.zeros(4)

            def position(
                t: float, b: Bus = b, scratch: np.ndarray = scratch, ahead: float = one_way + 0.5 * jitter
            ) -> tuple[float, float]:
                arrays = b.loop.arrays
                t_e = t + ahead  # The drive's (mean) arrival time of this setpoint: the delay is known here.
                sample_into(arrays.prof, max(t_e - arrays.st[L.ST_T0], 0.0), scratch)
                return float(scratch[0]), 1.1 * abs(float(scratch[1])) + 0.1

            if variant != "velocity":
                b.position_source = position
                b.local_loop_gain = 100.0 if variant == "local" else 0.0
            b.run(0.3)
            b.loop.command(Setpoint(3.0, 0.0, limits, 100.0), b.loop.now())
            b.run(2.0)
            err = np.asarray(b.true_errors)
            t = np.arange(err.size) * 1e-3
            late = t[err > 1e-3]
            settle = float(late[-1]) if late.size else 0.0  # The last instant the error exceeded 1e-3.
            cells.append(f"{err.max():9.2e} / {settle:5.3f}")
        print(f"{one_way * 1e3:6.1f}ms {jitter * 1e3:5.1f}ms | " + " | ".join(f"{c:>16s}" for c in cells))


if __name__ == "__main__":
    main()
