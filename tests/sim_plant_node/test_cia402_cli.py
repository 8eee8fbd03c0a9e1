"""``sim-plant --canopen``: bad arguments and an unopenable bus are clear errors (exit status 2), never a hang."""

from __future__ import annotations

import pytest

from sim_plant_node import main
from sim_plant_node.cia402 import FAULT_AFTER_ENV


@pytest.mark.parametrize(
    "argv",
    [
        ["--canopen", "5"],
        ["--can", "virtual:x"],
        ["--canopen", "0", "--can", "virtual:x"],
        ["--canopen", "128", "--can", "virtual:x"],
    ],
)
def test_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--registry", ":memory:", *argv])
    assert info.value.code == 2
    assert "--canopen" in capsys.readouterr().err


@pytest.mark.parametrize(("iface", "says"), [("nonsense", "Malformed CAN iface"), ("udpmc:1.2.3.4", "239.0.0.0/8")])
def test_bad_iface(iface: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--registry", ":memory:", "--canopen", "5", "--can", iface]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "0", "soon"])
def test_bad_fault_injection_value(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FAULT_AFTER_ENV, value)
    assert main(["--registry", ":memory:", "--canopen", "5", "--can", "virtual:cli"]) == 2
    assert FAULT_AFTER_ENV in capsys.readouterr().err or value == "soon"
