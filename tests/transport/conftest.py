"""Shared fixtures: unique multicast endpoints, compiled DSDL (or a skip), subprocess cleanup."""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pycyphal.transport import Transport

RECEIVE_TIMEOUT = 30.0
"""Generous deadline for any reception we expect to happen (loaded 2-core machines are slow, never flaky)."""

PEER_SCRIPT = Path(__file__).with_name("_peer.py")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A multicast group and port private to one test."""

    group: str
    port: int

    @property
    def spec(self) -> str:
        """``<group>:<port>``, as accepted by ``udpmc_transport``."""
        return f"{self.group}:{self.port}"

    @property
    def iface(self) -> str:
        """The ``uavcan.can.iface`` entry for this endpoint."""
        return f"udpmc:{self.spec}"


def random_endpoint(port: int | None = None) -> Endpoint:
    """A random admin-scoped group and a port below the Linux ephemeral range (parallel runs do not meet)."""
    rnd = random.SystemRandom()
    group = f"239.{rnd.randint(0, 255)}.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}"
    return Endpoint(group, port if port is not None else rnd.randint(20000, 32000))


@pytest.fixture
def endpoint() -> Endpoint:
    """One private endpoint."""
    return random_endpoint()


@dataclasses.dataclass(frozen=True)
class DsdlEnv:
    """Compiled DSDL: the source tree (for ``CYPHAL_PATH``) and the importable output (``PYCYPHAL_PATH``)."""

    source: Path
    output: Path


@pytest.fixture(scope="session")
def dsdl_env() -> DsdlEnv:
    """Compile the project's DSDL (:mod:`cyphal_common.dsdl`) and make ``uavcan`` importable."""
    from cyphal_common import dsdl

    source = Path(dsdl.dsdl_dir())
    assert (source / "uavcan").is_dir(), f"no uavcan DSDL namespace under {source}"
    output = Path(dsdl.ensure_compiled())
    if str(output) not in sys.path:
        sys.path.insert(0, str(output))
    return DsdlEnv(source, output)


def udp_transport(node_id: int) -> Transport:
    """Our Cyphal/UDP transport on 127.0.0.1 (``make_transport``: the reception and emission patches installed)."""
    from cyphal_common.transport import make_transport

    transport = make_transport({"uavcan.node.id": node_id, "uavcan.udp.iface": "127.0.0.1"})
    assert transport is not None
    return transport


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment minus any ``UAVCAN__*``/``YAKUT_*`` settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "YAKUT_"))}
    env.update(extra)
    return env


class Processes:
    """Starts subprocesses and guarantees they are gone at teardown."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[str]] = []

    def start(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start a process with text pipes for stdin/stdout/stderr."""
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env if env is not None else clean_env(),
        )
        self._procs.append(proc)
        return proc

    def peer(self, *args: str) -> subprocess.Popen[str]:
        """Start ``_peer.py`` with the given arguments under this interpreter."""
        return self.start([sys.executable, str(PEER_SCRIPT), *args])

    def cleanup(self) -> None:
        """Kill whatever is still running and reap everything."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.communicate(timeout=30)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                pass


@pytest.fixture
def processes() -> Iterator[Processes]:
    """A subprocess launcher whose children are killed at teardown."""
    procs = Processes()
    try:
        yield procs
    finally:
        procs.cleanup()
