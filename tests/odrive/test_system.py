"""The ``odrive`` backend end to end: ``servo-node`` and the emulated ODrive (``sim-plant --odrive``) as separate
processes on a ``udpmc:`` CAN bus, the drive's frames read back by ODrive's published DBC (``cantools``).

The verdicts are the node's own figures (``sys.motion``: ``track_max``, ``settled``), its ``sys.status`` and
``sys.drive``, and the drive's heartbeat as the DBC decodes it; wall-clock waits are generous and never asserted.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.odrive.rig import DRIVE_ID, NODE, TARGET, Listener, endpoints_file, rig
from tests.procs import ARRIVAL_LATE_S, settled_on_time, wait_for, y


@pytest.mark.parametrize("mode", ["velocity", "torque", "position"])
def test_move_tracks_then_the_deadman_stop_rests_before_idle(mode: str, tmp_path: Path) -> None:
    """0 → 3 tracks and settles on time; when setpoints stop, the stop ends at rest and only then is the axis put
    to IDLE (never seen out of closed loop while moving)."""
    with rig(tmp_path, mode) as r:
        r.up()
        m, seen = r.move_then_idle(f"arrival in {mode}")
        age_p50, age_max, delay_p50, delay_max = m["link"]
        print(f"odrive {mode}: plan {m['plan']['T']} s, settled after {m['settled']} s, track_max "
              f"{m['track_max']:.2e}, over {m['over']:.1e}; measurement age p50 {age_p50} ms max {age_max} ms, "
              f"command delay p50 {delay_p50} ms max {delay_max} ms")
        assert m["plan"]["T"] == pytest.approx(0.6, abs=1e-3)
        # Arrival; the tracking (torque on estimates at 100 Hz, the ODrive's default rate: quiet 1.7e-2; velocity
        # and position, with the drive's loops between them: quiet 2e-3 and 6e-3) is bench/remote.py's figure.
        assert settled_on_time(m, ARRIVAL_LATE_S), m
        assert all(abs(v) <= 1e-3 for state, v in seen if state != "CLOSED_LOOP_CONTROL"), seen
        assert r.servo()["state"] in ("expired", "standby") and abs(r.motion()["meas"][1]) <= 1e-3
        assert r.drive()["error"] == "0x00000000"


def test_killed_servo_leaves_the_drive_to_its_watchdog(tmp_path: Path) -> None:
    """The servo configures the watchdog through the endpoints (written and read back, the version checked); SIGKILL
    of the servo mid-move: the drive disarms by its watchdog (IDLE, WATCHDOG_TIMER_EXPIRED as the DBC reads it)."""
    with rig(tmp_path, servo={"SERVO__DRIVE__ODRIVE__ENDPOINTS": endpoints_file(),
                              "SERVO__DRIVE__ODRIVE__WATCHDOG": "0.2"}) as r:
        r.up()
        assert r.drive()["watchdog"] == "0.2 s" and r.drive()["fw"] == "0.6.10"
        listener = Listener(r.iface)
        try:
            with r.publishing(100.0):
                wait_for(lambda: abs(r.motion()["meas"][1]) > 5.0, timeout=30, what="moving fast")
                r.servo_proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                r.servo_proc.wait(10)
            wait_for(lambda: listener.state() == "IDLE", timeout=10, what="the drive idle by its watchdog")
            idle_at = next(t for t, name, d in listener.frames
                           if t > killed_at and name == "Heartbeat" and d["Axis_State"] == "IDLE")
            print(f"killed servo: IDLE heartbeat {idle_at - killed_at:.3f} s after SIGKILL; {listener.heartbeat}")
            assert "WATCHDOG_TIMER_EXPIRED" in listener.error()
            assert str(listener.heartbeat["Procedure_Result"]) == "DISARMED"  # type: ignore[index]
        finally:
            listener.close()


def test_drive_fault_is_an_error_with_its_name_until_rearmed_by_clear_errors(tmp_path: Path) -> None:
    """CURRENT_LIMIT_VIOLATION injected mid-move: error 11 naming it, the drive disarmed, nothing moves while
    setpoints keep coming; the re-arm (a write of ``servo.drive.rearm``) sends Clear_Errors and the servo stands by
    with the drive's error clear; killing the emulator then is error 3 (drive lost)."""
    with rig(tmp_path, plant={"SIM_PLANT_ODRIVE_FAULT_AFTER": "0.3", "SIM__DAMPING_CONSTANT": "20"}) as r:
        r.up()
        with r.publishing(TARGET):
            s = wait_for(lambda: (s := r.servo())["error"] == 11 and s["state"] == "error" and s, timeout=30,
                         what="the drive fault")
            assert "CURRENT_LIMIT_VIOLATION" in s["reason"] and "0x00001000" in s["reason"], s
            wait_for(lambda: not r.motion()["engaged"], timeout=30, what="the stop")
            assert r.drive()["state"] == "IDLE" and r.drive()["errors"] == "CURRENT_LIMIT_VIOLATION"
            time.sleep(0.5)
            assert r.servo()["state"] == "error" and r.drive()["state"] == "IDLE"  # Still no motion without a re-arm.
        y("r", str(NODE), "servo.drive.rearm", "1", env=r.env)
        wait_for(lambda: r.drive()["error"] == "0x00000000", timeout=30, what="Clear_Errors")
        wait_for(lambda: r.servo()["state"] == "standby", timeout=10, what="the error cleared")
        r.plant_proc.send_signal(signal.SIGKILL)
        s = wait_for(lambda: (s := r.servo())["error"] == 3 and s, timeout=30, what="drive lost")
        assert "heartbeat" in s["reason"] or "feedback" in s["reason"], s


def test_absent_drive_is_a_clear_error(tmp_path: Path) -> None:
    """The servo names a node-ID nobody answers for: error 11 naming it, no hang."""
    with rig(tmp_path, node_id=DRIVE_ID + 1) as r:
        s = wait_for(lambda: (s := r.servo())["error"] == 11 and s, timeout=120, what="the bring-up error")
        assert f"no heartbeat from ODrive node-ID {DRIVE_ID + 1}" in s["reason"], s
        assert r.drive()["state"] == "UNKNOWN"
