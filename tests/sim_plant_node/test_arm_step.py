"""``sim-plant arm-step``: the arm's step response against solve_ivp, its CSV and figure, and its errors."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from sim_plant_node import main


def _differences(out: str) -> list[float]:
    """The numbers of the 'largest difference' lines, in order."""
    return [float(x) for line in out.splitlines() if "largest difference" in line
            for x in re.findall(r"(\d\.\d+e[-+]\d+)", line)]


def test_computed_torque_step_overlays_reference_and_closed_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Fig. 9 run: difference to solve_ivp and to the closed form far below 1e-6 rad; CSV and PNG written."""
    png, table = tmp_path / "fig9.png", tmp_path / "fig9.csv"
    assert main(["arm-step", "--law", "ct", "--target", "1,1,1", "--duration", "1.5",
                 "--figure", str(png), "--csv", str(table)]) == 0
    angle, _, _, closed_numba, closed_ref = _differences(capsys.readouterr().out)
    assert angle < 1e-6 and closed_numba < 1e-6 and closed_ref < 1e-6
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 1501
    t = np.array([float(r["t"]) for r in rows])
    q2 = np.array([float(r["q2"]) for r in rows])
    np.testing.assert_allclose(1.0 - q2, (1.0 + 6.0 * t) * np.exp(-6.0 * t), atol=1e-6)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sampled_law_reference_is_sampled_too(capsys: pytest.CaptureFixture[str]) -> None:
    """PD + gravity held for 1 ms: the reference holds it as well (continuous and held differ by 1.5e-3 rad here)."""
    assert main(["arm-step", "--law", "pdg", "--duration", "0.5", "--control-period", "0.001"]) == 0
    angle, _, _ = _differences(capsys.readouterr().out)
    assert angle < 1e-6


@pytest.mark.parametrize("argv", [["--law", "pid"], ["--target", "1,1"], ["--control-period", "0.0015"]])
def test_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["arm-step", *argv])
    assert info.value.code == 2
    assert "arm-step" in capsys.readouterr().err
