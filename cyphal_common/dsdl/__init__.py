"""The project's DSDL (the root namespace folders beside this file) and its compilation into an importable cache.

This folder holds our own ``uavcan``, ``zubax`` and ``reg`` (UDRAL) definitions, bit-compatible with the public
ones (``tests/dsdl`` checks that). Nothing here runs at import: entry points (the ``servo-node`` and
``sim-plant`` commands, ``tests/conftest.py``, the bench scripts) call :func:`ensure_compiled` before they import
generated types or ``pycyphal.application`` (which itself imports the ``uavcan`` namespace).

pycyphal's own import hook compiles a namespace only if its output folder is missing, so it never notices edits.
Here the output folder name carries a hash of every ``.dsdl`` file (and the compiler versions), so an edit
selects a new folder and triggers a recompile; an unchanged tree reuses the cache (a warm start costs no compile).

Environment variables:

==========================  ==============================================================================
``CYPHAL_SERVO_DSDL``       DSDL source folder holding root namespace folders (default: this folder).
``CYPHAL_SERVO_CACHE``      Cache root (default: ``$XDG_CACHE_HOME/cyphal-servo`` or ``~/.cache/cyphal-servo``).
==========================  ==============================================================================

``servo-node dsdl-env`` prints ``CYPHAL_PATH`` and ``PYCYPHAL_PATH`` exports so that yakut uses the same
compiled output.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path

DEFAULT_DSDL_DIR = Path(__file__).resolve().parent
"""The DSDL tree shipped with the package: the root namespace folders beside this file."""

_COMPLETE_MARKER = ".complete"
_BYTECODE_MARKER = ".bytecode"
"""Present once the compiled packages' bytecode is written (caches made before it existed get it on first use)."""


def dsdl_dir() -> Path:
    """The DSDL source folder: ``CYPHAL_SERVO_DSDL`` or :data:`DEFAULT_DSDL_DIR`."""
    return Path(os.environ.get("CYPHAL_SERVO_DSDL", str(DEFAULT_DSDL_DIR))).resolve()


def root_namespace_dirs(source: Path | None = None) -> list[Path]:
    """Root namespace folders (``uavcan``, ``zubax``, ``reg``, …) below the source folder.

    Only folders whose name is an identifier not starting with ``_`` or ``.`` and that hold ``.dsdl`` files count:
    the default source folder is also a Python package, so ``__pycache__`` and the like sit beside the namespaces.
    """
    src = source or dsdl_dir()
    return sorted(
        p
        for p in src.iterdir()
        if p.is_dir() and p.name.isidentifier() and not p.name.startswith("_") and any(p.rglob("*.dsdl"))
    )


def cache_root() -> Path:
    """Where compiled trees live."""
    env = os.environ.get("CYPHAL_SERVO_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cyphal-servo"


def content_digest(source: Path | None = None) -> str:
    """SHA-256 over every DSDL file's relative path and bytes, plus the code generator versions."""
    src = source or dsdl_dir()
    h = hashlib.sha256()
    for dist in ("pycyphal", "nunavut"):
        h.update(f"{dist}={importlib.metadata.version(dist)}\n".encode())
    for path in sorted(src.rglob("*.dsdl")):
        h.update(str(path.relative_to(src)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def output_dir(source: Path | None = None) -> Path:
    """The compiled tree for the current content of the source folder."""
    return cache_root() / f"dsdl-{content_digest(source)}"


def ensure_compiled(source: Path | None = None) -> Path:
    """Compile if the cache lacks this content, put the output first on ``sys.path``, and return it.

    Safe against concurrent callers: each compiles into a private folder and renames it into place;
    the loser of the race discards its copy.
    """
    out = output_dir(source)
    if not (out / _COMPLETE_MARKER).exists():
        import pycyphal.dsdl  # Deferred: importing the compiler costs time a warm start does not need.

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
        try:
            pycyphal.dsdl.compile_all(root_namespace_dirs(source), tmp)
            _write_bytecode(tmp, out)
            (tmp / _COMPLETE_MARKER).write_text("ok\n")
            try:
                tmp.rename(out)
            except OSError:
                if not (out / _COMPLETE_MARKER).exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    elif not (out / _BYTECODE_MARKER).exists():
        _write_bytecode(out, out)
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return out


def _write_bytecode(folder: Path, final: Path) -> None:
    """Byte-compile the generated packages in ``folder`` (tracebacks naming them under ``final``, where they end up).

    Written explicitly because PYTHONDONTWRITEBYTECODE (set in many container images) stops Python from caching
    them on import: every process using the DSDL — each node, each ``y`` call — then compiled about a hundred
    modules from source again (0.1 s of CPU per start). Files are replaced atomically, so concurrent callers are
    safe."""
    import compileall

    compileall.compile_dir(folder, ddir=final, quiet=2)
    (folder / _BYTECODE_MARKER).write_text("ok\n")


def shell_exports(source: Path | None = None) -> str:
    """Shell lines that make yakut (and any pycyphal program) use the same DSDL and compiled cache."""
    src = source or dsdl_dir()
    out = ensure_compiled(src)
    return f"export CYPHAL_PATH={src}\nexport PYCYPHAL_PATH={out}\n"
