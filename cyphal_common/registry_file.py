"""The register file of ``servo-node`` and ``sim-plant``: checked before pycyphal opens it, moved aside on request.

Why: pycyphal's ``StaticBackend`` opens the file with ``sqlite3.connect`` and writes a table into it at once. A
0-byte file (what a crash during a copy or a full disk leaves behind) is a valid empty SQLite database to it, so the
node started silently with defaults and the user's values were gone without a word; a truncated or garbage file
died with a raw ``sqlite3.DatabaseError`` traceback and a directory with ``OperationalError``.

:func:`check` opens the file **read-only** and raises :class:`~cyphal_common.errors.ConfigurationError` with one line
naming the file and what is wrong — nothing is written, nothing overwritten. A file that does not exist yet is
fine (it is created). :func:`move_aside` renames an existing file to ``FILE.bad-<timestamp>`` (or
``FILE.old-<timestamp>`` when it was a valid register file): the explicit way to start fresh
(``--fresh-registry``). Only ``sqlite3`` and the standard library are used, so both commands can share it.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

from .errors import ConfigurationError

__all__ = ["FRESH_HINT", "check", "move_aside", "prepare", "tune"]

_logger = logging.getLogger(__name__)

FRESH_HINT = "start with --fresh-registry to move it aside and use defaults"
"""How to get out of a refused register file; part of every refusal message."""

_TABLE_COLUMNS = {"name", "value", "mutable"}

_WAL_FILES = ("-wal", "-shm")
"""SQLite's companions of a register file in write-ahead-log mode (:func:`tune`)."""


def check(path: str | Path | None) -> None:
    """Raise :class:`ConfigurationError` unless ``path`` is None/``:memory:``, absent, or a readable register file."""
    if path is None or str(path).strip() in ("", ":memory:"):
        return
    p = Path(path)
    problem = _problem(p)
    if problem is not None:
        raise ConfigurationError(f"register file {str(p)!r}: {problem}; nothing was changed; {FRESH_HINT}")


def _problem(p: Path) -> str | None:
    """What is wrong with the file at ``p`` as a register file, or None."""
    if not p.exists():
        if p.is_symlink():
            return "is a dangling symbolic link"
        if not p.parent.is_dir():
            return f"its directory {str(p.parent)!r} does not exist"
        return None
    if p.is_dir():
        return "is a directory, not a register file"
    if not p.is_file():
        return "is not a regular file"
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(16)
    except OSError as ex:
        return f"cannot be read ({ex.strerror or ex})"
    if size == 0:
        return "is empty (0 bytes), not a register file (truncated?); refusing to start with defaults over it"
    if head != b"SQLite format 3\x00":
        return f"is not a register file (not an SQLite database; {size} bytes)"
    try:
        # Without a write-ahead log beside it the file is complete: opened immutable, SQLite writes nothing next
        # to it (no -shm/-wal). With one (a process that died), the log's content is part of the file.
        logged = p.with_name(p.name + "-wal").exists()
        db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro{'' if logged else '&immutable=1'}", uri=True)
        try:
            bad = [row[0] for row in db.execute("pragma quick_check") if row[0] != "ok"]
            if bad:
                return f"is damaged (SQLite: {bad[0]})"
            cols = {row[1] for row in db.execute("pragma table_info(register)")}
            if not _TABLE_COLUMNS <= cols:
                return "is an SQLite database without a register table (another program's file?)"
            db.execute("select name, value, mutable from register").fetchall()
        finally:
            db.close()
    except sqlite3.Error as ex:
        return f"is damaged or unreadable (SQLite: {ex})"
    return None


def tune(db: sqlite3.Connection) -> None:
    """Write-ahead log with ``synchronous=NORMAL``: a register write commits without waiting for the disk.

    Why: pycyphal commits every register write on the event loop, and the default rollback journal fsyncs each
    commit; under disk contention one fsync took seconds, and the node's heartbeat stopped meanwhile (fuzz
    campaign finding). With the WAL a commit is durable against a crash of the process at once, and against a
    power loss from the next checkpoint on; the file is never left inconsistent.
    """
    db.execute("pragma journal_mode=wal")
    db.execute("pragma synchronous=normal")


def move_aside(path: str | Path) -> Path | None:
    """Rename an existing file (or directory) to ``<path>.bad-<timestamp>`` / ``.old-<timestamp>``; the new path.

    Returns None if there was nothing at ``path``. ``.old-`` marks a file that was a valid register file.
    """
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return None
    kind = "old" if _problem(p) is None else "bad"
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = p.with_name(f"{p.name}.{kind}-{stamp}")
    n = 1
    while target.exists():
        target = p.with_name(f"{p.name}.{kind}-{stamp}-{n}")
        n += 1
    try:
        p.rename(target)
        for suffix in _WAL_FILES:  # The write-ahead log belongs to the file it was moved with.
            side = p.with_name(p.name + suffix)
            if side.exists():
                side.rename(target.with_name(target.name + suffix))
    except OSError as ex:
        raise ConfigurationError(
            f"register file {str(p)!r}: cannot move it aside to {str(target)!r} ({ex.strerror or ex})"
        ) from None
    return target


def prepare(path: str | Path | None, *, fresh: bool, program: str) -> None:
    """What both commands do before opening their registry: move aside if ``fresh``, then :func:`check`.

    Moving aside is announced on the log (WARNING), since it changes what the node starts with.
    """
    if path is None or str(path).strip() in ("", ":memory:"):
        return
    if fresh:
        moved = move_aside(path)
        if moved is not None:
            _logger.warning(
                "%s: register file %r moved aside to %r; starting with defaults", program, str(path), str(moved)
            )
    check(path)
