"""Fixtures for the ``sim-plant`` node tests: the real command as a subprocess on UDP loopback, and a test-side bus.

Every test gets private node-IDs and subject-IDs (random, so parallel runs and other engineers' tests on the same
loopback do not meet) and its own register file, removed afterwards. Deadlines are generous (loaded 2-core
machines); assertions are about behaviour, never about how fast it happened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pycyphal
import pycyphal.application
import pycyphal.transport.udp
import pytest
import reg.udral.service.actuator.common as actuator
import reg.udral.service.common as common
import uavcan.node

from cyphal_common import dsdl
from cyphal_common.tasks import cancel_and_wait
from cyphal_common.udral import dynamics_ts_type, dynamics_type, make_dynamics, read_dynamics
from tests.procs import SIM_PLANT, realtime, start, stop

BIN = Path(sys.executable).parent
STARTUP_TIMEOUT = 120.0
"""Until the subprocess says OPERATIONAL (numba may compile on a cold cache; the machine may be loaded)."""
TIMEOUT = 45.0
"""Deadline for any behaviour we expect to happen."""
NAN = math.nan


def dsdl_env() -> dict[str, str]:
    """CYPHAL_PATH/PYCYPHAL_PATH so that yakut uses exactly the project's compiled DSDL."""
    return {"CYPHAL_PATH": str(dsdl.dsdl_dir()), "PYCYPHAL_PATH": str(dsdl.ensure_compiled())}


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without register/yakut variables, plus DSDL paths and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "SIM__", "SERVO__", "YAKUT_"))}
    env.update(dsdl_env())
    env.update(extra)
    return env


@dataclasses.dataclass(frozen=True)
class Ids:
    """Node-IDs and subject-IDs private to one test."""

    plant: int
    tester: int
    yakut: int
    setpoint: int
    readiness: int
    dynamics: int
    feedback: int
    status: int

    @staticmethod
    def random() -> Ids:
        """Random IDs: three distinct node-IDs below the ``y`` clients' pool (``tests.procs._CLIENT_POOL``: a node
        of the test with a client's ID would not hear that client), five consecutive subject-IDs."""
        rnd = random.SystemRandom()
        plant, tester, yakut = rnd.sample(range(10, 110), 3)
        base = rnd.randrange(1000, 6000, 8)
        return Ids(plant, tester, yakut, base, base + 1, base + 2, base + 3, base + 4)

    def registers(self) -> dict[str, str]:
        """Environment registers of the sim-plant node."""
        return {
            "UAVCAN__UDP__IFACE": "127.0.0.1",
            "UAVCAN__NODE__ID": str(self.plant),
            "UAVCAN__SUB__SERVO__SETPOINT__ID": str(self.setpoint),
            "UAVCAN__SUB__SERVO__READINESS__ID": str(self.readiness),
            "UAVCAN__PUB__SERVO__DYNAMICS__ID": str(self.dynamics),
            "UAVCAN__PUB__SERVO__FEEDBACK__ID": str(self.feedback),
            "UAVCAN__PUB__SERVO__STATUS__ID": str(self.status),
        }


class SimPlantProcess:
    """The real ``sim-plant`` command; stopped (SIGINT, then SIGKILL) and its register file removed on close."""

    def __init__(self, ids: Ids, workdir: Path, **sim: str) -> None:
        """Start it with the test's ports plus ``sim`` as ``SIM__<NAME>`` registers (e.g. ``INERTIA="2"``)."""
        self.ids = ids
        self.registry = workdir / f"sim_plant_{ids.plant}.db"
        self.log_path = workdir / f"sim_plant_{ids.plant}.log"
        env = clean_env(**ids.registers(), **{f"SIM__{k.upper()}": v for k, v in sim.items()})
        self.proc = start([*SIM_PLANT, "--registry", str(self.registry), "--verbose"], env, log=self.log_path)

    def log(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        """Stop the process and remove its files."""
        try:
            stop(self.proc, timeout=15)
        finally:
            for p in (self.registry, self.registry.with_name(self.registry.name + "-journal"), self.log_path):
                p.unlink(missing_ok=True)


@dataclasses.dataclass
class Received:
    """One received message with the local monotonic reception time."""

    msg: Any
    at: float


class Bus:
    """The test's own Cyphal node on UDP loopback: publishes readiness/setpoints, records what the plant sends."""

    def __init__(self, ids: Ids, kind: str = "rotational") -> None:
        """Create the ports; nothing is published until :meth:`command` is used."""
        self.ids = ids
        self.rotational = kind == "rotational"
        self.transport = pycyphal.transport.udp.UDPTransport("127.0.0.1", local_node_id=ids.tester)
        self.pres = pycyphal.presentation.Presentation(self.transport)
        self._pub_setpoint = self.pres.make_publisher(
            dynamics_type(self.rotational), ids.setpoint
        )
        self._pub_readiness = self.pres.make_publisher(common.Readiness_0_1, ids.readiness)
        self.dynamics: list[Received] = []
        self.feedback: list[Received] = []
        self.status: list[Received] = []
        self.heartbeat: list[Received] = []
        dyn_t = dynamics_ts_type(self.rotational)
        for dtype, sid, sink in (
            (dyn_t, ids.dynamics, self.dynamics),
            (actuator.Feedback_0_1, ids.feedback, self.feedback),
            (actuator.Status_0_1, ids.status, self.status),
            (uavcan.node.Heartbeat_1_0, uavcan.node.Heartbeat_1_0._FIXED_PORT_ID_, self.heartbeat),
        ):
            self.pres.make_subscriber(dtype, sid).receive_in_background(self._recorder(sink))
        self._task: asyncio.Task[None] | None = None
        self._round = 0
        """Which publishing this is: :meth:`silence` starts the next, and the loop of an earlier one ends."""
        self.readiness = common.Readiness_0_1.STANDBY
        self.setpoint: tuple[float, float, float] | None = None

    def _recorder(self, sink: list[Received]) -> Callable[[Any, pycyphal.transport.TransferFrom], Any]:
        async def record(msg: Any, meta: pycyphal.transport.TransferFrom) -> None:
            if meta.source_node_id == self.ids.plant:
                sink.append(Received(msg, time.monotonic()))

        return record

    def make_setpoint(self, position: float = NAN, velocity: float = NAN, force: float = NAN) -> Any:
        """A Planar/Linear setpoint; NaN fields are unset."""
        return make_dynamics(self.rotational, position=position, velocity=velocity, force=force)

    def command(self, readiness: int, position: float = NAN, velocity: float = NAN, force: float = NAN) -> None:
        """Publish this readiness and setpoint at 50 Hz from now on (like a controller would)."""
        self.readiness = readiness
        self.setpoint = (position, velocity, force)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._publish(self._round))

    async def publish_once(self, msg: Any) -> None:
        """Publish one setpoint message as given."""
        await self._pub_setpoint.publish(msg)

    def silence(self) -> None:
        """Stop publishing anything (a dead controller).

        Not by the cancel alone: pycyphal's UDP send swallows a ``CancelledError`` that arrives inside it (see
        ``cyphal_common.tasks``), and the loop went on publishing — a controller that never fell silent (two
        control-timeout tests failed so in a loaded CI run, the plant still engaged 45 s later)."""
        self._round += 1
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _publish(self, round_: int) -> None:
        while round_ == self._round:
            # One command per round: a command() between the two sends would pair the old readiness with the new
            # setpoint (ENGAGED with the reversal a STANDBY was to ignore: on a loaded host the joint braked).
            readiness, setpoint = self.readiness, self.setpoint
            await self._pub_readiness.publish(common.Readiness_0_1(readiness))
            if setpoint is not None and round_ == self._round:
                await self._pub_setpoint.publish(self.make_setpoint(*setpoint))
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        """Stop publishing, wait until the publishing loop has ended, then close the transport (closed under it, a
        loop still inside a send ended in an unretrieved EBADF)."""
        task = self._task
        self.silence()
        if task is not None:
            await cancel_and_wait([task])
        self.pres.close()

    # ------------------------------------------------------------------ reading

    @staticmethod
    def state(r: Received) -> tuple[float, float, float, float, float]:
        """(timestamp s, position, velocity, acceleration, force) of a dynamics message."""
        m = r.msg
        return (m.timestamp.microsecond * 1e-6, *read_dynamics(m.value))

    def latest(self) -> tuple[float, float, float, float, float]:
        """The latest dynamics state (see :meth:`state`)."""
        assert self.dynamics, "no dynamics received"
        return self.state(self.dynamics[-1])

    async def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        """Poll until predicate() holds; fail naming ``what`` after the timeout."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                last = self.latest() if self.dynamics else None
                pytest.fail(f"timed out waiting for {what}; latest dynamics (t, p, v, a, f) = {last}")
            await asyncio.sleep(0.05)

    async def settle(self, seconds: float) -> None:
        """Let wall time pass (only where behaviour must hold *for a while*, never as a timing assertion)."""
        await asyncio.sleep(seconds)

    def feedback_readiness(self) -> int:
        """Readiness reported in the latest feedback."""
        assert self.feedback, "no feedback received"
        return int(self.feedback[-1].msg.heartbeat.readiness.value)


@pytest.fixture
def ids() -> Ids:
    """Private IDs."""
    return Ids.random()


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A private working directory, emptied afterwards."""
    try:
        yield tmp_path
    finally:
        for p in tmp_path.iterdir():
            if p.is_file():
                p.unlink(missing_ok=True)


@pytest.fixture
async def plant(ids: Ids, workdir: Path) -> AsyncIterator[Callable[..., Any]]:
    """Factory: ``await plant(kind="rotational", **sim)`` starts sim-plant and a Bus, waits for OPERATIONAL."""
    started: list[tuple[SimPlantProcess, Bus]] = []

    async def start(kind: str = "rotational", **sim: str) -> tuple[SimPlantProcess, Bus]:
        if kind != "rotational":
            sim["kind"] = kind
        bus = Bus(ids, kind)
        try:
            proc = SimPlantProcess(ids, workdir, **sim)
        except BaseException:
            await bus.close()
            raise
        started.append((proc, bus))
        deadline = time.monotonic() + STARTUP_TIMEOUT
        operational = int(uavcan.node.Mode_1_0.OPERATIONAL)
        while not (bus.heartbeat and int(bus.heartbeat[-1].msg.mode.value) == operational and bus.dynamics):
            if proc.proc.poll() is not None:
                pytest.fail(f"sim-plant exited with {proc.proc.returncode}:\n{proc.log()}")
            if time.monotonic() > deadline:
                pytest.fail(f"sim-plant did not become OPERATIONAL:\n{proc.log()}")
            await asyncio.sleep(0.1)
        realtime(proc.proc.pid)  # As a drive runs: its timing must not depend on the other workers' load.
        return proc, bus

    try:
        yield start
    finally:
        for proc, bus in started:
            try:
                await bus.close()
            finally:
                log = proc.log()
                proc.close()
                if "Traceback" in log:
                    print(log, file=sys.stderr)
