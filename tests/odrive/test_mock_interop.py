"""Our ``odrive`` backend driving an ODrive emulated by someone else: the ``odrive-can`` package's
``ODriveCANMock`` (decodes our frames with ODrive's DBC; velocity and position as a rate-limited linear model) in a
process of its own on the same udpmc bus (:mod:`tests.odrive.mock_odrive`).

What the mock cannot show: it has no watchdog (nothing in it disarms a silent master's axis), no errors and no
Clear_Errors, and it takes 0.5 s to change its axis state. So the servo is engaged by a small move first (0.05,
within the following-error window), and the watchdog is shown against our emulator only (tests/odrive/test_system.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.odrive.rig import TARGET, Listener, rig
from tests.procs import wait_for


def test_backend_moves_odrive_cans_mock_and_the_deadman_stop_rests_before_idle(tmp_path: Path) -> None:
    """0 → 3 in velocity control tracks and settles; the deadman stop ends at rest (the mock's own velocity 0) and
    only then is the axis put to IDLE."""
    mock = [sys.executable, "-m", "tests.odrive.mock_odrive", "3"]
    with rig(tmp_path, plant_cmd=mock, servo={"SERVO__DRIVE__ODRIVE__TIMEOUT": "5", "SERVO__DRIVE__RATE": "50"}) as r:
        r.up("the servo up with odrive-can's mock")
        assert r.drive()["watchdog"] == "user's"
        listener = Listener(r.iface)
        try:
            with r.publishing(0.05):  # A small move engages the servo (within the following-error window).
                wait_for(lambda: listener.state() == "CLOSED_LOOP_CONTROL", timeout=30, what="the mock in closed loop")
            with r.publishing(TARGET):
                m = wait_for(lambda: r.settled(), timeout=60, what="arrival at 3 on the mock")
            seen: list[tuple[str, float]] = []

            def idle() -> bool:
                state, v = listener.state(), float(listener.estimates["Vel_Estimate"])  # type: ignore[index]
                seen.append((state, v))
                return state == "IDLE"

            wait_for(idle, timeout=30, interval=0.02, what="IDLE after the deadman stop")
        finally:
            listener.close()
        print(f"odrive-can mock: settled after {m['settled']} s (plan {m['plan']['T']} s), track_max "
              f"{m['track_max']:.2e}, over {m['over']:.1e}; link {m['link']}")
        # The mock integrates its position at its encoder period (10 ms, Euler) and ramps its velocity at 10 turn/s²:
        # the servo's figures against it are coarser than against our emulator (quiet: see the print).
        assert m["track_max"] <= 0.1
        assert float(m["settled"]) <= float(m["plan"]["T"]) + 0.5, m
        assert all(v == 0.0 for state, v in seen if state != "CLOSED_LOOP_CONTROL"), seen
        assert abs(r.motion()["meas"][0] - TARGET) < 0.01 and r.servo()["error"] == 0
