"""Two servo nodes and a console on the test worker's own network (tests/isolation.py), as a user starts them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pycyphal.presentation  # noqa: F401  Imported at collection, not within a register client's start-up deadline
import uavcan.node  # noqa: F401  on a busy machine.

from cyphal_common.transport import make_transport  # noqa: F401
from tests.procs import BIN, Processes, base_env

NODES = {21: (1021, 1031), 22: (1022, 1032)}
"""Node-ID → (setpoint subject, dynamics subject)."""
CONSOLE_ID = 120
DYNAMICS_RATE_HZ = 100.0


def servo_env(node_id: int, **extra: str) -> dict[str, str]:
    setpoint, dynamics = NODES[node_id]
    return base_env(UAVCAN__NODE__ID=str(node_id), UAVCAN__SUB__SETPOINT_SERVO__ID=str(setpoint),
                    UAVCAN__PUB__DYNAMICS__ID=str(dynamics), SERVO__DYNAMICS_RATE=str(DYNAMICS_RATE_HZ), **extra)


@dataclass
class Console:
    proc: Any
    url: str
    """The page's URL with its token, as the console printed it."""

    @property
    def base(self) -> str:
        return self.url.split("/#token=")[0]

    @property
    def token(self) -> str:
        return self.url.split("/#token=")[1]


def start_servos(group: Processes, tmp_path: Path) -> dict[int, Any]:
    """The two servo nodes, up; node-ID → its process."""
    procs = group.servo_nodes(*((servo_env(n), tmp_path / f"servo{n}.db", n) for n in NODES))
    return dict(zip(NODES, procs, strict=True))


def start_console(group: Processes, tmp_path: Path, *options: str, node_id: int | None = CONSOLE_ID) -> Console:
    """``servo-node console --port 0`` with ``options``; returned once it serves (its URL written)."""
    url_file = tmp_path / "console.url"
    env = base_env(**({"UAVCAN__NODE__ID": str(node_id)} if node_id is not None else {}))
    proc = group.start([str(BIN / "servo-node"), "console", "--port", "0", "--url-file", str(url_file),
                        "--record-dir", str(tmp_path), *options], env, log=tmp_path / "console.log")
    deadline = time.monotonic() + 120
    while not (url_file.exists() and url_file.read_text().strip()):
        assert proc.poll() is None, f"the console exited: {(tmp_path / 'console.log').read_text()}"
        assert time.monotonic() < deadline, "the console did not start within 120 s"
        time.sleep(0.1)
    return Console(proc, url_file.read_text().strip())
