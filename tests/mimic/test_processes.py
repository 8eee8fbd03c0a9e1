"""Mimic through real processes: a leader and a follower ``servo-node`` (embedded sim drives), the leader commanded
by ``y pub``, over UDP and over udpmc CAN.

Verdicts come from both nodes' timestamped ``dynamics`` (recorded by the test's own pycyphal node, compared at equal
times by interpolating the leader's samples) and from the follower's registers — never from wall-clock speed.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.coord.test_system import _bus, _env, _udpmc
from tests.mimic.recorder import Recorder
from tests.procs import BIN, RegisterClient, popen, wait_for

LEADER, FOLLOWER = 61, 62
SP, DYN, FB, F_DYN, F_SP, F_READY = 3601, 3602, 3603, 3612, 3611, 3614
DEADMAN_S = 0.3


@dataclass
class Pair:
    bus: dict[str, str]
    tmp: Path
    m: float
    off: float
    ref: float
    rec: Recorder
    leader_regs: RegisterClient
    follower_regs: RegisterClient
    stack: ExitStack
    leader: subprocess.Popen[str] | None = None

    def relation(self, p: np.ndarray) -> np.ndarray:
        return self.m * (p - self.ref) + self.off

    def start_leader(self) -> None:
        env = _env(self.bus, UAVCAN__NODE__ID=str(LEADER), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SP),
                   UAVCAN__PUB__DYNAMICS__ID=str(DYN), UAVCAN__PUB__FEEDBACK__ID=str(FB),
                   SERVO__DYNAMICS_RATE="200", SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S))
        self.leader = self.stack.enter_context(
            popen([str(BIN / "servo-node"), "run", "--registry", str(self.tmp / "leader.db")], env))
        wait_for(lambda: self.leader_regs.read("uavcan.node.id") == [LEADER], 120, what="leader up")

    def pub(self, subject: int, dtype: str, value: str, node_id: int = 120) -> subprocess.Popen[str]:
        """A background ``y pub`` at 20 Hz (ended with the test, or by :func:`end`)."""
        env = {k: v for k, v in _env(self.bus).items() if not k.startswith(("SERVO__", "SIM__"))}
        env["UAVCAN__NODE__ID"] = str(node_id)
        if "UAVCAN__CAN__IFACE" in self.bus:
            from cyphal_common.transport import yakut_transport_expression

            env["YAKUT_TRANSPORT"] = yakut_transport_expression(self.bus["UAVCAN__CAN__IFACE"].split(":", 1)[1], node_id)
        return self.stack.enter_context(popen([str(BIN / "y"), "pub", "-T", "0.05", f"{subject}:{dtype}", value], env))

    def command_leader(self, position: str, velocity: float, node_id: int = 120) -> subprocess.Popen[str]:
        return self.pub(SP, "zubax.telega.ServoCommand",
                        f"{{target: {{kinematics: {{position: {position}, velocity: {velocity}}}}}}}", node_id)

    def mimic(self) -> dict[str, Any]:
        return dict(self.follower_regs.json("sys.mimic"))


def end(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(10)


@contextmanager
def mimic_pair(bus: Mapping[str, str], tmp: Path, m: float, off: float, ref: float,
               **follower: str) -> Iterator[Pair]:
    """A follower (readiness-gated) and a leader, both up; the test records both nodes' dynamics."""
    with ExitStack() as stack:
        env = _env(bus, UAVCAN__NODE__ID=str(FOLLOWER), UAVCAN__SUB__MIMIC_LEADER__ID=str(DYN),
                   UAVCAN__SUB__MIMIC_LEADER_FEEDBACK__ID=str(FB), UAVCAN__PUB__DYNAMICS__ID=str(F_DYN),
                   UAVCAN__SUB__SETPOINT_SERVO__ID=str(F_SP), UAVCAN__SUB__READINESS__ID=str(F_READY),
                   SERVO__DYNAMICS_RATE="500", SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S),
                   SERVO__MIMIC__MULTIPLIER=str(m), SERVO__MIMIC__OFFSET=str(off), SERVO__MIMIC__REFERENCE=str(ref),
                   **follower)
        stack.enter_context(popen([str(BIN / "servo-node"), "run", "--registry", str(tmp / "follower.db")], env))
        leader_regs = RegisterClient(bus, LEADER, client_node_id=118)
        follower_regs = RegisterClient(bus, FOLLOWER, client_node_id=119)
        stack.callback(leader_regs.close)
        stack.callback(follower_regs.close)
        rec = Recorder(bus, [DYN, F_DYN], node_id=117)
        stack.callback(rec.close)
        pair = Pair(dict(bus), tmp, m, off, ref, rec, leader_regs, follower_regs, stack)
        pair.start_leader()
        wait_for(lambda: follower_regs.read("uavcan.node.id") == [FOLLOWER], 120, what="follower up")
        yield pair


def relation_error(pair: Pair, t_from: float, t_to: float) -> tuple[np.ndarray, np.ndarray]:
    """(t, follower − relation(leader)) at the follower's sample times within [t_from, t_to] (leader interpolated)."""
    lead, fol = pair.rec.series(0), pair.rec.series(1)
    sel = (fol[:, 0] >= max(t_from, lead[0, 0])) & (fol[:, 0] <= min(t_to, lead[-1, 0]))
    t = fol[sel, 0]
    return t, fol[sel, 1] - pair.relation(np.interp(t, lead[:, 0], lead[:, 1]))


def leader_latency_s(pair: Pair) -> float:
    """One-way latency of the leader's dynamics as the test's node sees it (median reception − stamp)."""
    lead = pair.rec.series(0)
    return float(np.median(lead[:, 4] - lead[:, 0]))
