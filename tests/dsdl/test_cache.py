"""The compiled DSDL cache carries its bytecode, whatever PYTHONDONTWRITEBYTECODE says.

Without it, an environment that sets PYTHONDONTWRITEBYTECODE (many container images, this project's CI among
them) compiled every generated module from source again in every process using the DSDL.
"""

from __future__ import annotations

import importlib.util
import marshal
import shutil
import sys
from pathlib import Path

import pytest

from cyphal_common import dsdl


def _tiny_source(root: Path) -> Path:
    src = root / "src"
    (src / "tinyns").mkdir(parents=True)
    (src / "tinyns" / "Thing.1.0.dsdl").write_text("uint8 value\n@sealed\n")
    return src


def _modules(out: Path) -> list[Path]:
    return [p for p in out.rglob("*.py") if "__pycache__" not in p.parts]


def _code_filename(pyc: Path) -> str:
    return str(marshal.loads(pyc.read_bytes()[16:]).co_filename)


@pytest.fixture
def no_bytecode_writes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CYPHAL_SERVO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # What PYTHONDONTWRITEBYTECODE=1 sets.
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_new_cache_has_bytecode_naming_its_final_place(tmp_path: Path, no_bytecode_writes: None) -> None:
    out = dsdl.ensure_compiled(_tiny_source(tmp_path))
    modules = _modules(out)
    assert any(p.name == "Thing_1_0.py" for p in modules)
    for module in modules:
        pyc = Path(importlib.util.cache_from_source(str(module)))
        assert pyc.exists(), module
        assert _code_filename(pyc) == str(module)  # Not the private folder it was compiled in.


def test_a_cache_made_before_bytecode_gets_it_on_first_use(tmp_path: Path, no_bytecode_writes: None) -> None:
    src = _tiny_source(tmp_path)
    out = dsdl.ensure_compiled(src)
    for cache in out.rglob("__pycache__"):
        shutil.rmtree(cache)
    (out / dsdl._BYTECODE_MARKER).unlink()
    assert dsdl.ensure_compiled(src) == out
    assert all(Path(importlib.util.cache_from_source(str(m))).exists() for m in _modules(out))
