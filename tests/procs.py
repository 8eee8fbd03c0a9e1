"""Real processes for scenario tests: the ``servo-node`` and ``sim-plant`` commands, and the ``y`` (yakut) CLI.

Everything talks over UDP on 127.0.0.1 unless a test passes other ``UAVCAN__*`` variables. Our own commands and
yakut start as forks of this process's fork server where they can (:func:`start`, :func:`run`,
:mod:`tests.forkserver`), everything else as a new interpreter.
"""

from __future__ import annotations

import atexit
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cyphal_common import dsdl
from cyphal_common.tasks import cancel_and_wait
from tests.forkserver import ForkServer

BIN = Path(sys.executable).parent
SIM_PLANT = [sys.executable, "-m", "sim_plant_node"]
"""The ``sim-plant`` command of the tree under test (an installed console script may point at another tree)."""

_CLIENT_POOL = itertools.cycle((111, 112, 113, 114, 115, 116, 122))
"""Client node-IDs of successive ``y`` calls. Every yakut process starts its transfer-IDs at 0, and a server drops a
transfer whose (source, transfer-ID) it saw within its 2 s transfer-ID timeout: two calls in a row from one
node-ID would lose the second. Cycling through seven IDs keeps each one's calls apart (all valid on CAN too)."""


def dsdl_env() -> dict[str, str]:
    """CYPHAL_PATH/PYCYPHAL_PATH so yakut sees exactly the project's compiled DSDL."""
    return {"CYPHAL_PATH": str(dsdl.dsdl_dir()), "PYCYPHAL_PATH": str(dsdl.ensure_compiled())}


def base_env(**registers: str) -> dict[str, str]:
    """The parent environment without stray register variables, plus DSDL paths and the given registers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "SERVO__", "SIM__", "YAKUT_"))}
    env.update(dsdl_env())
    env.setdefault("UAVCAN__UDP__IFACE", "127.0.0.1")
    env.update(registers)
    return env


Y_RESPONSE_S = 10.0
"""The answer deadline of a ``y r``/``cmd``/``call`` (yakut's own default, 1 s, is shorter than a starved host takes:
ci29 saw a refused register write time out after it; the node answers every request, so a longer wait costs nothing
when it does)."""


def _with_response_timeout(args: tuple[str, ...]) -> list[str]:
    """``args`` with ``-T`` :data:`Y_RESPONSE_S` after a service verb that has no ``-T``/``--timeout`` of its own."""
    out = list(args)
    verb = next((k for k, a in enumerate(out) if not a.startswith("-")), None)
    if verb is None or out[verb] not in ("r", "cmd", "call") or {"-T", "--timeout"} & set(out[verb + 1:]):
        return out
    return [*out[: verb + 1], "-T", f"{Y_RESPONSE_S:g}", *out[verb + 1:]]


def y(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    check: bool = True,
    client_id: int | None = None,
) -> str:
    """Run the real ``y`` (yakut) command as a user types it; returns stdout.

    The transport comes from ``env`` (default :func:`base_env`); the node-ID is a client's own (``client_id``, or
    the next of :data:`_CLIENT_POOL`). A service request (``r``, ``cmd``, ``call``) waits :data:`Y_RESPONSE_S` for
    its answer unless the arguments say otherwise, as a user on a busy machine would ask (``-T``).
    """
    e = {k: v for k, v in (env if env is not None else base_env()).items() if not k.startswith(("SERVO__", "SIM__"))}
    e["UAVCAN__NODE__ID"] = str(client_id if client_id is not None else next(_CLIENT_POOL))
    res = run([str(BIN / "y"), *_with_response_timeout(args)], e, timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"y {' '.join(args)} -> {res.returncode}\nstdout: {res.stdout}\nstderr: {res.stderr}")
    return res.stdout


def run(args: list[str], env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a command to its end, its stdout and stderr captured apart (:func:`subprocess.run`); a fork of the fork
    server where it serves the command (:func:`start`). Past ``timeout`` it is killed and TimeoutExpired raised."""
    server = fork_server()
    if not server.serves(args, env):
        return subprocess.run(args, env=dict(env), capture_output=True, text=True, timeout=timeout)
    proc = server.start(args, env, None, None, stderr=True)
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def read_register(node_id: int, name: str, env: Mapping[str, str] | None = None) -> Any:
    """Register value via ``y r`` (JSON output), as Python data."""
    out = y("-j", "r", str(node_id), name, env=env)
    return json.loads(out)


def status(node_id: int, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The node's ``sys.status`` register, parsed."""
    value = read_register(node_id, "sys.status", env)
    return dict(json.loads(value))


_fork_server: ForkServer | None = None


def fork_server() -> ForkServer:
    """This process's fork server (:mod:`tests.forkserver`), made at the first use; it forks with the environment
    of :func:`base_env`, registers aside."""
    global _fork_server
    if _fork_server is None:
        _fork_server = ForkServer(base_env())
        atexit.register(_fork_server.close)
    return _fork_server


def start(
    args: list[str], env: Mapping[str, str], cwd: Path | None = None, log: Path | None = None
) -> subprocess.Popen[str]:
    """Start a background process: no stdin; stdout and stderr together into a pipe, or into the file ``log``
    (never a pipe nobody reads, which would block a long-running process once it fills).

    ``servo-node``, ``sim-plant``, ``servo-coord`` and ``y`` with the tests' usual environment are forks of this
    process's fork server (:mod:`tests.forkserver`: the same process at a quarter of the CPU of a new interpreter's
    start, a fifth for yakut); any other command, or one with another environment, is a new process."""
    out: Any = subprocess.PIPE if log is None else log.open("w")
    try:
        server = fork_server()
        if server.serves(args, env):
            return server.start(args, env, cwd, None if log is None else out.fileno())
        return subprocess.Popen(
            args, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    finally:
        if log is not None:
            out.close()  # The child holds its own descriptor.


class Processes:
    """The background processes of one scenario: started with :meth:`start`, all ended together when the block
    exits (SIGINT to every one first, then each waited for, SIGKILL after 10 s).

    One by one, their shutdowns would add up: a node's safe stop and pycyphal closing its sockets take 0.5–0.9 s
    (each UDP input session's reader thread polls ``select`` every 0.1 s, and they are joined in turn).
    """

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[str]] = []

    def start(
        self, args: list[str], env: Mapping[str, str], cwd: Path | None = None, log: Path | None = None
    ) -> subprocess.Popen[str]:
        """Start a background process (:func:`start`) that ends with the block."""
        proc = start(args, env, cwd, log)
        self._procs.append(proc)
        return proc

    def servo_nodes(
        self, *nodes: tuple[Mapping[str, str], Path, int], logs: Mapping[int, Path] | None = None
    ) -> list[subprocess.Popen[str]]:
        """``servo-node run`` processes, one per (environment, register file, node-ID), started at once and
        returned once every one is up (:func:`wait_answers`), then under real-time scheduling where the OS permits
        (:func:`realtime`): the suite runs on several workers, and a servo's verdicts must not depend on what the
        other workers compute meanwhile. ``logs``: the output file of a node-ID (else a pipe)."""
        procs = [
            self.start([str(BIN / "servo-node"), "run", "--registry", str(reg)], env, log=(logs or {}).get(node_id))
            for env, reg, node_id in nodes
        ]
        for proc, (env, _, node_id) in zip(procs, nodes, strict=True):
            wait_answers(proc, env, node_id, what="servo-node")
        for proc in procs:
            realtime(proc.pid)
        return procs

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *_: object) -> None:
        stop_all(reversed(self._procs))


@contextmanager
def popen(
    args: list[str], env: Mapping[str, str], cwd: Path | None = None, log: Path | None = None
) -> Iterator[subprocess.Popen[str]]:
    """A background process (:func:`start`), always ended (SIGINT, then SIGKILL) when the block exits."""
    with Processes() as group:
        yield group.start(args, env, cwd, log)


def stop(proc: subprocess.Popen[Any], timeout: float = 10.0, signum: int = signal.SIGINT) -> str:
    """End a process (``signum``, then SIGKILL after ``timeout``) and return what it printed into its pipe."""
    return stop_all([proc], timeout, signum)[0]


def stop_all(procs: Iterable[subprocess.Popen[Any]], timeout: float = 10.0, signum: int = signal.SIGINT) -> list[str]:
    """End processes together: ``signum`` to every running one, then each waited for (SIGKILL to any still running
    ``timeout`` seconds after the signal); returns what each printed into its pipe."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signum)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [proc.stdout.read() if proc.stdout else "" for proc in procs]


def wait_for(predicate: Any, timeout: float, interval: float = 0.2, what: str | Callable[[], str] = "condition") -> Any:
    """Poll until ``predicate()`` is truthy (returns it) or fail after ``timeout`` seconds; ``what`` names it in the
    failure (a callable: called then, to tell the state at the timeout rather than at the start of the wait)."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    value = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (AssertionError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError, TypeError) as ex:
            last_exc = ex
        time.sleep(interval)
    if callable(what):
        try:
            what = what()
        except Exception as ex:  # The description must not hide the timeout.
            what = f"(its description failed: {type(ex).__name__}: {ex})"
    raise AssertionError(f"timed out waiting for {what}; last value: {value!r}, last error: {last_exc}")


ARRIVAL_LATE_S = 1.0
"""How long after its plan's end a joint on a real-time bus scenario may settle and still count as arrived [second]:
an arrival verdict, generous for a loaded host; how closely it tracked is ``bench/remote.py``'s figure."""


def settled_on_time(motion: Mapping[str, Any], late_s: float) -> bool:
    """``sys.motion``'s ``settled`` is not before the plan's end ``T`` and at most ``late_s`` after it.

    The report keeps ``T`` to 7 significant digits but ``settled`` to as few as 2 where the register string is full
    (``servo_node.axis._reports.motion_view``), so "not before" allows the rounding of the digits it shows: a joint
    settled 0.2 ms after a 0.8833 s plan reads 0.88."""
    plan_t, settled = float(motion["plan"]["T"]), float(motion["settled"])
    shown = repr(abs(settled)).split("e")[0].replace(".", "").lstrip("0") or "0"
    half_digit = 0.5 * 10 ** (math.floor(math.log10(abs(settled))) - len(shown) + 1) if settled else 0.0
    return plan_t - half_digit <= settled <= plan_t + late_s


@contextmanager
def servo_node(
    env: Mapping[str, str], registry: Path, node_id: int, log: Path | None = None
) -> Iterator[subprocess.Popen[str]]:
    """A ``servo-node run`` process (its output into ``log`` if given), returned once it is up, under real-time
    scheduling where the OS permits (as :meth:`Processes.servo_nodes`)."""
    with Processes() as group:
        yield group.servo_nodes((env, registry, node_id), logs={node_id: log} if log else None)[0]


POLL_TIMEOUT_S = 0.25
"""Response deadline of one poll while a process starts: it answers within milliseconds once it listens."""


def wait_answers(
    proc: subprocess.Popen[str], env: Mapping[str, str], node_id: int, what: str, timeout: float = 120
) -> None:
    """Until the process ``proc`` is up as node ``node_id``: its heartbeat says OPERATIONAL (a servo node answers
    register reads already while its axes start, INITIALIZATION) and it answers a read of ``uavcan.node.id``; fails
    if it exits first.

    Polled in this process (:class:`RegisterClient`): a ``y r`` per poll would start a Python process every few
    hundred milliseconds on a machine busy starting the very node it waits for. Each poll asks once with a short
    deadline: a request sent before the node listens is never answered, and the read's usual 2 s deadline (asked
    twice) would add up to 4 s to every start.
    """
    client = RegisterClient(
        env,
        node_id,
        client_node_id=next(c for c in _CLIENT_POOL if c != node_id),
        response_timeout=POLL_TIMEOUT_S,
        watch_heartbeat=True,
    )
    try:
        wait_for(
            lambda: proc.poll() is None
            and client.operational
            and client.read("uavcan.node.id", attempts=1) == [node_id],
            timeout=timeout,
            interval=0.05,
            what=f"{what} {node_id} to answer (exit code {proc.poll()})",
        )
    finally:
        client.close()


realtime_permitted = True
"""False while a test runs whose verdicts do not need its processes to keep time (set per test by
``tests/conftest.py``): its nodes (a fuzzed or flooded one among them) must not compete at real-time priority with
the nodes of the timing scenario running beside it."""

NOT_REALTIME_LATE_S = 0.5
"""How late a node that does not run real-time (a ``bus-late`` scenario's) may measure its own deadman: its loop
thread waits for a core like any other beside the timing stream (CI measured 0.618 s for a 0.5 s deadman once).
Never early; the deadman's timing itself is the timing stream's verdict (``tests/system/test_closed_loop.py``)."""


SCENARIO_PRIORITY = 5
"""The SCHED_FIFO priority of a timing scenario's own process and of what it starts (a coordinator, a scope, yakut,
a drive), below the servo nodes' (:func:`realtime`): as a deployment runs a machine's motion processes, so that a
busy host (the suite's other workers, a user's other work) cannot starve the scenario's verdicts."""


def scenario_realtime(on: bool) -> bool:
    """The calling thread, the threads it starts and the processes it starts from now on (forks of the fork server
    included) under SCHED_FIFO :data:`SCENARIO_PRIORITY` (``on``), or back under the standard policy; False if not
    permitted (no root): everything then runs under the standard policy."""
    try:
        policy, priority = (os.SCHED_FIFO, SCENARIO_PRIORITY) if on else (os.SCHED_OTHER, 0)
        os.sched_setscheduler(0, policy, os.sched_param(priority))
    except OSError:
        return False
    return True


def realtime(pid: int, priority: int = 10) -> bool:
    """Put every thread of process ``pid`` under SCHED_FIFO ``priority`` where the OS permits (root or
    CAP_SYS_NICE), as a real-time deployment runs a servo and its drive; False if not permitted (or not
    :data:`realtime_permitted` for the running test).

    For tests whose verdict needs the processes to run on time on a loaded machine: call it once they are up
    (their kernels compiled), since a FIFO thread compiling would hold a core.
    """
    if not realtime_permitted:
        return False
    ok = True
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setscheduler(int(task.name), os.SCHED_FIFO, os.sched_param(priority))
        except (PermissionError, ProcessLookupError, OSError):
            ok = False
    return ok


class BusThread:
    """A pycyphal presentation on its own asyncio loop in a thread, for observing the bus from a synchronous test.

    Subclasses open ``self._presentation`` through :meth:`_run`; :meth:`close` closes it and ends the thread.
    """

    def __init__(self, name: str) -> None:
        import asyncio
        import threading

        self._presentation: Any = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def _run(self, coro: Any, timeout: float = 30.0) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        """Close the presentation, cancel what runs on the loop, and stop the thread."""
        import asyncio

        async def shutdown() -> None:
            if self._presentation is not None:
                self._presentation.close()
            await cancel_and_wait(t for t in asyncio.all_tasks() if t is not asyncio.current_task())

        self._run(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def _access_client(presentation: Any, server_node_id: int) -> Any:
    """A ``uavcan.register.Access`` client of ``server_node_id`` on ``presentation`` (call on its loop's thread)."""
    import uavcan.register

    return presentation.make_client_with_fixed_service_id(uavcan.register.Access_1_0, server_node_id)


class RegisterClient(BusThread):
    """Reads registers of a node over the bus from inside the test process (pycyphal, no process per read).

    Polling with ``y r`` starts a Python process per read, which on a 2-core machine starves the very processes
    under test; observation goes through this client, while commands stay with the real yakut CLI.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        server_node_id: int,
        client_node_id: int = 127,
        response_timeout: float = 2.0,
        watch_heartbeat: bool = False,
        thread_name: str = "register-client",
    ) -> None:
        super().__init__(thread_name)
        self._server = server_node_id
        self.operational = False
        """Whether the node's last heartbeat said OPERATIONAL (kept only with ``watch_heartbeat``)."""
        self.initializations = 0
        """Heartbeats of the node that said INITIALIZATION (a start or RESTART began; only with ``watch_heartbeat``)."""
        self._run(self._enter())
        self._presentation, self._client = self._run(self._open(env, client_node_id, watch_heartbeat))
        self._client.response_timeout = response_timeout

    def of(self, server_node_id: int) -> RegisterClient:
        """A reader of another node through this client's transport and thread, closed with this client.

        Over udpmc CAN every transport in this process receives every frame on the bus: a client per node multiplied
        that work, and with three nodes publishing dynamics at 500 Hz the test process fell behind and lost the
        frames of register responses."""
        import copy

        async def make() -> Any:
            client = _access_client(self._presentation, server_node_id)
            client.response_timeout = self._client.response_timeout
            return client

        async def close_port() -> None:
            view._client.close()

        def close() -> None:  # The transport stays this client's: a view closes its port only, if still open.
            if not self._loop.is_closed():
                self._run(close_port())

        view = copy.copy(self)
        view._server, view._client = server_node_id, self._run(make())
        view.close = close  # type: ignore[method-assign]
        return view

    async def _enter(self) -> None:
        """Runs on the client's thread before its transport opens (a subclass joins another network there)."""

    async def _open(self, env: Mapping[str, str], client_node_id: int, watch_heartbeat: bool) -> tuple[Any, Any]:
        import pycyphal.presentation
        import uavcan.node

        from cyphal_common.transport import make_transport

        regs: dict[str, Any] = {"uavcan.node.id": client_node_id}
        if "UAVCAN__CAN__IFACE" in env:
            regs.update({"uavcan.can.iface": env["UAVCAN__CAN__IFACE"], "uavcan.can.mtu": int(env["UAVCAN__CAN__MTU"])})
        else:
            regs["uavcan.udp.iface"] = env["UAVCAN__UDP__IFACE"]
        presentation = pycyphal.presentation.Presentation(make_transport(regs))
        client = _access_client(presentation, self._server)
        if watch_heartbeat:

            async def on_heartbeat(msg: uavcan.node.Heartbeat_1, meta: pycyphal.transport.TransferFrom) -> None:
                if meta.source_node_id == self._server:
                    self.operational = msg.mode.value == uavcan.node.Mode_1.OPERATIONAL
                    self.initializations += msg.mode.value == uavcan.node.Mode_1.INITIALIZATION

            sub = presentation.make_subscriber_with_fixed_subject_id(uavcan.node.Heartbeat_1)
            sub.receive_in_background(on_heartbeat)
        return presentation, client

    def read(self, name: str, attempts: int = 4) -> Any:
        """The register's value: a string, a list of numbers, or None if there is no such register.

        Raises AssertionError if the node is silent: no answer within the response deadline (2 s unless given),
        asked ``attempts`` times (on a loaded 2-core host a response is now and then late past one deadline, and a
        test process beside the real-time stream may get no CPU for several seconds; a read changes nothing, so it
        is asked again).
        """

        async def call() -> Any:
            import uavcan.register

            return await self._client.call(uavcan.register.Access_1_0.Request(name=uavcan.register.Name_1_0(name)))

        result = None
        for _ in range(attempts):
            if (result := self._run(call())) is not None:
                break
        assert result is not None, f"node {self._server} did not answer a read of {name} (asked {attempts} times)"
        value = result[0].value
        if value.empty is not None:
            return None
        if value.string is not None:
            return value.string.value.tobytes().decode()
        from pycyphal.application.register import ValueProxy

        return list(ValueProxy(value).floats)

    def json(self, name: str) -> Any:
        """A JSON register (``sys.*``), parsed."""
        return json.loads(self.read(name))

