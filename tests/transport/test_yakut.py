"""yakut, as a subprocess, talks to our nodes over the multicast CAN bus via ``YAKUT_TRANSPORT``."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pycyphal.transport import (
    InputSessionSpecifier,
    MessageDataSpecifier,
    OutputSessionSpecifier,
    PayloadMetadata,
    Priority,
    Timestamp,
    Transfer,
)

from cyphal_common.transport import make_transport, yakut_transport_expression

from .conftest import RECEIVE_TIMEOUT, DsdlEnv, Endpoint, Processes, clean_env

SUBJECT = 1234
YAKUT_NODE = 100
OUR_NODE = 101
YAKUT_STARTUP_TIMEOUT = 180.0  # yakut imports a lot; a loaded 2-core machine can take a while.


def yakut_executable() -> str:
    """The yakut next to this interpreter (the project venv), else whatever is on PATH; skip if none."""
    local = Path(sys.executable).with_name("yakut")
    if local.exists():
        return str(local)
    found = shutil.which("yakut")
    if found is None:
        pytest.skip("yakut is not installed")
    return found


def yakut_env(dsdl: DsdlEnv, endpoint: Endpoint, node_id: int | None) -> dict[str, str]:
    """Environment for a yakut subprocess on our bus, using the project's compiled DSDL."""
    return clean_env(
        YAKUT_TRANSPORT=yakut_transport_expression(endpoint.spec, node_id, 64),
        CYPHAL_PATH=str(dsdl.source),
        PYCYPHAL_PATH=str(dsdl.output),
    )


async def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Wait for a subprocess without blocking the event loop; returns (stdout, stderr)."""
    out, err = await asyncio.to_thread(proc.communicate, timeout=timeout)
    return out, err


async def test_yakut_pub_reaches_our_factory_transport(
    dsdl_env: DsdlEnv, endpoint: Endpoint, processes: Processes
) -> None:
    """``yakut pub`` on udpmc is received by a transport that make_transport built from ``udpmc:`` registers."""
    import pycyphal.dsdl
    import uavcan.primitive.scalar

    tr = make_transport({"uavcan.can.iface": endpoint.iface, "uavcan.can.mtu": 64, "uavcan.node.id": OUR_NODE})
    assert tr is not None
    try:
        sub = tr.get_input_session(InputSessionSpecifier(MessageDataSpecifier(SUBJECT), None), PayloadMetadata(64))
        proc = processes.start(
            [yakut_executable(), "pub", "-N", "20", "-T", "0.2", f"{SUBJECT}:uavcan.primitive.scalar.real32", "1.5"],
            env=yakut_env(dsdl_env, endpoint, YAKUT_NODE),
        )
        loop = asyncio.get_running_loop()
        got = await sub.receive(loop.time() + YAKUT_STARTUP_TIMEOUT)
        if got is None:
            proc.kill()
            _, err = await finish(proc, 30)
            pytest.fail(f"nothing received from yakut; stderr:\n{err}")
        assert got.source_node_id == YAKUT_NODE
        msg = pycyphal.dsdl.deserialize(uavcan.primitive.scalar.Real32_1_0, got.fragmented_payload)
        assert msg is not None and msg.value == pytest.approx(1.5)
        _, err = await finish(proc, YAKUT_STARTUP_TIMEOUT)
        assert proc.returncode == 0, err
    finally:
        tr.close()


async def test_yakut_sub_hears_our_factory_transport(
    dsdl_env: DsdlEnv, endpoint: Endpoint, processes: Processes
) -> None:
    """``yakut sub`` on udpmc (anonymous) receives what a make_transport-built transport publishes."""
    import pycyphal.dsdl
    import uavcan.primitive.scalar

    tr = make_transport({"uavcan.can.iface": endpoint.iface, "uavcan.node.id": OUR_NODE})
    assert tr is not None
    try:
        out = tr.get_output_session(OutputSessionSpecifier(MessageDataSpecifier(SUBJECT), None), PayloadMetadata(64))
        proc = processes.start(
            [yakut_executable(), "--json", "sub", "-N", "2", f"{SUBJECT}:uavcan.primitive.scalar.real32"],
            env=yakut_env(dsdl_env, endpoint, None),
        )
        payload = b"".join(pycyphal.dsdl.serialize(uavcan.primitive.scalar.Real32_1_0(value=2.5)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + YAKUT_STARTUP_TIMEOUT
        tid = 0
        while proc.poll() is None:  # Publish periodically until yakut has its two messages and exits.
            assert loop.time() < deadline, "yakut sub did not receive two messages"
            transfer = Transfer(Timestamp.now(), Priority.NOMINAL, tid, [memoryview(payload)])
            assert await out.send(transfer, loop.time() + 10)
            tid += 1
            await asyncio.sleep(0.2)
        stdout, err = await finish(proc, RECEIVE_TIMEOUT)
        assert proc.returncode == 0, err
        docs = [json.loads(line) for line in stdout.splitlines() if line.strip()]
        assert len(docs) == 2, stdout
        for doc in docs:
            body = doc[str(SUBJECT)]
            assert body["value"] == pytest.approx(2.5)
            assert body["_meta_"]["source_node_id"] == OUR_NODE
    finally:
        tr.close()
