"""A fork server for the scenario tests: the ``servo-node``, ``sim-plant`` and ``servo-coord`` commands and the ``y``
(yakut) client started as forks of one process that has imported them, instead of a new interpreter each.

A node's start costs about one second of CPU, three quarters of it importing numba, numpy, pycyphal and the generated
types, and the suite starts well over a hundred nodes. Here each worker runs one server (``python -m
tests.forkserver SOCKET``) that imports what those commands import, then forks once per start: the command then runs
its own ``main`` from the same arguments, environment, working directory and file descriptors as a new process
would, as a real process of its own (its own PID, sockets, signals, exit code). multiprocessing's ``forkserver``
start method rests on the same idea.

The server forks twice and the middle process exits at once, so the command's process is adopted by the test's
process (a child subreaper, :func:`adopt_orphans`): the test waits for it, reads its exit status and signals it as
any :class:`subprocess.Popen` child. What a fork cannot give, a start with other interpreter-level settings (an
environment that differs in anything but registers, another program), runs as a new process (:mod:`tests.procs`).
"""

from __future__ import annotations

import ctypes
import gc
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN_TIME_VARIABLES = ("UAVCAN__", "SERVO__", "SIM__", "SIM_PLANT_", "PYTEST_CURRENT_TEST", "YAKUT_")
"""Environment variables (prefixes) that no import reads: the registers and ``sim-plant``'s fault injection, read
once a command runs, the test that started it and yakut's, read by none. A fork may differ from its server in these
only; numba's, Python's or the DSDL paths are read at import."""

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Job:
    """One start: the command line, its environment, working directory, niceness and SCHED_FIFO priority (0: the
    standard policy), as the test's process would pass them on to a child of its own."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    nice: int
    fifo: int = 0


def _command(argv: Sequence[str]) -> str | None:
    """Which of the imported commands a command line runs (``servo-node``, ``sim-plant``, ``servo-coord`` or ``y``),
    or None (``sim-plant arm-step`` is none of them: it needs scipy, which node processes hide from numba). Imports
    nothing: the test's process asks it for every start."""
    scripts = os.path.dirname(sys.executable)
    if argv[:1] == [os.path.join(scripts, "servo-node")]:
        return "servo-node"
    if argv[:1] == [os.path.join(scripts, "y")]:
        return "y"
    module = argv[2] if argv[:2] == [sys.executable, "-m"] and len(argv) > 2 else None
    if module == "sim_plant_node" and argv[3:4] != ["arm-step"]:
        return "sim-plant"
    return "servo-coord" if module == "servo_node.coord" else None


def _import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without :data:`RUN_TIME_VARIABLES`: the part the imports read, which a fork must share with its
    server."""
    return {k: v for k, v in env.items() if not k.startswith(RUN_TIME_VARIABLES)}


def entry(argv: Sequence[str]) -> tuple[Callable[[], Any], list[str], str]:
    """What a command line of :func:`_command` runs: its ``main``, and the ``sys.argv`` and ``sys.path[0]`` a new
    interpreter would give it."""
    command = _command(argv)
    if command == "servo-node":
        from servo_node.cli import main as servo_node

        return servo_node, list(argv), os.path.dirname(sys.executable)
    if command == "y":
        from yakut import main as yakut

        return yakut, list(argv), os.path.dirname(sys.executable)
    if command == "sim-plant":
        import sim_plant_node

        return sim_plant_node.main, [str(Path(sim_plant_node.__file__).parent / "__main__.py"), *argv[3:]], os.getcwd()
    assert command == "servo-coord", argv
    from servo_node.coord import _cmd

    return _cmd.main, [str(Path(_cmd.__file__).parent / "__main__.py"), *argv[3:]], os.getcwd()


def _preload() -> None:
    """Import what the commands import before they run (numba with scipy hidden, as their entry points do)."""
    from cyphal_common.numba_start import hide_scipy

    hide_scipy()
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    import yakut.main  # noqa: F401
    from numba.core.registry import cpu_target

    import servo_node.cli
    import servo_node.coord._cmd
    import servo_node.node  # noqa: F401
    import sim_plant_node._app
    import sim_plant_node._arm_app
    import sim_plant_node._main
    import sim_plant_node.cia402._app  # noqa: F401

    # numba's typing and target contexts, which it builds when a process loads its first kernel (not the kernels:
    # they may not be compiled yet while the warm-up runs).
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


def _become(job: Job, fds: list[int]) -> Callable[[], Any]:
    """In the command's process: its descriptors 0–2, directory, environment, niceness, scheduling policy and
    default signals, its ``sys.argv`` and ``sys.path[0]``; returns its ``main``."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    if "scipy" in sys.modules and sys.modules["scipy"] is None:  # Hidden for the imports: as in a new interpreter,
        del sys.modules["scipy"]  # the command hides it again if its entry point does.
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, job.nice)
    except OSError:  # Lowering the niceness needs root; the command then runs at the server's.
        pass
    try:  # Before the command starts any thread: its threads inherit the policy, as a new process's would.
        os.sched_setscheduler(0, os.SCHED_FIFO if job.fifo else os.SCHED_OTHER, os.sched_param(job.fifo))
    except OSError:  # Not permitted: the standard policy, as the server's.
        pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    main, sys.argv, sys.path[0] = entry(job.argv)
    return main


def _serve(listener: socket.socket) -> Callable[[], Any]:
    """Answer start requests until this process is a started command's; returns its ``main`` there."""
    while True:
        conn, _ = listener.accept()
        with conn:
            msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
            if not msg:  # A probe of whether this server listens yet.
                continue
            job = Job(**json.loads(msg))
            if _command(job.argv) is None:
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"0")
                continue
            r, w = os.pipe()
            middle = os.fork()
            if middle == 0:
                try:
                    command = os.fork()
                except BaseException:
                    os._exit(1)
                if command == 0:
                    os.close(r)
                    os.close(w)
                    conn.close()
                    listener.close()
                    return _become(job, fds)
                try:
                    os.write(w, b"%d" % command)
                finally:
                    os._exit(0)
            os.close(w)
            with os.fdopen(r, "rb") as reader:
                pid = reader.read()
            os.waitpid(middle, 0)  # The command's process is the test process's once this returns.
            for fd in fds:
                os.close(fd)
            conn.sendall(pid or b"0")


def _main() -> None:
    path = sys.argv[1]
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # Ends with its test process.
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    gc.freeze()  # The imports' objects stay out of the commands' collections: fewer pages copied on write.
    sys.exit(_serve(listener)())  # In a started command's process: its own exit, as its entry point ends it.


def adopt_orphans() -> None:
    """Make this process the parent of every orphan among its descendants (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _fifo() -> int:
    """The calling thread's SCHED_FIFO priority, 0 under any other policy."""
    return os.sched_getparam(0).sched_priority if os.sched_getscheduler(0) == os.SCHED_FIFO else 0


class ForkedProcess(subprocess.Popen[str]):
    """A command the fork server started, as the :class:`subprocess.Popen` of a child of this process (it is one:
    adopted, :func:`adopt_orphans`); ``stdout`` (and ``stderr``) its output pipes if it has them."""

    def __init__(
        self, args: list[str], pid: int, stdout: io.TextIOWrapper | None, stderr: io.TextIOWrapper | None = None
    ) -> None:
        # No super().__init__(): that would start a process. These are the attributes Popen's methods use on POSIX.
        self.args = args
        self.pid = pid
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = None
        self.encoding = None
        self.errors = None
        self.text_mode = True
        self.pipesize = -1
        self._child_created = True
        self._waitpid_lock = threading.Lock()
        self._input = None
        self._communication_started = False
        self._sigint_wait_secs = 0.25
        self._closed_child_pipe_fds = True


class ForkServer:
    """This process's fork server: started at the first :meth:`start`, ended with :meth:`close` (or with this
    process). ``env`` is what every command it forks runs with, registers aside."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = _import_time_env(env)
        self._dir = tempfile.mkdtemp(prefix="forkserver-")
        self._socket = os.path.join(self._dir, "socket")
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def serves(self, args: Sequence[str], env: Mapping[str, str]) -> bool:
        """Whether a fork runs this command line as a new process would: one of the imported commands, and an
        environment that differs from the server's in registers only."""
        return _command(args) is not None and _import_time_env(env) == self.env

    def _ensure_running(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        adopt_orphans()
        log = os.path.join(self._dir, "log")
        with open(log, "w") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.forkserver", self._socket],
                env=self.env,
                cwd=Path(__file__).resolve().parents[1],  # -m: the checkout's root first on sys.path, for ``tests``
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120.0
        while not self._accepts():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start (exit code {self._proc.poll()}):\n"
                                   + Path(log).read_text())
            time.sleep(0.01)

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
            try:
                probe.connect(self._socket)
            except OSError:
                return False
            return True

    def start(
        self, args: list[str], env: Mapping[str, str], cwd: Path | None, stdout_fd: int | None, stderr: bool = False
    ) -> ForkedProcess:
        """Fork the command (:meth:`serves` must hold): stdin /dev/null, stdout into ``stdout_fd`` or a new pipe (the
        process's ``stdout``), stderr with it or, if ``stderr``, into a pipe of its own (``stderr``)."""
        with self._lock:
            self._ensure_running()
            own_stdout = stdout_fd is None
            pipes: list[tuple[int, int]] = []
            if stdout_fd is None:
                pipes.append(os.pipe())
                stdout_fd = pipes[0][1]
            stderr_fd = stdout_fd
            if stderr:
                pipes.append(os.pipe())
                stderr_fd = pipes[-1][1]
            devnull = os.open(os.devnull, os.O_RDONLY)
            job = Job(list(args), dict(env), str(cwd or os.getcwd()), os.getpriority(os.PRIO_PROCESS, 0), _fifo())
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
                    conn.connect(self._socket)
                    socket.send_fds(conn, [json.dumps(job.__dict__).encode()], [devnull, stdout_fd, stderr_fd])
                    pid = int(conn.recv(32) or b"0")
            finally:
                os.close(devnull)
                for _, w in pipes:
                    os.close(w)
            if pid <= 0:
                for r, _ in pipes:
                    os.close(r)
                raise RuntimeError(f"the fork server could not start {args}")
            readers = [io.TextIOWrapper(open(r, "rb")) for r, _ in pipes]
            out = readers.pop(0) if own_stdout else None
            err = readers.pop(0) if stderr else None
            return ForkedProcess(list(args), pid, out, err)

    def close(self) -> None:
        """End the server (the commands it started are the test's children and end as the test ends them)."""
        with self._lock:
            if self._proc is not None:
                self._proc.terminate()
                self._proc.wait(10)
                self._proc = None
            shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    _main()
