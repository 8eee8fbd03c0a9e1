"""Two setpoint interfaces on one axis at once (issue 49): the Telega subject and the UDRAL servo setpoint, both
published with the real yakut CLI. The axis follows one at a time: the first keeps it while it keeps publishing,
the other's setpoints are refused (counted, ``sys.last_rejection``, one diagnostic), and the other takes over once
the first has been silent for the deadman timeout. Before, the joint thrashed between the two targets, silently.
The holder keeps the axis through an error its setpoint cannot end (the in-process test, on the simulated clock)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import reg.udral.physics.dynamics.rotation as rot

from cyphal_common.udral import make_dynamics
from servo_node.errors import ErrorCode
from servo_node.node import ServoNode
from tests.hostile.harness import logged_servo_node
from tests.node.test_shell import Client, servo_env, until
from tests.procs import BIN, RegisterClient, base_env, popen, wait_for

NODE, READER, TELEGA_CLIENT, UDRAL_CLIENT = 3781, 3782, 3783, 3784
TELEGA_SUBJECT, UDRAL_SUBJECT = 3785, 3786
DEADMAN_S = 0.5


def _pub(client: int, *args: str) -> Any:
    env = {**base_env(), "UAVCAN__NODE__ID": str(client)}
    return popen([str(BIN / "y"), "pub", *args], env)


def test_two_setpoint_interfaces_at_once_one_commands_the_other_is_refused(tmp_path: Path) -> None:
    env = base_env(UAVCAN__NODE__ID=str(NODE), UAVCAN__SUB__SETPOINT_SERVO__ID=str(TELEGA_SUBJECT),
                   UAVCAN__SUB__SERVO__SETPOINT__ID=str(UDRAL_SUBJECT), SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S))
    telega = ["-T", "0.05", f"{TELEGA_SUBJECT}:zubax.telega.ServoCommand", "{target: 5}"]
    udral = ["-T", "0.05", f"{UDRAL_SUBJECT}:reg.udral.physics.dynamics.rotation.planar",
             "{kinematics: {angular_position: {radian: -5}, angular_velocity: {radian_per_second: .nan}, "
             "angular_acceleration: {radian_per_second_per_second: .nan}}, torque: {newton_meter: .nan}}"]
    with logged_servo_node(env, tmp_path / "servo.db", tmp_path / "servo.log", NODE) as proc:
        reader = RegisterClient(env, NODE, READER)
        try:
            def target() -> float:
                return float(reader.json("sys.status")["servo"].get("target", ["nan"])[0])

            with _pub(TELEGA_CLIENT, *telega):
                wait_for(lambda: target() == 5.0, 30, what="the Telega setpoint in force")
                rejected = reader.json("sys.counters")["rejected"]
                with _pub(UDRAL_CLIENT, *udral):
                    wait_for(lambda: reader.json("sys.counters")["rejected"] > rejected or target() != 5.0, 30,
                             what="the UDRAL setpoints arriving")
                    targets, positions = [], []
                    end = time.monotonic() + 2.0
                    while time.monotonic() < end:  # Both publish: the Telega one keeps the axis.
                        targets.append(target())
                        positions.append(reader.json("sys.motion")["meas"][0])
                    assert set(targets) == {5.0}, targets
                    # Never back toward −5: only a settling back from past 5 (the node's own overshoot figure).
                    over = float(reader.json("sys.motion").get("over", 0.0))
                    assert all(b >= a - over - 1e-6 for a, b in itertools.pairwise(positions)), (over, positions)
                    assert all(p <= 5.0 + over + 1e-6 for p in positions), (over, positions)
                    assert reader.json("sys.counters")["rejected"] >= rejected + 10  # 20 per second refused.
                    why = reader.read("sys.last_rejection")
                    assert "setpoint on servo.setpoint refused: setpoint_servo commands this axis" in why, why
            # Both publishers ended with their blocks; UDRAL alone now takes the axis (Telega silent).
            with _pub(UDRAL_CLIENT, *udral):
                wait_for(lambda: target() == -5.0, 30, what="the UDRAL setpoint in force once Telega fell silent")
            reports = [ln for ln in proc.text().splitlines() if "two setpoint interfaces at once" in ln]
            assert len(reports) == 1, reports  # One report per conflict, not one per refused setpoint.
            proc.assert_alive_and_clean()
        finally:
            reader.close()


async def test_the_interface_in_force_keeps_the_axis_through_an_error_its_setpoint_cannot_end() -> None:
    """ci81: a following error refuses the Telega publisher's setpoint, repeated as a publisher does; that refusal
    must not count as the interface falling silent. Before, half a second after the error the UDRAL setpoint took
    the axis and the joint turned toward −20 while the Telega publisher went on publishing +20. On the loop's
    simulated clock: the joint's hard stop at 1 ends its motion toward 20 in a following error."""
    env = servo_env(UAVCAN__SUB__SERVO__SETPOINT__ID=str(UDRAL_SUBJECT), SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S),
                    SIM__MIN_STOP="-1", SIM__MAX_STOP="1")
    client = Client()
    udral = client.node.make_publisher(rot.Planar_0_1, UDRAL_SUBJECT)
    try:
        async with ServoNode(None, env, loop_clock="simulated") as node:
            axis = node.axis()
            c = axis.counters
            await client.send(axis, 20.0)
            axis.advance(0.45)
            status = axis.status()["servo"]
            assert status["state"] == "error" and status["error"] == ErrorCode.FOLLOWING_ERROR, status
            for _ in range(10):  # 2 s of loop time, four deadman timeouts: Telega goes on publishing its setpoint.
                await client.send(axis, 20.0)
                assert c.setpoints_accepted == 1  # The failed setpoint again: refused by the error, not applied.
                before = c.setpoints_rejected + c.setpoints_accepted
                await udral.publish(make_dynamics(True, position=-20.0))
                await until(lambda b=before: c.setpoints_rejected + c.setpoints_accepted > b, "the UDRAL setpoint")
                assert c.setpoints_accepted == 1, axis.status()
                assert "servo.setpoint refused: setpoint_servo commands this axis" in c.last_rejection
                axis.advance(0.2)
            s = axis.loop.sample()
            assert axis.status()["servo"]["state"] == "error" and abs(s.velocity) <= 0.01, (axis.status(), s)
    finally:
        udral.close()
        client.node.close()
