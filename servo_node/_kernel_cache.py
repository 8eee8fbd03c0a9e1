"""Keep numba's on-disk kernel cache honest across files.

numba's ``cache=True`` checks only the source file that defines a function, so a kernel that calls (or inlines)
kernels from another file keeps running stale machine code after that other file is edited. This module hashes
every kernel source of the project and, when the hash differs from the one recorded with the cache, deletes
the cached kernels so numba recompiles them. Cheap (a few small files are hashed); entry points call it before
any kernel module is imported (``servo-node``, ``tests/conftest.py``, the bench scripts).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_SOURCES = ("servo_node/otg", "servo_node/control", "servo_node/drive", "sim_plant")
"""Folders of kernel sources, subpackages included (``servo_node/drive/sim``)."""
_SHARED_FILES = ("servo_node/_jit.py", "servo_node/_seqlock.py", "servo_node/errors.py")
"""Single modules outside those folders whose code or constants the kernels compile in."""
_STAMP = ".kernel-sources.sha256"


def _source_folders() -> list[str]:
    """Every folder with kernel sources: those of :data:`_SOURCES` and their subpackages (``drive/sim``)."""
    nested = {str(p.parent.relative_to(_ROOT)) for folder in _SOURCES for p in (_ROOT / folder).rglob("*.py")}
    return [*_SOURCES, *sorted(nested - set(_SOURCES))]


def _cache_dirs() -> list[Path]:
    """Where numba keeps the cache files of our kernel sources (``__pycache__`` or ``NUMBA_CACHE_DIR``)."""
    folders = [*_source_folders(), *sorted({str(Path(f).parent) for f in _SHARED_FILES})]
    custom = os.environ.get("NUMBA_CACHE_DIR")
    if custom:
        # numba mirrors the absolute source folder below NUMBA_CACHE_DIR.
        return [Path(custom) / str(_ROOT / s).lstrip(os.sep) for s in folders]
    return [_ROOT / s / "__pycache__" for s in folders]


def _kernel_sources(folder: str) -> list[Path]:
    """The folder's modules, and those of its subpackages that use numba (a drive backend's subpackage also holds
    its Python half, whose edits must not cost a recompile of every kernel)."""
    top = sorted((_ROOT / folder).glob("*.py"))
    nested = [p for p in sorted((_ROOT / folder).glob("*/**/*.py")) if b"numba" in p.read_bytes()]
    return top + nested


def _digest() -> str:
    h = hashlib.sha256()
    for folder in _SOURCES:
        for path in _kernel_sources(folder):
            h.update(str(path.relative_to(_ROOT)).encode() + b"\0" + path.read_bytes())
    for name in _SHARED_FILES:
        h.update(name.encode() + b"\0" + (_ROOT / name).read_bytes())
    return h.hexdigest()


def invalidate_if_sources_changed() -> bool:
    """Delete the project's cached numba kernels if any kernel source changed since they were cached.

    :returns: True if caches were deleted.
    """
    digest = _digest()
    dirs = _cache_dirs()
    stamp = dirs[0] / _STAMP
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    for d in dirs:
        for pattern in ("*.nbi", "*.nbc"):
            for f in d.glob(pattern):
                f.unlink(missing_ok=True)
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # A read-only install: numba cannot cache there either.
        pass
    return True
