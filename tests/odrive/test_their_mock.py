"""Our ``odrive`` backend driving an ODrive emulated by someone else's code: the ``odrive-can`` package's mock
device (:mod:`tests.odrive.odrive_can_mock`), its own DBC decoding our frames, on a ``udpmc:`` bus.

The mock is rough (its own words): estimates at 10 Hz, heartbeat at 5 Hz, Get_Version answered with zeros, no
watchdog, and a state change that takes 0.5 s during which it handles no other frame. The servo must cope as with a
real drive: wait for the closed loop it asked for before its plan runs, track through a slow feedback with the gain
meant for it (``servo.drive.compensation = off``), and stop at rest before it puts the axis to IDLE. The watchdog's
part (a killed servo leaves the drive IDLE) is shown against our emulator only (``test_system.py``): the mock has
none, and the servo says so (``sys.drive`` watchdog "user's")."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.odrive.rig import DRIVE_ID, TARGET, rig

MOCK = [sys.executable, "-m", "tests.odrive.odrive_can_mock", str(DRIVE_ID)]
GENTLE = {
    "SERVO__DRIVE__COMPENSATION": "off",  # The link model needs more than 10 estimates a second.
    "SERVO__PROFILE__VELOCITY": "-2 2",
    "SERVO__PROFILE__ACCELERATION": "-5 5",
    "SERVO__PROFILE__JERK": "50",
}


def test_their_mock_moves_0_to_3_after_the_wait_for_closed_loop_and_stops_at_rest_before_idle(tmp_path: Path) -> None:
    with rig(tmp_path, servo=GENTLE, plant_cmd=MOCK) as r:
        r.up()
        d = r.drive()
        assert d["fw"] == "0.0.0" and d["watchdog"] == "user's", d  # Its Get_Version: zeros; no watchdog set.
        m, seen = r.move_then_idle("arrival")
        print(f"odrive-can mock: plan {m['plan']['T']} s, waited {m.get('wait')} s for closed loop, settled after "
              f"{m['settled']} s, track_max {m['track_max']:.2e}")
        assert m.get("wait", 0.0) > 0.2, m  # Its 0.5 s in Set_Axis_State (less what the heartbeat hid), waited for.
        assert abs(m["meas"][0] - TARGET) < 0.01 and r.servo()["error"] == 0
        assert all(abs(v) <= 1e-3 for state, v in seen if state != "CLOSED_LOOP_CONTROL"), seen
        assert r.servo()["state"] in ("expired", "standby") and abs(r.motion()["meas"][1]) <= 1e-3
