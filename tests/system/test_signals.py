"""``servo-node run`` as a process: SIGINT or SIGTERM mid-motion makes a safe stop, then exit code 0, no traceback."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.procs import BIN, RegisterClient, base_env, popen, wait_answers, wait_for

NODE, CLIENT = 3735, 3736  # Uncommon: other Cyphal traffic on 127.0.0.1 may use 125/126.


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_motion_stops_safely_and_exits_0(signum: signal.Signals, tmp_path: Path) -> None:
    env = base_env(UAVCAN__NODE__ID=str(NODE), UAVCAN__SUB__SETPOINT_SERVO__ID="27", SERVO__LOOP_CLOCK="stepped")
    args = [str(BIN / "servo-node"), "-v", "run", "--registry", str(tmp_path / "servo.db")]
    node = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reader = None
    try:
        wait_answers(node, env, NODE, "servo-node")
        reader = RegisterClient(env, NODE)
        pub_env = {k: v for k, v in env.items() if not k.startswith(("SERVO__", "SIM__"))} | {
            "UAVCAN__NODE__ID": str(CLIENT)
        }
        with popen([str(BIN / "y"), "pub", "-T", "0.1", "27:uavcan.primitive.scalar.real32", "1000"], pub_env):
            wait_for(lambda: abs(reader.json("sys.motion")["meas"][1]) > 5.0, timeout=60, what="fast motion")
            node.send_signal(signum)  # The publisher keeps going: the stop must not be undone by setpoints.
            _, stderr = node.communicate(timeout=60)
    finally:
        if reader is not None:
            reader.close()
        if node.poll() is None:
            node.kill()
            node.wait()
    print(stderr[-2000:])
    assert node.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "Safe stop done" in stderr and "Servo node closed" in stderr
