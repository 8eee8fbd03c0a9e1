"""The coupled arm on the bus: ``sim-plant --arm`` driven by three real ``servo-node`` processes over UDP.

Each servo node commands one arm joint (base, shoulder, elbow) through the UDRAL interface, as it commands a
single simulated drive; all three move at once, under gravity and coupling. Verdicts are the nodes' own figures
(``sys.motion``), as in ``test_bus_tracking.py``; waits are generous and never asserted.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from tests.procs import (
    ARRIVAL_LATE_S,
    BIN,
    SIM_PLANT,
    Processes,
    RegisterClient,
    base_env,
    popen,
    realtime,
    settled_on_time,
    wait_for,
)

JOINTS = ("base", "shoulder", "elbow")
NODES = (91, 92, 93)  # clear of tests.procs._CLIENT_POOL (111..116, 122)
PLANT, CLIENT = 89, 94
SETPOINTS = (3151, 3152, 3153)
TARGET = (0.5, 0.8, 0.6)


def _drive_ids(j: int) -> dict[str, int]:
    base = 3160 + 4 * j
    return {"setpoint": base, "readiness": base + 1, "dynamics": base + 2, "feedback": base + 3}


def test_three_servo_nodes_move_the_coupled_arm_over_udp(tmp_path: Path) -> None:
    plant_env = base_env(UAVCAN__NODE__ID=str(PLANT), SIM__PUBLISH_RATE="200")
    for name, j in zip(JOINTS, range(3), strict=True):
        for port, sid in _drive_ids(j).items():
            kind = "SUB" if port in ("setpoint", "readiness") else "PUB"
            plant_env[f"UAVCAN__{kind}__{name.upper()}__{port.upper()}__ID"] = str(sid)
    servo_envs = []
    for j, node in enumerate(NODES):
        ids = _drive_ids(j)
        servo_envs.append(base_env(
            UAVCAN__NODE__ID=str(node),
            UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINTS[j]),
            SERVO__DRIVE__BACKEND="udral",
            UAVCAN__PUB__DRIVE_SETPOINT__ID=str(ids["setpoint"]),
            UAVCAN__PUB__DRIVE_READINESS__ID=str(ids["readiness"]),
            UAVCAN__SUB__DRIVE_DYNAMICS__ID=str(ids["dynamics"]),
            UAVCAN__SUB__DRIVE_FEEDBACK__ID=str(ids["feedback"]),
            SERVO__PROFILE__VELOCITY="-1.5 1.5",  # the Hanoi arm's profile; the motors allow 3 rad/s, 20 N·m
            SERVO__PROFILE__ACCELERATION="-6 6",
            SERVO__PROFILE__JERK="60",
        ))
    readers = [RegisterClient(servo_envs[j], node, 95 + j) for j, node in enumerate(NODES)]
    try:
        with contextlib.ExitStack() as stack:
            group = stack.enter_context(Processes())  # The plant and the three nodes end together.
            plant = group.start([*SIM_PLANT, "--arm", "--registry", str(tmp_path / "arm.db")], plant_env,
                                log=tmp_path / "arm.log")
            nodes = group.servo_nodes(*((env, tmp_path / f"servo{j}.db", NODES[j]) for j, env in enumerate(servo_envs)))

            def motions() -> list[dict[str, Any]]:
                return [dict(r.json("sys.motion")) for r in readers]

            wait_for(lambda: all(m["meas"][0] == 0.0 for m in motions()), timeout=60, what="the drives' dynamics")
            rt = all(realtime(p.pid) for p in (plant, *nodes))
            pub_env = {k: v for k, v in servo_envs[0].items() if not k.startswith(("SERVO__", "SIM__"))}
            pub_env["UAVCAN__NODE__ID"] = str(CLIENT)
            args = [a for j in range(3) for a in (f"{SETPOINTS[j]}:uavcan.primitive.scalar.real32", str(TARGET[j]))]
            with popen([str(BIN / "y"), "pub", "-T", "0.1", *args], pub_env):

                def settled() -> list[dict[str, Any]] | None:
                    ms = motions()
                    done = all(isinstance(m["settled"], float) and abs(m["meas"][0] - t) < 0.01
                               for m, t in zip(ms, TARGET, strict=True))
                    return ms if done else None

                ms = wait_for(settled, timeout=90, what="all three joints at their targets")
            for name, m in zip(JOINTS, ms, strict=True):
                print(f"arm {name} (SCHED_FIFO {'on' if rt else 'off'}): plan {m['plan']['T']} s, settled "
                      f"{m['settled']} s, track_max {m['track_max']:.2e}, over {m['over']:.1e}, at {m['meas'][0]}")
                assert settled_on_time(m, ARRIVAL_LATE_S), m  # Arrival; tracking quality is bench/'s.
    finally:
        for r in readers:
            r.close()
    log = (tmp_path / "arm.log").read_text()
    assert "Traceback" not in log, log
