"""One diagnostics path: a refused register write is one ``uavcan.diagnostic.Record`` at or above the standard
``uavcan.diagnostic.severity`` register, none below it (pycyphal's own log handler for the same register would
publish the report's log line a second time)."""

from __future__ import annotations

import asyncio

import pytest
import uavcan.diagnostic
import uavcan.primitive.array
import uavcan.register

from servo_node.node import ServoNode
from tests.node.test_shell import CLIENT as CLIENT_ID
from tests.node.test_shell import NODE, Client, servo_env

WARNING, ERROR = int(uavcan.diagnostic.Severity_1_0.WARNING), int(uavcan.diagnostic.Severity_1_0.ERROR)


@pytest.mark.parametrize(("severity", "expected"), [(None, 1), (WARNING, 1), (ERROR, 0)])
async def test_a_refused_write_is_one_record_at_or_above_the_severity(severity: int | None, expected: int) -> None:
    records: list[tuple[int, str]] = []
    client = Client()
    try:
        sub = client.node.make_subscriber(uavcan.diagnostic.Record_1_1)
        sub.receive_in_background(
            lambda msg, meta: records.append((msg.severity.value, msg.text.tobytes().decode()))  # type: ignore[func-returns-value]
            if meta.source_node_id == NODE else None
        )
        env = servo_env() if severity is None else servo_env(UAVCAN__DIAGNOSTIC__SEVERITY=str(severity))
        async with ServoNode(None, env, loop_clock="simulated") as node:
            access = client.node.make_client(uavcan.register.Access_1_0, NODE)
            access.response_timeout = 5.0
            value = uavcan.register.Value_1_0(real32=uavcan.primitive.array.Real32_1_0([-5.0]))
            res = await access.call(uavcan.register.Access_1_0.Request(uavcan.register.Name_1_0("servo.profile.jerk"),
                                                                        value))
            assert res is not None and list(res[0].value.real32.value) == [800.0]  # Refused: servo_env's value stays.
            await asyncio.sleep(0.5)  # Let every record out.
            access.close()
            refused = [r for r in records if "register write refused: servo.profile.jerk" in r[1]]
            assert len(refused) == expected, records
            assert all(sev >= (severity or 0) for sev, _ in records), records
            assert node.diagnostics.published == len(records)
    finally:
        client.node.close()


async def test_getinfo_names_the_revision_and_the_description_says_what_it_is() -> None:
    """GetInfo carries the checkout's commit (first 64 bits) and the description register a meaningful default;
    a user's description wins."""
    import subprocess

    import uavcan.node

    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    client = Client()
    try:
        async with ServoNode(None, servo_env(), loop_clock="simulated") as node:
            info = client.node.make_client(uavcan.node.GetInfo_1_0, NODE)
            info.response_timeout = 5.0
            res = await info.call(uavcan.node.GetInfo_1_0.Request())
            info.close()
            assert res is not None
            assert res[0].software_vcs_revision_id == int(head[:16], 16)
            assert node.registry.text("uavcan.node.description") == "cyphal-servo: a servo drive controller (one axis)"
        env = servo_env(UAVCAN__NODE__DESCRIPTION="left arm, joint 3")
        async with ServoNode(None, env, loop_clock="simulated") as node:
            assert node.registry.text("uavcan.node.description") == "left arm, joint 3"
    finally:
        client.node.close()


async def test_a_node_without_an_id_gets_one_from_a_pycyphal_allocator_and_moves() -> None:
    """No ``uavcan.node.id``: the node asks the bus's plug-and-play allocator (pycyphal's own), keeps the ID in its
    register, comes up OPERATIONAL under it and follows a setpoint."""
    from pycyphal.application.plug_and_play import CentralizedAllocator

    client = Client()
    CentralizedAllocator(client.node)
    env = {k: v for k, v in servo_env().items() if k != "UAVCAN__NODE__ID"}
    try:
        node = ServoNode(None, env, loop_clock="simulated")
        await asyncio.wait_for(node.start(), 30.0)
        try:
            node_id = int(node.registry.setdefault("uavcan.node.id"))  # type: ignore[arg-type]
            assert 0 <= node_id < 0xFFFF and node_id != CLIENT_ID, node_id
            axis = node.axis()
            await client.send(axis, 2.0)
            axis.advance(0.3)
            s = axis.loop.sample()
            assert axis.status()["servo"]["state"] == "engaged" and s.engaged and 0.0 < s.position < 2.0, s
        finally:
            await node.close()
    finally:
        client.node.close()  # The allocator lives as long as its node.
