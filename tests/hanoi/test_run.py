"""The Tower of Hanoi example end to end: five ``servo-node`` processes, the program, real Cyphal/UDP.

The program's own verdicts are the point (FK of the *measured* joints after every segment, the stacks checked
at every place, all boxes on C at the end, exit code 0); the test reads them from its output and checks the
figure. A too-tight FK tolerance must stop the arm (every joint at rest) with exit code 1, and a task out of
reach must be refused before any node starts. Uncommon node-IDs (81..95) and subject-IDs (7400..7414).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import base_env

HANOI = [sys.executable, "-m", "examples.hanoi", "--node-id", "81", "--subject", "7400"]
ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    env = base_env()
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([*HANOI, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_two_boxes_end_on_c_every_move_verified(tmp_path: Path) -> None:
    """Two boxes: all three kinds of move (to the goal, to the spare, from the spare), each placement FK-verified.

    The 3-box run (7 moves, ~60 s of motion) repeats the same segments; its move sequence and every pose of its plan
    are checked without motion in ``test_kinematics.py`` (the tower solved, every pose reachable and round-tripped).
    """
    png = tmp_path / "hanoi.png"
    res = _run("--boxes", "2", "--figure", str(png))
    print(res.stdout, res.stderr[-3000:], sep="\n")
    assert res.returncode == 0
    out = res.stdout
    placed = re.findall(r"move (\d)/3: box (\d) (\w) → (\w) placed at level (\d), FK error ([\d.]+) mm", out)
    assert [int(m[0]) for m in placed] == [1, 2, 3]
    assert [(m[2], m[3]) for m in placed] == [("A", "B"), ("A", "C"), ("B", "C")]
    assert all(float(m[5]) <= 1.0 for m in placed)  # The program's FK tolerance (its default, 1 mm).
    assert "final stacks A: [], B: [], C: [1, 0]" in out
    assert "placements verified by FK from measured joints: 3" in out
    stray = re.search(r"grip point off its Cartesian straight segment along the joint-space lines over (\d+) arm "
                      r"segments: median ([\d.]+) mm, max ([\d.]+) mm", out)
    assert stray is not None and int(stray[1]) >= 12 and float(stray[3]) > 0.0, out
    spread = re.search(r"arrival spread over (\d+) coordinated moves: median ([\d.]+) ms, max ([\d.]+) ms", out)
    assert spread is not None and int(spread[1]) > 10
    print(f"ARRIVAL SPREAD: median {spread[2]} ms, max {spread[3]} ms over {spread[1]} moves")
    assert png.stat().st_size > 50_000


@pytest.mark.slow
def test_joints_held_up_past_their_deadman_during_a_move_stop_and_the_segment_resumes() -> None:
    """The five node processes stopped for 0.8 s (a busy host; their deadman is 0.5 s) during the travel: the joints
    stop on their own, the program sees their commands expired, waits until they are at rest, moves the segment
    again from there and says so; the box is still placed and FK-verified."""
    env = base_env()
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([*HANOI, "--boxes", "1", "--figure", "", "-v"], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    errors: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            errors.append(line)
            if "travel (box 0, A → C): sent" in line and not any("stopped on their deadman" in e for e in errors):
                time.sleep(0.2)  # Within the travel (about 1.6 s).
                nodes = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                        text=True).stdout.split()]
                assert len(nodes) == 5, nodes
                for pid in nodes:
                    os.kill(pid, signal.SIGSTOP)
                time.sleep(0.8)
                for pid in nodes:
                    os.kill(pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(out, "".join(errors)[-3000:], sep="\n")
    assert proc.returncode == 0
    assert "resumed after the joints' deadman stopped them during a move" in out
    assert "1 of the segments (move 1: travel (box 0, A → C))" in out
    assert "placements verified by FK from measured joints: 1" in out and "final stacks A: [], B: [], C: [0]" in out


@pytest.mark.slow
def test_one_box_on_the_coupled_arm_plant(tmp_path: Path) -> None:
    """``--plant arm``: base, shoulder and elbow on ``sim-plant --arm`` (gravity, coupling) over UDRAL, each still its
    own servo-node. The place is FK-verified from the measured joints within the same 1 mm, and the torque report
    shows gravity: shoulder and elbow hold the arm still at the place with a nonzero torque (the plant's g(q))."""
    res = _run("--plant", "arm", "--boxes", "1", "--figure", "")
    print(res.stdout, res.stderr[-3000:], sep="\n")
    assert res.returncode == 0
    out = res.stdout
    assert "five nodes up (arm plant)" in out
    assert "final stacks A: [], B: [], C: [0]" in out
    assert "placements verified by FK from measured joints: 1" in out
    worst = re.search(r"worst grip-point error at rest over every arm segment: ([\d.]+) mm", out)
    assert worst is not None and float(worst[1]) <= 1.0
    assert re.search(r"torque max \|τ\| over the run: base [\d.]+ N·m, shoulder [\d.]+ N·m, elbow [\d.]+ N·m", out)
    hold = re.search(r"torque holding still at the 1 places: base (\S+)\.\.\S+ N·m, shoulder (\S+)\.\.\S+ N·m, "
                     r"elbow (\S+)\.\.\S+ N·m", out)
    assert hold is not None, out
    assert abs(float(hold[2])) > 1.0 and abs(float(hold[3])) > 0.1  # gravity (the independent joints hold ~0)
    assert abs(float(hold[1])) < 0.05  # the base turns about the vertical: gravity does not load it
    assert re.search(r"tracking error against the plan, max per joint: base [\d.]+ mrad, shoulder", out)


@pytest.mark.slow
def test_a_failed_check_stops_the_arm(tmp_path: Path) -> None:
    """An FK tolerance no real arm meets (0.1 µm): the first segment fails its check, the arm is stopped."""
    res = _run("--boxes", "1", "--fk-tolerance", "0.0001", "--figure", "")
    print(res.stdout, res.stderr[-3000:], sep="\n")
    assert res.returncode == 1
    assert re.search(r"STOPPED: move 1: approach .* mm from its target \(tolerance 0\.0001 mm\)", res.stderr)
    assert "every joint at rest" in res.stderr
    assert "placed" not in res.stdout


def test_out_of_reach_is_refused_before_anything_moves() -> None:
    """A travel height beyond the arm's reach, or subjects on the standard ones: a clear error and exit code 2, before
    any node is started."""
    res = _run("--boxes", "3", "--clearance", "600", "--figure", "", timeout=120)
    assert res.returncode == 2
    assert "3 boxes cannot be done with this arm, nothing moved: platform A at height" in res.stderr
    assert "the arm reaches" in res.stderr
    assert "nodes up" not in res.stdout
    res = _run("--boxes", "9", "--figure", "", timeout=120)
    assert res.returncode == 2 and "--boxes must be 1..8" in res.stderr
    # Subjects 7500..7514 would put the start on the heartbeat's subject (7509): refused, nothing started.
    res = subprocess.run([*HANOI[:-1], "7500", "--boxes", "1"], env=base_env() | {"PYTHONPATH": str(ROOT)}, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "(7509, 7510 taken)" in res.stderr and "nodes up" not in res.stdout
