"""The drive backend table: names, lazy import, an unavailable backend as a configuration error; a closed UDRAL
drive stops publishing."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pytest

from servo_node import drive
from servo_node.drive import BACKENDS, BackendUnavailableError, backend, require
from servo_node.drive._base import DRIVE_REMOTE, DRIVE_SIM
from servo_node.node import ServoNode
from servo_node.registers import SPECS

if TYPE_CHECKING:
    import pycyphal.application


def test_every_backend_loads_and_declares_itself() -> None:
    """Each table entry imports and is a Drive whose hooks the node relies on; its registers are declared."""
    kinds = {name: backend(name).kind for name in BACKENDS}
    assert kinds["sim"] == DRIVE_SIM and kinds["udral"] == DRIVE_REMOTE
    assert "sim.inertia" in SPECS and "sim.inertia" in backend("sim").register_specs()
    assert backend("sim").stepped_clock and not backend("udral").stepped_clock


def test_a_register_two_backends_declare_is_the_same_register() -> None:
    """``servo.drive.can.*`` belongs to cia402 and odrive alike: the same default and the same verdicts on writes,
    whichever backend's declaration the node keeps."""
    from pycyphal.application.register import Natural32, String, Value, ValueProxy

    declared: dict[str, list[object]] = {}
    for name in BACKENDS:
        for reg, spec in backend(name).register_specs().items():
            declared.setdefault(reg, []).append(spec)
    shared = {reg: specs for reg, specs in declared.items() if len(specs) > 1}
    assert {"servo.drive.can.iface", "servo.drive.can.bitrate"} <= set(shared)
    numbers = [Value(natural32=Natural32([x])) for x in (0, 9_999, 10_000, 500_000, 1_000_000, 1_000_001)]
    texts = [Value(string=String(x)) for x in ("", "udpmc:239.1.2.3", "socketcan:can0")]
    for reg, specs in shared.items():
        assert len({repr(spec.default) for spec in specs}) == 1, reg  # type: ignore[attr-defined]
        for probe in texts if specs[0].default.string is not None else numbers:  # type: ignore[attr-defined]
            verdicts = {spec.validator(ValueProxy(probe)) for spec in specs}  # type: ignore[attr-defined]
            assert len(verdicts) == 1, (reg, probe, verdicts)


def test_unknown_or_missing_backend_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendUnavailableError, match="not one of"):
        backend("nonesuch")
    monkeypatch.setitem(drive._table.BACKENDS, "udral", "servo_node.drive.no_such_module:Nothing")  # type: ignore
    with pytest.raises(BackendUnavailableError, match="no_such_module"):
        backend("udral")
    with pytest.raises(BackendUnavailableError, match="needs the Python package 'no_such_package_xyz'"):
        require("no_such_package_xyz", "udral", "pip install it")


async def test_node_with_an_unavailable_backend_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ImportError at start-up: the node runs, the axis is in error 7 with the reason in sys.status."""
    monkeypatch.setitem(drive._table.BACKENDS, "udral", "servo_node.drive.no_such_module:Nothing")  # type: ignore
    env = {"UAVCAN__LOOPBACK": "1", "UAVCAN__NODE__ID": "5", "SERVO__DRIVE__BACKEND": "udral"}
    async with ServoNode(None, env, loop_clock="simulated") as node:
        servo = node.axis().status()["servo"]
        assert servo["state"] == "error" and servo["error"] == 7, servo
        assert "no_such_module" in servo["reason"]


def _loopback_node_with_drive_ports(name: str) -> pycyphal.application.Node:
    """A started node on the loopback transport with a UDRAL drive's four ports configured."""
    import pycyphal.application

    env = {"UAVCAN__LOOPBACK": "1", "UAVCAN__NODE__ID": "5", "UAVCAN__PUB__DRIVE_SETPOINT__ID": "100",
           "UAVCAN__PUB__DRIVE_READINESS__ID": "101", "UAVCAN__SUB__DRIVE_DYNAMICS__ID": "102",
           "UAVCAN__SUB__DRIVE_FEEDBACK__ID": "103"}
    node = pycyphal.application.make_node(pycyphal.application.NodeInfo(name=name),
                                          pycyphal.application.make_registry(None, env))
    node.start()
    return node


async def test_a_closed_udral_drive_stops_publishing_even_when_its_cancellation_is_lost() -> None:
    """On Python 3.11 ``asyncio.wait_for`` inside a send swallows a cancellation that meets the send's completion;
    the drive's publisher must still stop once closed (the drive's own control timeout is the safety behind it, not
    a command stream that outlives the axis). The send here swallows every cancellation."""
    import asyncio

    from servo_node.drive.udral import UdralDrive
    from tests.lost_cancellation import LostCancellation

    node = _loopback_node_with_drive_ports("test.udral_close")
    try:
        drive = UdralDrive(node, "rotational", 100.0)
        send = LostCancellation(drive._pub_readiness.publish)
        drive._pub_readiness.publish = send  # type: ignore[method-assign]
        drive.start()
        task = drive._task
        assert task is not None
        await send.close_mid_send(drive.close)
        await asyncio.sleep(0.2)  # Twenty periods.
        assert task.done() and send.sent_since(0.15) == 0, len(send.sent)
    finally:
        node.close()


async def test_a_udral_drive_sends_readiness_when_it_changes_then_every_tenth_of_a_second() -> None:
    """Readiness goes out before the first setpoint that needs it and at once when the loop lets go; unchanged, only
    every ``READINESS_PERIOD_S`` (UDRAL's drives time out after 1 s), not with every setpoint."""
    import asyncio
    import time

    from servo_node.drive import _remote_link as link
    from servo_node.drive.udral import UdralDrive
    from servo_node.drive.udral._drive import READINESS_PERIOD_S

    node = _loopback_node_with_drive_ports("test.udral_readiness")
    sent: list[tuple[str, int, float]] = []  # (what, readiness value or 0, time.monotonic)
    try:
        drive = UdralDrive(node, "rotational", 200.0)
        for what, pub in (("readiness", drive._pub_readiness), ("setpoint", drive._pub_setpoint)):
            async def record(msg: object, what: str = what, publish: object = pub.publish) -> bool:
                sent.append((what, int(getattr(msg, "value", 0)), time.monotonic()))
                return bool(await publish(msg))  # type: ignore[operator]

            pub.publish = record  # type: ignore[method-assign]
        drive.start()
        await asyncio.sleep(0.15)
        drive.arrays.tx[link.TX_V], drive.arrays.tx[link.TX_F] = 0.5, 1.0
        drive.arrays.tx[link.TX_ENABLE] = 1.0  # As the loop commands it (one thread here: nothing torn).
        await asyncio.sleep(0.35)
        drive.arrays.tx[link.TX_ENABLE] = 0.0
        await asyncio.sleep(0.15)
        drive.close()
    finally:
        node.close()
    standby, engaged = 2, 3
    readiness = [(value, t) for what, value, t in sent if what == "readiness"]
    values = [value for value, _ in readiness]
    changes = [values[0]] + [b for a, b in itertools.pairwise(values) if a != b]
    assert changes == [standby, engaged, standby], values
    first_setpoint = next(k for k, (what, _, _) in enumerate(sent) if what == "setpoint")
    assert sent[first_setpoint - 1][:2] == ("readiness", engaged)  # ENGAGED first, then the setpoint.
    last_engaged = max(k for k, (what, value, _) in enumerate(sent) if what == "readiness" and value == engaged)
    let_go = next(k for k, (what, value, _) in enumerate(sent) if k > last_engaged and what == "readiness")
    assert all(what == "readiness" for what, _, _ in sent[let_go:])  # STANDBY at once, no setpoint after it.
    for (a, ta), (b, tb) in itertools.pairwise(readiness):
        assert a != b or tb - ta >= READINESS_PERIOD_S, (ta, tb)  # Unchanged: not sooner than the period.
    setpoints = sum(1 for what, _, _ in sent if what == "setpoint")
    assert setpoints > 2 * sum(1 for value in values if value == engaged), (setpoints, values)
