"""The scope records a known move of a running ``servo-node`` (real process, real yakut publisher, real
``servo-node scope`` processes): the CSV agrees with the plan the node reports in ``sys.motion`` (start, duration,
end position), its reference and limits; the figure has its four panels; without matplotlib the CSV alone is
written, with a message saying why. One scope records until Ctrl-C, the other for its ``--window``; both write and
exit 0. The CSV round-trips through :func:`read_csv`.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from pathlib import Path

import numpy as np

from servo_node.otg import plan
from servo_node.scope import Trace, read_csv, write_csv
from tests.procs import BIN, Processes, RegisterClient, base_env, popen, stop, wait_for

NODE_ID, SETPOINT, DYNAMICS = 93, 7731, 7741
SCOPE_IDS = (94, 95)
DYNAMICS_RATE_HZ = 200.0
TARGET = 1.5
V_MAX, A_MAX, JERK = 2.0, 5.0, 40.0

NO_MATPLOTLIB = ("import sys; sys.modules['matplotlib'] = None; "  # An import of it then raises ImportError.
                 "from servo_node.cli import main; raise SystemExit(main(sys.argv[1:]))")


WINDOW_S = 4.0
"""The recording window of the scope without matplotlib; the other records until Ctrl-C (SIGINT)."""


def _scope(node_id: int, out: Path, plot: Path, python: list[str], *opts: str) -> tuple[list[str], dict[str, str]]:
    args = [*python, "scope", "--subject", f"{DYNAMICS}:joint", "-o", str(out), "--plot", str(plot),
            "--poll-rate", "20", *opts]
    return args, base_env(UAVCAN__NODE__ID=str(node_id))


def _panel_frames(png: Path) -> int:
    """Horizontal frame lines in the image: rows mostly dark across the plot width (two per panel)."""
    import matplotlib.image

    img = matplotlib.image.imread(str(png))[:, :, :3].mean(axis=2)
    dark = (img < 0.35).mean(axis=1) > 0.5
    return int(np.count_nonzero(dark[1:] & ~dark[:-1]) + dark[0])


def test_scope_records_a_known_move(tmp_path: Path) -> None:
    # On the stepped loop clock the joint's motion and its dynamics stamps are the loop's own time, and the node
    # publishes every sample however late its event loop: what the CSV must hold does not depend on the host's load.
    env = base_env(UAVCAN__NODE__ID=str(NODE_ID), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT),
                   UAVCAN__PUB__DYNAMICS__ID=str(DYNAMICS), SERVO__DYNAMICS_RATE=str(DYNAMICS_RATE_HZ),
                   SERVO__LOOP_CLOCK="stepped")
    csv_a, png_a = tmp_path / "a.csv", tmp_path / "a.png"
    csv_b, png_b = tmp_path / "b.csv", tmp_path / "b.png"
    with Processes() as group:
        group.servo_nodes((env, tmp_path / "servo.db", NODE_ID))
        reader = RegisterClient(env, NODE_ID, client_node_id=96)
        try:
            with popen(*_scope(SCOPE_IDS[0], csv_a, png_a, [str(BIN / "servo-node")])) as scope_a, \
                    popen(*_scope(SCOPE_IDS[1], csv_b, png_b, [sys.executable, "-c", NO_MATPLOTLIB],
                                  "--window", str(WINDOW_S))) as scope_b:
                for s in (scope_a, scope_b):
                    assert s.stdout is not None
                    assert "recording" in s.stdout.readline()
                cmd = (f"{{target: {TARGET}, profile_velocity_reverse_forward: [-{V_MAX}, {V_MAX}], "
                       f"profile_deceleration_acceleration: [-{A_MAX}, {A_MAX}], profile_jerk: {JERK}}}")
                # Published until the node reports the move settled: its plan (t0, T) is then the move's (after a
                # deadman expiry it would be the stop's).
                with popen([str(BIN / "y"), "pub", "-T", "0.05", f"{SETPOINT}:zubax.telega.ServoCommand", cmd],
                           base_env(UAVCAN__NODE__ID="97")):
                    motion = wait_for(lambda: isinstance((m := reader.json("sys.motion"))["settled"], float) and m,
                                      timeout=30, what="the move to settle")
                time.sleep(0.5)  # Past t0 + T + 0.2 s, the end of the samples judged below.
                scope_a.send_signal(signal.SIGINT)  # Ctrl-C ends a recording without --window: then it writes.
                assert scope_a.wait(30) == 0 and scope_b.wait(30) == 0  # scope_b's window has passed by itself.
                out_a, out_b = stop(scope_a), stop(scope_b)
        finally:
            reader.close()
    print(out_a, out_b, sep="\n")
    t0, T = motion["plan"]["t0"], motion["plan"]["T"]
    assert T > 0.5 and abs(motion["meas"][0] - TARGET) < 1e-3

    trace = read_csv(csv_a)
    joint = trace.axes["joint"]
    assert joint.unit == "" or joint.unit == "rad"
    t = np.asarray(joint.measured.t)
    p = np.asarray(joint.measured.columns["position"])
    v = np.asarray(joint.measured.columns["velocity"])
    # The motion in the CSV is the node's plan (the same OTG, from rest at the start), started at the node's t0:
    # the recorded positions follow it, and arrive when it ends.
    traj = plan(float(p[0]), 0.0, 0.0, TARGET, 0.0, -V_MAX, V_MAX, -A_MAX, A_MAX, JERK)
    assert abs(traj.duration - T) < 1e-5
    during = (t >= t0) & (t <= t0 + T + 0.2)
    follow = max(abs(pi - traj.at(ti - t0)[0]) for ti, pi in zip(t[during], p[during], strict=True))
    before = np.abs(p[t < t0 - 0.01] - p[0]).max()
    at_end = p[np.argmax(t >= t0 + T)]
    print(f"plan t0 {t0:.4f} T {T:.4f}; CSV: {np.count_nonzero(during)} samples during the plan, largest distance "
          f"from it {follow:.2e}, moved {before:.1e} before t0, at t0 + T {at_end:.6f}, "
          f"final {p[-1]:.6f}, peak v {v.max():.4f}")
    assert np.count_nonzero(during) > 0.5 * DYNAMICS_RATE_HZ * T
    # Tracking of the velocity law is ~1e-3 here (the stepped clock: a stalled host delays it, never degrades it).
    assert follow < 2e-2 and before < 1e-6
    assert abs(at_end - TARGET) < 2e-2
    assert abs(p[-1] - TARGET) < 1e-3
    assert v.max() <= V_MAX * 1.02
    # The reference (sys.motion, polled) ends at the target; the setpoint's limits were recorded from sys.status.
    ref = joint.reference
    assert len(ref) > 20 and abs(ref.columns["position"][-1] - TARGET) < 1e-6
    lim = joint.limits
    assert lim.columns["v_max"][0] == 10.0  # servo.profile.velocity (the default) at first sight
    assert V_MAX in lim.columns["v_max"] and -A_MAX in lim.columns["a_min"]  # the setpoint's, while it moved

    assert "4 panels (position, velocity, acceleration, force)" in out_a
    assert png_a.stat().st_size > 20_000
    assert _panel_frames(png_a) >= 8

    # Without matplotlib: the CSV, a clear message, no figure, exit 0.
    assert "matplotlib is not installed" in out_b and "CSV only" in out_b
    assert not png_b.exists()
    assert len(read_csv(csv_b).axes["joint"].measured) > 0.5 * DYNAMICS_RATE_HZ * WINDOW_S


def test_csv_round_trip(tmp_path: Path) -> None:
    trace = Trace()
    a = trace.axis("x")
    a.measured.add(10.0, 1.0, 2.0, 3.0, 4.0)
    a.measured.add(10.01, 1.5, 2.5, math.nan, -4.0)
    a.measured.add(10.005, 9.0, 9.0, 9.0, 9.0)  # Older than the last: dropped.
    a.reference.add(10.002, 1.1, 2.1, 3.1)
    a.limits.add(9.0, -1.0, 1.0, -2.0, 2.0, 5.0)
    trace.axis("y").measured.add(10.003, 0.0, 0.0, 0.0, 0.0)
    path = tmp_path / "t.csv"
    assert write_csv(trace, path) == 5
    back = read_csv(path)
    assert list(back.axes) == ["x", "y"] or set(back.axes) == {"x", "y"}
    x = back.axes["x"]
    assert x.measured.t == [10.0, 10.01]
    assert x.measured.columns["position"] == [1.0, 1.5]
    assert math.isnan(x.measured.columns["acceleration"][1])
    assert x.reference.columns["velocity"] == [2.1]
    assert x.limits.columns["f_max"] == [5.0]


def test_a_scope_held_up_still_records_its_whole_window(tmp_path: Path) -> None:
    """A recorder whose process is held up (a busy host) records the whole window of the nodes' time all the same:
    the window is judged on the samples' own stamps, and the samples queued meanwhile are read after it. Here the
    scope is stopped (SIGSTOP) from 0.2 s into a 1 s window until past its end: judged on this host's clock, the
    window had passed when it ran again and it kept the 0.2 s it had read."""
    window_s, rate_hz = 1.0, 50.0  # A node at rest ticks at 100 Hz (servo_node.control._kernel.idle).
    env = base_env(UAVCAN__NODE__ID=str(NODE_ID), UAVCAN__PUB__DYNAMICS__ID=str(DYNAMICS),
                   SERVO__DYNAMICS_RATE=str(rate_hz))
    csv, png = tmp_path / "w.csv", tmp_path / "w.png"
    with Processes() as group:
        group.servo_nodes((env, tmp_path / "servo.db", NODE_ID))
        with popen(*_scope(SCOPE_IDS[0], csv, png, [sys.executable, "-c", NO_MATPLOTLIB], "--poll-rate", "0",
                           "--window", str(window_s))) as scope:
            assert scope.stdout is not None
            assert "recording" in scope.stdout.readline()
            time.sleep(0.2)
            scope.send_signal(signal.SIGSTOP)
            time.sleep(window_s + 0.3)
            scope.send_signal(signal.SIGCONT)
            assert scope.wait(30) == 0, stop(scope)
    t = np.asarray(read_csv(csv).axes["joint"].measured.t)
    span = float(t[-1] - t[0]) if len(t) else 0.0
    print(f"{len(t)} samples over {span:.3f} s of the node's time, longest gap {np.diff(t).max(initial=0.0):.3f} s")
    assert len(t) >= 0.9 * rate_hz * window_s and span >= 0.95 * window_s
