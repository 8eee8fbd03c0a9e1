"""The package layers stay apart: ``sim_plant`` is numerics only, and importing a package has no side effects.

``sim_plant`` is numpy/numba: no Cyphal, no asyncio, neither application (``servo_node``, ``sim_plant_node``) nor
their shared plumbing (``cyphal_common``). Importing the packages ``servo_node``, ``sim_plant_node`` and
``cyphal_common`` must neither compile DSDL nor import ``pycyphal.application`` or generated types: entry points
do that (see ``cyphal_common.dsdl``). Checked in a fresh interpreter, since this test session has imported
everything already.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN_IN_SIM_PLANT = ("asyncio", "pycyphal", "servo_node", "sim_plant_node", "cyphal_common", "uavcan", "reg")
"""Top-level modules ``sim_plant`` must not import, directly or through its dependencies."""


def _modules_after_import(*packages: str) -> list[str]:
    """Top-level names in ``sys.modules`` after importing ``packages`` in a fresh interpreter."""
    script = textwrap.dedent(
        f"""
        import json, sys
        for name in {list(packages)!r}:
            __import__(name)
        print(json.dumps(sorted(sys.modules)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=True
    )
    return list(json.loads(out.stdout.splitlines()[-1]))


def _top(name: str) -> str:
    return name.split(".")[0]


def test_sim_plant_imports_no_cyphal_no_asyncio_no_application() -> None:
    """Importing sim_plant (and running nothing) loads none of the forbidden modules."""
    loaded = _modules_after_import("sim_plant")
    assert "sim_plant" in loaded
    assert sorted({m for m in loaded if _top(m) in FORBIDDEN_IN_SIM_PLANT}) == []


def test_sim_plant_sources_name_no_forbidden_module() -> None:
    """No import statement in sim_plant, not even a deferred one inside a function, names a forbidden module."""
    offenders = []
    for path in sorted((REPO_ROOT / "sim_plant").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}:{node.lineno} {n}" for n in names if _top(n) in FORBIDDEN_IN_SIM_PLANT]
    assert offenders == []


def test_importing_the_packages_compiles_nothing() -> None:
    """The packages import without generated DSDL types and without pycyphal.application."""
    loaded = _modules_after_import("servo_node", "sim_plant_node", "cyphal_common", "cyphal_common.dsdl")
    assert not [m for m in loaded if _top(m) in ("uavcan", "reg", "zubax") or m.startswith("pycyphal.application")]
    assert "servo_node._kernel_cache" not in loaded  # The stale-kernel check runs at entry points only.


def test_numerics_of_the_servo_import_no_cyphal_no_asyncio() -> None:
    """The OTG, the control loop and the drives' numba halves are numerics: importing them loads no pycyphal,
    no asyncio and no generated types (a backend on a bus, ``drive.udral``, is imported only when used)."""
    loaded = _modules_after_import(
        "servo_node.otg", "servo_node.control", "servo_node.drive", "servo_node.drive._dispatch", "servo_node.setpoint"
    )
    assert "servo_node.control._kernel" in loaded
    assert sorted({m for m in loaded if _top(m) in ("asyncio", "pycyphal", "uavcan", "reg", "zubax")}) == []
