"""Cached numba kernels are dropped when any kernel source changes (numba itself only checks the defining file)."""

from pathlib import Path

import pytest

from servo_node import _kernel_cache


def test_stale_kernels_are_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_kernel_cache, "_ROOT", tmp_path)
    monkeypatch.setattr(_kernel_cache, "_SOURCES", ("a", "b"))
    monkeypatch.setattr(_kernel_cache, "_SHARED_FILES", ("c/shared.py",))
    for folder in ("a", "b", "c"):
        (tmp_path / folder / "__pycache__").mkdir(parents=True)
        (tmp_path / folder / "k.py").write_text("x = 1\n")
    (tmp_path / "c" / "shared.py").write_text("CODE = 1\n")
    cached = tmp_path / "b" / "__pycache__" / "k.f-1.py311.nbi"
    cached.write_text("")
    assert _kernel_cache.invalidate_if_sources_changed()  # No stamp yet: unknown provenance.
    assert not cached.exists()
    cached.write_text("")
    assert not _kernel_cache.invalidate_if_sources_changed()
    assert cached.exists()
    (tmp_path / "a" / "k.py").write_text("x = 2\n")  # Another file than the cached one changes.
    assert _kernel_cache.invalidate_if_sources_changed()
    assert not cached.exists()
    cached.write_text("")
    (tmp_path / "c" / "shared.py").write_text("CODE = 2\n")  # A shared module compiled into the kernels.
    assert _kernel_cache.invalidate_if_sources_changed()
    assert not cached.exists()


def test_kernels_in_subpackages_are_covered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A drive backend's kernels live in a subpackage (``drive/sim``): an edit there drops every cached kernel, and
    that subpackage's own cache is dropped; an edit of a module there without numba (a Python half) drops none."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_kernel_cache, "_ROOT", tmp_path)
    monkeypatch.setattr(_kernel_cache, "_SOURCES", ("a",))
    monkeypatch.setattr(_kernel_cache, "_SHARED_FILES", ())
    for folder in ("a", "a/sub"):
        (tmp_path / folder / "__pycache__").mkdir(parents=True)
        (tmp_path / folder / "k.py").write_text("import numba\nx = 1\n")
    (tmp_path / "a" / "sub" / "io.py").write_text("x = 1\n")  # A backend's Python half: no kernels.
    top = tmp_path / "a" / "__pycache__" / "k.f-1.py311.nbi"
    nested = tmp_path / "a" / "sub" / "__pycache__" / "k.f-1.py311.nbi"
    _kernel_cache.invalidate_if_sources_changed()
    top.write_text("")
    nested.write_text("")
    (tmp_path / "a" / "sub" / "io.py").write_text("x = 2\n")
    assert not _kernel_cache.invalidate_if_sources_changed()
    (tmp_path / "a" / "sub" / "k.py").write_text("import numba\nx = 2\n")
    assert _kernel_cache.invalidate_if_sources_changed()
    assert not top.exists() and not nested.exists()
