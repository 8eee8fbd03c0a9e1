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
DEADMAN_S = 1.0


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

            group = self.bus["UAVCAN__CAN__IFACE"].split(":", 1)[1]
            env["YAKUT_TRANSPORT"] = yakut_transport_expression(group, node_id)
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


def _constant_window(pair: Pair, v: float, span_s: float) -> tuple[float, float]:
    """The latest ``span_s`` of the follower's samples during which every leader sample moved at ``v``."""
    lead = pair.rec.series(0)
    t_end = min(pair.rec.latest(1)[0], lead[-1, 0])
    recent = lead[lead[:, 0] >= t_end - span_s - 0.3]
    assert np.abs(recent[:, 2] - v).max() < 2e-3, "the leader did not move at constant velocity (host overloaded?)"
    return t_end - span_s, t_end


UDPMC_OPEN = pytest.mark.xfail(strict=False, reason="open: over udpmc the gear-in check saw |Δv/Δt| 100 over 50 ms "
                               "(the joint at its force limit) on a loaded host; not yet explained")


@pytest.mark.parametrize("bus", [_bus, pytest.param(_udpmc, marks=UDPMC_OPEN)], ids=["udp", "udpmc"])
def test_follower_keeps_the_relation(bus: Any, tmp_path: Path) -> None:
    """Gear-in while the leader moves, the relation at constant velocity (offset and reference honoured), setpoints
    ignored, a rest-to-rest move, the leader killed mid-move and restarted."""
    m, off, ref = (5.0, 0.3, 0.1) if bus is _bus else (-2.0, 1.0, -0.5)
    limits = dict(SERVO__PROFILE__VELOCITY="-10 10", SERVO__PROFILE__ACCELERATION="-40 40", SERVO__PROFILE__JERK="400")
    with mimic_pair(bus(), tmp_path, m, off, ref, **limits) as pair:
        v_l = 0.5
        lead_cmd = pair.command_leader(".inf", v_l)
        wait_for(lambda: abs(pair.rec.latest(0)[2] - v_l) < 1e-3, 60, what="leader at constant velocity")
        assert abs(pair.rec.latest(1)[2]) < 1e-6, "the follower moved without readiness"
        # Gear-in to the moving leader.
        pair.pub(F_READY, "zubax.service.Readiness", "3", node_id=121)
        wait_for(lambda: pair.mimic()["following"], 60, what="following")
        t_in = pair.rec.latest(1)[0]
        wait_for(lambda: abs(pair.mimic()["err"]) < 1e-4, 30, what="converged")
        time.sleep(1.5)
        fol = pair.rec.series(1)
        after = fol[fol[:, 0] >= t_in - 0.5]
        # Velocity change over 50 ms windows: a step in the command would show as its size / 50 ms; a stall of the
        # loaded host (the embedded joint catching up at its force limit) does not.
        grid = np.arange(after[0, 0], after[-1, 0], 0.05)
        accel = np.abs(np.diff(np.interp(grid, after[:, 0], after[:, 2]))) / 0.05
        print(f"gear-in: follower |v| max {np.abs(after[:, 2]).max():.4g} (limit 10), |Δv/Δt| max {accel.max():.4g}"
              " (limit 40)")
        # The reference stays within the limits exactly (tests/mimic/test_loop.py); the joint tracks it with the
        # velocity law v_ref + k·e, so a loop stalled by the host's load overshoots by k·e: a 10 % tracking margin.
        assert np.abs(after[:, 2]).max() <= 10 * 1.1
        assert accel.max() <= 40 * 1.25, "a step in the follower's velocity"
        # The relation at constant leader velocity, compared at equal times.
        t0, t1 = _constant_window(pair, v_l, 1.0)
        _, err = relation_error(pair, t0, t1)
        latency = leader_latency_s(pair)
        uncompensated = abs(m * v_l * latency)
        print(f"relation error at constant velocity: median {np.median(np.abs(err)):.3e}, p95 "
              f"{np.percentile(np.abs(err), 95):.3e}; uncompensated m·v·L = {uncompensated:.3e} "
              f"(L {latency * 1e3:.2f} ms)")
        assert np.median(np.abs(err)) <= 0.1 * uncompensated
        # A setpoint to the follower is ignored (counted, reason given) and moves nothing off the relation.
        pair.pub(F_SP, "uavcan.primitive.scalar.Real32", "100", node_id=122)
        wait_for(lambda: pair.follower_regs.json("sys.counters")["ignored_mimic"] > 0, 30, what="setpoint counted")
        assert pair.mimic()["following"] and abs(pair.mimic()["err"]) < 1e-3
        # Rest to rest: the leader to a position within the follower's limits through the relation.
        end(lead_cmd)
        p_goal = round(float(pair.rec.latest(0)[1]) + 0.4, 1)
        lead_cmd = pair.pub(SP, "zubax.telega.ServoCommand", f"{{target: {{kinematics: {{position: {p_goal}}}}}, "
                            "profile_velocity_reverse_forward: [-1, 1], profile_deceleration_acceleration: [-4, 4], "
                            "profile_jerk: 40}")
        wait_for(lambda: abs(pair.rec.latest(0)[1] - p_goal) < 1e-4 and abs(pair.rec.latest(1)[2]) < 1e-5, 30,
                 what="both at rest")
        f_end = pair.rec.latest(1)[1]
        stroke = abs(pair.relation(np.array(p_goal)) - pair.relation(np.array(p_goal - 0.4)))
        print(f"rest to rest: relation error {abs(f_end - pair.relation(np.array(p_goal))):.2e} (stroke {stroke:.3g})")
        assert abs(f_end - pair.relation(np.array(p_goal))) <= 1e-3 * max(stroke, 1.0)
        # The leader killed mid-move: the follower stops on its own (deadman + jerk-limited stop), then holds.
        end(lead_cmd)
        lead_cmd = pair.command_leader(".inf", v_l)
        wait_for(lambda: abs(pair.rec.latest(1)[2] - m * v_l) < 1e-3, 60, what="following at speed")
        assert pair.leader is not None
        pair.leader.kill()
        pair.leader.wait(10)
        t_kill = pair.rec.latest(0)[0]
        wait_for(lambda: abs(pair.rec.latest(1)[2]) < 1e-5 and not pair.mimic()["following"], 30, what="stopped")
        fol = pair.rec.series(1)
        moving = fol[(fol[:, 0] > t_kill) & (np.abs(fol[:, 2]) > 1e-3)]
        stopped_after = moving[-1, 0] - t_kill if len(moving) else 0.0
        status = pair.follower_regs.json("sys.status")["servo"]
        print(f"leader killed: follower at rest {stopped_after:.3f} s after the leader's last sample; {status}")
        assert "lost leader" in pair.mimic()["stop"] and "lost leader" in status["reason"]
        assert stopped_after <= DEADMAN_S + 0.5 + 1.0  # deadman + the stop (v 2.5 at 40/s², 400/s³) + slack
        # Restarted, the leader is not engaged: nothing moves until it is commanded, then the follower gears in.
        end(lead_cmd)
        p_hold = pair.rec.latest(1)[1]
        pair.start_leader()
        time.sleep(1.5)
        assert abs(pair.rec.latest(1)[1] - p_hold) < 1e-4 and not pair.mimic()["following"]
        pair.command_leader(str(round(float(pair.rec.latest(0)[1]) + 0.2, 1)), 0.0)
        wait_for(lambda: pair.mimic()["following"], 60, what="re-engaged")
