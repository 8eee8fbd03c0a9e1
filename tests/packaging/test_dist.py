"""The built sdist and wheel hold exactly what a user needs: every module, every DSDL file, the CiA 402 EDS, the
console's page with its chart library (and that library's licence and version), metadata; no tests."""

from __future__ import annotations

import email.parser
import tarfile
import zipfile
from pathlib import Path

import pytest

from .conftest import PACKAGES, PYPROJECT, REPO_ROOT, VERSION, Dist

pytestmark = [pytest.mark.install, pytest.mark.xdist_group("packaging")]  # one worker: the wheel is built once

DIST_INFO = f"cyphal_servo-{VERSION}.dist-info"


CONSOLE_STATIC = "servo_node/console/static"
UPLOT = f"{CONSOLE_STATIC}/vendor/uplot"


def _payload() -> set[str]:
    """Every file of the four packages in the checkout that the wheel must hold: the modules, and the package data
    pyproject.toml declares (the DSDL definitions, the emulated drives' files, the console's page, script, style and
    uPlot with its licence and version — not the script that fetched uPlot) (POSIX paths)."""
    files = set()
    for pkg in PACKAGES:
        for path in (REPO_ROOT / pkg).rglob("*.py"):
            files.add(path.relative_to(REPO_ROOT).as_posix())
    for pkg, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        root = REPO_ROOT / pkg.replace(".", "/")
        for pattern in patterns:
            files |= {p.relative_to(REPO_ROOT).as_posix() for p in root.glob(pattern) if p.is_file()}
    return {f for f in files if "__pycache__" not in f}


def test_wheel_holds_every_module_and_dsdl_file_and_nothing_else(dist: Dist) -> None:
    """The wheel's files are the packages' modules and DSDL files plus its dist-info: no tests, caches, leftovers."""
    assert dist.wheel.name == f"cyphal_servo-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(dist.wheel).namelist())
    payload = _payload()
    dsdl = {n for n in payload if n.endswith(".dsdl")}
    assert len(dsdl) > 100 and {n.split("/")[2] for n in dsdl} == {"uavcan", "zubax", "reg"}
    assert "sim_plant_node/cia402_drive.eds" in payload
    assert {f"{CONSOLE_STATIC}/index.html", f"{CONSOLE_STATIC}/console.js", f"{CONSOLE_STATIC}/console.css",
            f"{UPLOT}/uPlot.iife.min.js", f"{UPLOT}/uPlot.min.css", f"{UPLOT}/LICENSE", f"{UPLOT}/VERSION"} <= payload
    assert {n for n in names if not n.startswith(DIST_INFO + "/")} == payload
    assert {n.split("/")[0] for n in names} == {*PACKAGES, DIST_INFO}
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/"))]


def test_wheel_metadata_and_commands(dist: Dist) -> None:
    """Version, licence, Python and dependencies come from pyproject.toml; both console scripts are declared."""
    wheel = zipfile.ZipFile(dist.wheel)
    meta = email.parser.Parser().parsestr(wheel.read(f"{DIST_INFO}/METADATA").decode())
    project = PYPROJECT["project"]
    assert meta["Name"] == "cyphal-servo" and meta["Version"] == VERSION
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == project["requires-python"]
    requires = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert len(requires) == len(project["dependencies"])
    assert "console" in (meta.get_all("Provides-Extra") or [])
    assert any(r.startswith("aiohttp") and 'extra == "console"' in r for r in meta.get_all("Requires-Dist") or [])
    entry_points = wheel.read(f"{DIST_INFO}/entry_points.txt").decode()
    for script, target in project["scripts"].items():
        assert f"{script} = {target}" in entry_points


def test_sdist_builds_the_same_package(dist: Dist) -> None:
    """The sdist (the wheel was built from it) has the build files, every module and DSDL file, and no tests."""
    prefix = f"cyphal_servo-{VERSION}/"
    with tarfile.open(dist.sdist) as tar:
        names = {m.name.removeprefix(prefix) for m in tar.getmembers() if m.isfile()}
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    assert _payload() <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    assert all(Path(n).parts[0] in (*PACKAGES, "cyphal_servo.egg-info") for n in names if "/" in n)
