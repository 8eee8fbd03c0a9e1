"""Issue 10 item 4: broken register files are a one-line error (exit 2, nothing changed); ``--fresh-registry``.

The real ``servo-node`` and ``sim-plant`` commands are started on each broken file; their stderr must be exactly one
line naming the file and the problem, with no traceback, and the file must be byte-for-byte what it was.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cyphal_common import registry_file
from cyphal_common.errors import ConfigurationError
from servo_node.registers import ServoRegistry
from tests.hostile.harness import logged_servo_node
from tests.procs import BIN, SIM_PLANT, RegisterClient, base_env, popen, read_register, wait_answers, wait_for, y

NODE = 3715


def empty(p: Path) -> None:
    p.write_bytes(b"")


def garbage(p: Path) -> None:
    p.write_bytes(bytes((i * 37 + 11) % 256 for i in range(3000)))


def truncated(p: Path) -> None:
    """A real register file cut in half (a crash during a copy)."""
    reg = ServoRegistry(p, {})
    for i in range(200):
        reg[f"test.filler.{i}"] = f"value {i} " * 20
    reg.shutdown()
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def directory(p: Path) -> None:
    p.mkdir()
    (p / "keep").write_text("x")


def foreign(p: Path) -> None:
    """A valid SQLite database of some other program."""
    db = sqlite3.connect(p)
    db.execute("create table songs (title text)")
    db.commit()
    db.close()


BROKEN: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty": (empty, "is empty (0 bytes)"),
    "garbage": (garbage, "not an SQLite database"),
    "truncated": (truncated, "is damaged"),
    "directory": (directory, "is a directory"),
    "foreign": (foreign, "without a register table"),
}


def snapshot(p: Path) -> object:
    if p.is_dir():
        return ("dir", sorted((q.name, q.read_bytes()) for q in p.iterdir()))
    return ("file", p.read_bytes())


def command(program: str, path: Path, *extra: str) -> list[str]:
    """The command line. ``sim-plant`` runs as ``python -m sim_plant_node`` from this tree (``tests.procs.SIM_PLANT``):
    an installed ``sim-plant`` script follows whichever tree installed the package last."""
    if program == "sim-plant":
        return [*SIM_PLANT, "--registry", str(path), *extra]
    return [str(BIN / program), "run", "--registry", str(path), *extra]


@pytest.mark.parametrize("program", ["servo-node", "sim-plant"])
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_register_file_is_one_line_error(program: str, kind: str, tmp_path: Path) -> None:
    make, words = BROKEN[kind]
    path = tmp_path / "regs.db"
    make(path)
    before = snapshot(path)
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    res = subprocess.run(command(program, path), env=env, capture_output=True, text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert str(path) in lines[0] and words in lines[0] and "--fresh-registry" in lines[0], lines[0]
    assert snapshot(path) == before, "the broken register file was changed"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["regs.db"], "something was written next to it"


@pytest.mark.parametrize("kind", ["garbage", "empty"])
def test_fresh_registry_moves_the_bad_file_aside_and_starts(kind: str, tmp_path: Path) -> None:
    make, _ = BROKEN[kind]
    path = tmp_path / "regs.db"
    make(path)
    before = snapshot(path)
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    with popen(command("servo-node", path, "--fresh-registry"), env) as proc:
        wait_for(
            lambda: proc.poll() is None and read_register(NODE, "servo.profile.jerk", env) == 500.0,
            timeout=120,
            what=f"servo-node to start with defaults (exit code {proc.poll()})",
        )
    aside = [q for q in tmp_path.iterdir() if q.name.startswith("regs.db.bad-")]
    assert len(aside) == 1 and snapshot(aside[0]) == before
    registry_file.check(path)  # The new file is a valid register file.


def test_check_in_process(tmp_path: Path) -> None:
    """The cases the processes cannot show cheaply: fine files, a missing directory, ``.old-`` for valid files."""
    registry_file.check(None)
    registry_file.check(":memory:")
    registry_file.check(tmp_path / "new.db")  # Absent: created later.
    with pytest.raises(ConfigurationError, match="does not exist"):
        registry_file.check(tmp_path / "no" / "such" / "dir.db")
    good = tmp_path / "good.db"
    ServoRegistry(good, {}).shutdown()
    registry_file.check(good)
    moved = registry_file.move_aside(good)
    assert moved is not None and moved.name.startswith("good.db.old-") and not good.exists()
    assert registry_file.move_aside(good) is None


def test_invalid_value_in_environment_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"servo\.profile\.jerk"):
        ServoRegistry(None, {"SERVO__PROFILE__JERK": "-1"})


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("UAVCAN__NODE__ID", "abc", "cannot be converted to natural16[1]"),  # A pycyphal register, made late.
        ("SERVO__PROFILE__JERK", "abc", "cannot be converted to real32[1]"),
        ("SERVO__PROFILE__JERK", "-1", "must be a single value > 0"),  # Was an AttributeError traceback.
        ("UAVCAN__NODE__ID", "-1", "out of range 0..65535"),  # Issue 49: these were OverflowError tracebacks,
        ("UAVCAN__NODE__ID", "1e30", "out of range 0..65535"),
        ("UAVCAN__NODE__ID", "2.5", "not a whole number"),  # this one rounded to 2 silently,
        ("SERVO__STOP__DISENGAGE_IMMEDIATELY", "2", "a bit takes 0 or 1"),  # and these were true.
        ("SERVO__STOP__DISENGAGE_IMMEDIATELY", "nan", "a bit takes 0 or 1"),
    ],
)
def test_unusable_environment_value_is_one_line_error(variable: str, value: str, words: str) -> None:
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    env[variable] = value
    res = subprocess.run(command("servo-node", Path(":memory:")), env=env, capture_output=True, text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert variable in lines[0] and words in lines[0], lines[0]


def test_register_writes_do_not_wait_for_the_disk_and_survive_a_crash(tmp_path: Path) -> None:
    """The register file is in WAL mode with synchronous=NORMAL (no fsync per write, which stalled the event loop
    under disk contention), and a write is still there after the process died without closing anything."""
    path = tmp_path / "servo.db"
    script = f"""
import os
from servo_node.registers import ServoRegistry
reg = ServoRegistry({str(path)!r}, {{}})
reg.declare()
reg["servo.profile.jerk"] = 123.0
os._exit(0)  # No close, no checkpoint: as if killed.
"""
    subprocess.run([str(BIN / "python"), "-c", script], check=True, env=base_env(), timeout=120)
    assert (tmp_path / "servo.db-wal").exists()  # The write is in the log, not yet in the file.
    registry_file.check(path)
    reg = ServoRegistry(path, {})
    try:
        db = sqlite3.connect(path)
        assert db.execute("pragma journal_mode").fetchone()[0] == "wal"
        db.close()
        assert reg["servo.profile.jerk"].floats[0] == 123.0
    finally:
        reg.shutdown()
    moved = registry_file.move_aside(path)  # The log goes with the file it belongs to.
    assert moved is not None and not (tmp_path / "servo.db-wal").exists()


def _fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to the last byte (a file of zeros until ENOSPC)."""
    with (folder / "filler").open("wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 512, 1):
            try:
                while True:
                    f.write(bytes(chunk))
            except OSError as ex:
                assert ex.errno == errno.ENOSPC, ex


@contextmanager
def _small_disk(where: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the block (root), unmounted after it."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "hardening-test", str(where)], check=True,
                   timeout=30)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs to fill (needs root)")
def test_a_full_disk_answers_the_write_refuses_it_and_loses_nothing(tmp_path: Path) -> None:
    """Issue 49 finding 7: a register write on a full disk got no answer and no diagnostic (a traceback only).

    Now it is answered with the value kept, counted in ``refused_writes`` and reported with SQLite's words; the node
    runs on. Killed while the disk is full and started again, the node finds every value it had stored, and once
    there is room a write is stored again."""
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    with _small_disk(tmp_path / "disk") as disk:
        path = disk / "servo.db"
        with logged_servo_node(env, path, tmp_path / "first.log", NODE) as proc:
            reader = RegisterClient(env, NODE, 3993)
            try:
                assert json.loads(y("-j", "r", str(NODE), "servo.profile.jerk", "123", env=env)) == 123.0
                _fill(disk)
                before = int(reader.json("sys.counters")["refused_writes"])
                kept, answers = 123.0, []
                for value in range(301, 351):  # Until the register file must grow (a write into room it has is
                    out = y("-j", "r", str(NODE), "servo.profile.jerk", str(value), env=env)  # really stored).
                    answers.append(json.loads(out))
                    if answers[-1] != float(value):  # yakut prints a one-element array as a number.
                        break
                    kept = float(value)
                assert answers[-1] == kept, answers  # Answered, with the value the node keeps.
                wait_for(lambda: int(reader.json("sys.counters")["refused_writes"]) == before + 1, 10,
                         what="the refusal counted")
                line = [ln for ln in proc.text().splitlines() if "register write refused: servo.profile.jerk" in ln]
                assert line and "database or disk is full" in line[-1] and "old value stays" in line[-1], line
                assert reader.read("servo.profile.jerk") == [kept]
                proc.assert_alive_and_clean()
            finally:
                reader.close()
            proc.proc.kill()  # While the disk is still full: no orderly close, no checkpoint.
            proc.proc.wait(30)
        (disk / "filler").unlink()
        registry_file.check(path)
        with logged_servo_node(env, path, tmp_path / "second.log", NODE) as proc:
            reader = RegisterClient(env, NODE, 3993)
            try:
                assert reader.read("servo.profile.jerk") == [kept]  # Nothing lost, nothing half-written.
                assert json.loads(y("-j", "r", str(NODE), "servo.profile.jerk", "77", env=env)) == 77.0
            finally:
                reader.close()
        reg = ServoRegistry(path, {})
        try:
            assert reg.real("servo.profile.jerk") == 77.0
        finally:
            reg.shutdown()


@pytest.mark.parametrize(
    ("form", "broken"),
    [
        (["--registry", "{f}", "run"], False),  # The form `servo-node --help` prints first: it was dropped.
        (["run", "--registry", "{f}"], False),
        (["--registry", "{f}"], False),
        (["--fresh-registry", "--registry", "{f}", "run"], True),  # --fresh-registry was dropped there too.
    ],
)
def test_the_registry_option_means_the_same_wherever_it_stands(form: list[str], broken: bool, tmp_path: Path) -> None:
    """Issue 49 finding 8: ``servo-node --registry elsewhere/a.db run`` used ``./servo_node.db``. Every form uses
    the file given, and the node says which file it opened (on the bus and in its log)."""
    here, target = tmp_path / "here", tmp_path / "elsewhere" / "a.db"
    here.mkdir()
    target.parent.mkdir()
    if broken:
        garbage(target)
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    log = tmp_path / "node.log"
    with popen([str(BIN / "servo-node"), "-v", *(a.format(f=target) for a in form)], env, cwd=here, log=log) as proc:
        wait_answers(proc, env, NODE, what="servo-node")
        assert not (here / "servo_node.db").exists(), "the default file was used"
        assert len(list(target.parent.glob("a.db.bad-*"))) == (1 if broken else 0)
        registry_file.check(target)  # A register file now (a broken one moved aside with --fresh-registry).
        assert target.exists()
        wait_for(lambda: f"register file {target.resolve()} (created)" in log.read_text(), 10,
                 what="the register file named in the log")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--registry", "a.db", "run", "--registry", "b.db"], "--registry given twice with different files"),
        (["--registry", "a.db", "dsdl-env"], "--registry does not apply to dsdl-env"),
        (["--fresh-registry", "warmup"], "--fresh-registry does not apply to warmup"),
    ],
)
def test_a_registry_option_that_cannot_apply_is_refused(args: list[str], words: str, tmp_path: Path) -> None:
    """Never silently dropped: refused with a usage error (exit 2) before anything starts or is written."""
    res = subprocess.run([str(BIN / "servo-node"), *args], env=base_env(), cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []
