"""A coordinator whose own process is held up mid-move: its setpoints pause, the nodes' deadman stops the joints
(safely, as it must), and ``servo-coord`` says that it was the cause — not the joints, not the nodes.

The hold-up is certain, whatever the machine: the ``servo-coord`` process is stopped (SIGSTOP) for a second once the
joints move, as a long garbage collection or a starved host would hold it. The nodes run the stepped loop clock, so
their deadman counts their own time.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.coord.test_scenario import _move, servos
from tests.coord.test_system import _bus

# node-ID, setpoint subject, dynamics subject, profile v, a (dec, acc), jerk, inertia: a 3.4 s move
AXES = [(88, 3508, 3608, 1.0, (-5.0, 5.0), 50.0, 1.0), (89, 3509, 3609, 0.5, (-5.0, 5.0), 50.0, 1.0)]
HELD_S = 1.0


def test_a_coordinator_held_up_past_the_deadman_says_the_joints_stopped_for_it(tmp_path: Path) -> None:
    """Held up for 1 s a moment after its burst: exit 100, both axes STOPPED, the pause named as the cause."""
    bus = _bus()
    with servos(bus, tmp_path, AXES, start=False) as reader:
        readers = [reader.of(node_id) for node_id, *_ in AXES]

        def hold_up(p: subprocess.Popen[str]) -> None:
            deadline = time.monotonic() + 60.0
            while json.loads(readers[0].read("sys.motion"))["ref"][0] < 0.05:  # Until the joints move.
                assert time.monotonic() < deadline and p.poll() is None, "the move did not start"
                time.sleep(0.02)
            p.send_signal(signal.SIGSTOP)
            time.sleep(HELD_S)
            p.send_signal(signal.SIGCONT)

        code, out = _move(bus, AXES, (3.0, 1.5), hold="0", during=hold_up)
        assert code == 100 and "servo-coord: the move was not made" in out, (code, out)
        # Its setpoints paused for the second it was stopped: past the nodes' deadman (0.5 s), each stopped its
        # joint; the coordinator reports the pause as the cause, with the warning as it happened.
        gap = re.search(r"why: the coordinator sent no setpoint for ([\d.]+) s, longer than the nodes' deadman "
                        r"\(0\.5 s\): its process was held up", out)
        assert gap and HELD_S <= float(gap[1]) < HELD_S + 1.0, out
        assert "STOPPED before arrival: node 88" in out and "STOPPED before arrival: node 89" in out, out
        assert re.search(r"setpoints repeated [\d.]+ s after the last: this process was held up .*; the nodes' "
                         r"deadman \(0\.5 s\) stopped them", out), out
        # And every stop ended at rest.
        deadline = time.monotonic() + 10.0
        while True:
            motions = [json.loads(r.read("sys.motion")) for r in readers]
            if all(abs(m["meas"][1]) < 1e-6 for m in motions) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert all(abs(m["meas"][1]) < 1e-6 for m in motions), motions
