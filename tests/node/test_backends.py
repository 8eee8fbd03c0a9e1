"""The drive backend table: names, lazy import, and an unavailable backend as a configuration error."""

from __future__ import annotations

import pytest

from servo_node import drive
from servo_node.drive import BACKENDS, BackendUnavailableError, backend, require
from servo_node.drive._base import DRIVE_REMOTE, DRIVE_SIM
from servo_node.node import ServoNode
from servo_node.registers import SPECS


def test_every_backend_loads_and_declares_itself() -> None:
    """Each table entry imports and is a Drive whose hooks the node relies on; its registers are declared."""
    kinds = {name: backend(name).kind for name in BACKENDS}
    assert kinds["sim"] == DRIVE_SIM and kinds["udral"] == DRIVE_REMOTE
    assert "sim.inertia" in SPECS and "sim.inertia" in backend("sim").register_specs()
    assert backend("sim").stepped_clock and not backend("udral").stepped_clock


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
