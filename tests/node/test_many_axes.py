"""A node with 48 axes (embedded simulated joints, the real loop clock) over UDP on 127.0.0.1.

It starts with one control thread for all the axes (one compiled kernel whatever their number), every axis
answers its ``sys.status`` through ``uavcan.register.Access``, and a setpoint to the last axis moves that axis and
no other. The axes tick at 100 Hz to keep the test cheap. Run inside a network namespace (``docs/testing.md``).
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator

import pycyphal.application
import pytest
import uavcan.register

from servo_node.control._kernel import run_realtime
from servo_node.node import ServoNode

from .test_shell import NODE, Client, until

AXES = [f"j{k}" for k in range(48)]
SUBJECT0 = 500
"""Axis ``j<k>`` takes its setpoints on subject ``SUBJECT0 + k``."""


def many_axes_env() -> dict[str, str]:
    env = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(NODE), "SERVO__AXES": " ".join(AXES)}
    for k, name in enumerate(AXES):
        env[f"UAVCAN__SUB__{name.upper()}__SETPOINT_SERVO__ID"] = str(SUBJECT0 + k)
        env[f"{name.upper()}__SERVO__LOOP_RATE"] = "100"
        env[f"{name.upper()}__SERVO__DEADMAN_TIMEOUT"] = "10"
    return env


async def read_status(access: pycyphal.presentation.Client[uavcan.register.Access_1_0], axis: str) -> dict[str, object]:
    result = await access.call(uavcan.register.Access_1_0.Request(uavcan.register.Name_1_0(f"{axis}.sys.status")))
    assert result is not None, f"{axis}.sys.status: no answer"
    value = result[0].value
    assert value.string is not None, f"{axis}.sys.status: {value}"
    status: dict[str, object] = json.loads(value.string.value.tobytes().decode())["servo"]
    return status


@pytest.fixture()
async def client() -> AsyncIterator[Client]:
    c = Client()
    yield c
    c.node.close()


async def test_a_node_with_48_axes_starts_answers_and_moves_one_axis(client: Client) -> None:
    async with ServoNode(None, many_axes_env()) as node:
        assert [a.names.axis for a in node.axes] == AXES
        thread = node.control_thread
        assert thread is not None and thread.running and thread.loops == tuple(a.loop for a in node.axes)
        assert len(run_realtime.signatures) == 1  # One kernel for 48 axes (and for whatever ran before).
        for a in node.axes:  # Every loop is ticked.
            ticks = a.loop.sample().ticks
            await until(lambda a=a, ticks=ticks: a.loop.sample().ticks > ticks, f"{a.names.axis} to be ticked")

        access = client.node.make_client(uavcan.register.Access_1_0, NODE)
        access.response_timeout = 5.0
        try:
            for name in AXES:
                status = await read_status(access, name)
                assert status["state"] == "standby" and status["error"] == 0, (name, status)
        finally:
            access.close()

        last = node.axis(AXES[-1])
        await client.send(last, 0.5, subject=SUBJECT0 + len(AXES) - 1)
        await until(lambda: math.isfinite(last.loop.sample().settled_after_s), "the last axis to arrive")
        assert abs(last.loop.sample().position - 0.5) < 1e-3
        for a in node.axes[:-1]:
            s = a.loop.sample()
            assert not s.engaged and s.position == 0.0 and a.counters.setpoints_accepted == 0, (a.names.axis, s)
