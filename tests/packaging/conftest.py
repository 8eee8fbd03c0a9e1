"""Fixtures for the packaging tests: the sdist and wheel built once per session, and a user's fresh venv.

The build is ``python -m build`` exactly as a user or a release runs it: an sdist from the checkout, then the wheel
from that sdist (so a file missing from the sdist is missing from the wheel too, and no stale ``build/`` folder
of the checkout can leak into it). It runs without build isolation when this venv's setuptools satisfies
``build-system.requires`` (``make test`` installs it through the ``test`` extra), which saves creating an isolated
build environment; otherwise ``build`` makes that environment itself.

The user's venv is created from the base interpreter in a temporary folder outside the repository, and the wheel is
installed into it with its dependencies by that venv's own pip (the machine's pip configuration and cache apply, as
for any user). Every command of that venv runs with a working directory outside the repository, without
``PYTHONPATH`` or any register/DSDL variable of the test session, and with its own DSDL cache folder, so nothing of
the checkout can be imported or reused by accident.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests import isolation

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cyphal_common", "servo_node", "sim_plant", "sim_plant_node")
"""Every top-level package of the distribution."""
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
VERSION: str = PYPROJECT["project"]["version"]
"""The one place the version is written."""

_SESSION_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CYPHAL_PATH", "PYCYPHAL_PATH", "NUMBA_CACHE_DIR")
_SESSION_PREFIXES = ("UAVCAN__", "SERVO__", "SIM__", "YAKUT_", "CYPHAL_SERVO_")


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: this one without anything that points at the checkout or its caches."""
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_VARIABLES and not k.startswith(_SESSION_PREFIXES)}
    env.update(extra)
    return env


def _setuptools_satisfies_build_system() -> bool:
    """True if this venv's setuptools is at least the version ``build-system.requires`` asks for."""
    (req,) = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    wanted = int(req.split(">=")[1].split(".")[0])
    try:
        have = int(importlib.metadata.version("setuptools").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return False
    return have >= wanted


@dataclasses.dataclass(frozen=True)
class Dist:
    """The built distribution files."""

    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """``python -m build`` of the checkout: the sdist, then the wheel built from it (once per session)."""
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "build", "--outdir", str(out)]
    if _setuptools_satisfies_build_system():
        cmd.append("--no-isolation")
    res = subprocess.run([*cmd, str(REPO_ROOT)], capture_output=True, text=True, timeout=600, cwd=out, env=user_env())
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dist(sdist, wheel)


@dataclasses.dataclass(frozen=True)
class Installed:
    """A fresh venv outside the repository with the wheel installed, and a working directory to run it in."""

    venv: Path
    workdir: Path
    env: Mapping[str, str]
    """What every command of the venv runs with (see :func:`user_env`), including its own DSDL cache."""

    def bin(self, name: str) -> str:
        """A console script of the venv."""
        return str(self.venv / "bin" / name)

    def run(self, *args: str, timeout: float = 300.0) -> str:
        """Run a command of the venv in the working directory; returns stdout, fails with its output."""
        res = subprocess.run(
            [self.bin(args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
            env=dict(self.env),
        )
        assert res.returncode == 0, f"{' '.join(args)} -> {res.returncode}\n{res.stdout}\n{res.stderr}"
        return res.stdout

    def dsdl_env(self) -> dict[str, str]:
        """What ``servo-node dsdl-env`` prints, as a mapping (the README's ``eval "$(servo-node dsdl-env)"``)."""
        exports: dict[str, str] = {}
        for line in self.run("servo-node", "dsdl-env").splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            exports[key] = value
        return exports


@pytest.fixture(scope="module")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel installed with its dependencies into a new venv by that venv's pip, as a user would."""
    root = tmp_path_factory.mktemp("user")
    assert not root.resolve().is_relative_to(REPO_ROOT)
    venv, workdir = root / "venv", root / "work"
    workdir.mkdir()
    env = user_env(CYPHAL_SERVO_CACHE=str(root / "cache"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, cwd=workdir, env=env)
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", str(dist.wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=workdir,
        env=env,
        preexec_fn=isolation.on_host(),  # pip reaches the package index from the machine's own network
    )
    assert res.returncode == 0, f"pip install of the wheel failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    inst = Installed(venv, workdir, env)
    # The packages and their DSDL come from the venv, never from the checkout.
    where = json.loads(
        inst.run(
            "python",
            "-c",
            "import json, importlib.metadata as m, servo_node, sim_plant, sim_plant_node, cyphal_common.dsdl as d;"
            "print(json.dumps([m.version('cyphal-servo'), str(d.dsdl_dir()),"
            " *[p.__file__ for p in (servo_node, sim_plant, sim_plant_node, d)]]))",
        )
    )
    assert where[0] == VERSION
    for path in where[1:]:
        assert Path(path).is_relative_to(venv) and not Path(path).is_relative_to(REPO_ROOT), path
    return inst
