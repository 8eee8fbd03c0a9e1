"""Mimic through real processes: a leader and a follower ``servo-node`` (embedded sim drives), the leader commanded
by ``y pub``, over UDP and over udpmc CAN.

One pair per transport runs every scenario in sequence (process launches dominate the run time): gear-in to the
moving leader, the relation at constant velocity, a stray setpoint and a second publisher on the leader's subjects,
a rest-to-rest move faster than the follower can follow, the leader killed mid-move; over UDP the leader is then
restarted. Verdicts come from both nodes' timestamped ``dynamics`` (recorded by the test's own pycyphal node,
compared at equal times by interpolating the leader's samples) and from the follower's registers — never from
wall-clock speed.
"""

from __future__ import annotations

import math
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from tests.coord.test_system import _bus, _env, _udpmc
from tests.mimic.recorder import Recorder
from tests.procs import BIN, RegisterClient, popen, realtime, wait_answers, wait_for
from tests.procs import stop as stop_process

LEADER, FOLLOWER, STRAY = 61, 62, 63
SP, DYN, FB, F_DYN, F_SP, F_READY = 3601, 3602, 3603, 3612, 3611, 3614
DEADMAN_S = 1.0
V_LIM, A_LIM, J_LIM = 10.0, 40.0, 400.0
LIMITS = dict(SERVO__PROFILE__VELOCITY=f"-{V_LIM} {V_LIM}", SERVO__PROFILE__ACCELERATION=f"-{A_LIM} {A_LIM}",
              SERVO__PROFILE__JERK=str(J_LIM))
STALL_S = 0.012
"""A gap this long between the follower's successive distinct dynamics stamps (its loop's tick times): its loop may
have missed ticks there (a loaded host), so the joint's catch-up after it is not judged (see ``judge_joint``)."""


def servo_command(position: float, velocity: float) -> Any:
    import zubax.physics.dynamics
    import zubax.physics.kinematics
    import zubax.telega

    kin = zubax.physics.kinematics.DoF2nd_1_0(position=position, velocity=velocity)
    return zubax.telega.ServoCommand_1_0(target=zubax.physics.dynamics.DoF2nd_1_0(kinematics=kin, force=0.0))


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
    motion: list[dict[str, Any]] = field(default_factory=list)
    """The follower's ``sys.motion`` polled while it follows (its reference)."""

    def relation(self, p: np.ndarray) -> np.ndarray:
        return self.m * (p - self.ref) + self.off

    def start_leader(self) -> None:
        env = _env(self.bus, UAVCAN__NODE__ID=str(LEADER), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SP),
                   UAVCAN__PUB__DYNAMICS__ID=str(DYN), UAVCAN__PUB__FEEDBACK__ID=str(FB),
                   SERVO__DYNAMICS_RATE="200", SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S))
        self.leader = self.stack.enter_context(
            popen([str(BIN / "servo-node"), "run", "--registry", str(self.tmp / "leader.db")], env))

    def y_pub(self, subject: int, dtype: str, value: str, node_id: int = 120) -> subprocess.Popen[str]:
        """A background ``y pub`` at 20 Hz (ended with the test, or by :func:`end`)."""
        env = {k: v for k, v in _env(self.bus).items() if not k.startswith(("SERVO__", "SIM__"))}
        env["UAVCAN__NODE__ID"] = str(node_id)
        if "UAVCAN__CAN__IFACE" in self.bus:
            from cyphal_common.transport import yakut_transport_expression

            group = self.bus["UAVCAN__CAN__IFACE"].split(":", 1)[1]
            env["YAKUT_TRANSPORT"] = yakut_transport_expression(group, node_id)
        return self.stack.enter_context(popen([str(BIN / "y"), "pub", "-T", "0.05", f"{subject}:{dtype}", value], env))

    def mimic(self) -> dict[str, Any]:
        return dict(self.follower_regs.json("sys.mimic"))

    def err_now(self) -> float:
        """max |follower − relation(leader)| over the latest 0.2 s that both nodes' samples cover."""
        t_end = min(self.rec.latest(0)[0], self.rec.latest(1)[0])
        t, err = relation_error(self, t_end - 0.2, t_end)
        worst = int(np.argmax(np.abs(err)))
        lead, fol = self.rec.series(0), self.rec.series(1)
        print(f"err_now: {err[worst]:+.3e} at {t[worst] - t_end:+.4f} s of {len(t)} samples; leader samples "
              f"{np.count_nonzero((lead[:, 0] >= t_end - 0.2) & (lead[:, 0] <= t_end))}, largest stamp gaps "
              f"leader {np.diff(lead[-60:, 0]).max() * 1e3:.1f} ms, "
              f"follower {np.diff(fol[-60:, 0]).max() * 1e3:.1f} ms")
        return float(np.abs(err).max())

    @contextmanager
    def polling_motion(self) -> Iterator[None]:
        """Poll the follower's ``sys.motion`` (its reference) in the background meanwhile."""
        poller = RegisterClient(self.bus, FOLLOWER, client_node_id=121)  # clear of tests.procs._CLIENT_POOL
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                try:
                    self.motion.append(poller.json("sys.motion"))
                except AssertionError:  # A read lost on a loaded host: the next one.
                    pass

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(10)
            poller.close()


def end(proc: subprocess.Popen[str]) -> None:
    """Stop a background command now: SIGINT, and SIGKILL if it has not exited within 10 s."""
    stop_process(proc)


@contextmanager
def mimic_pair(bus: Mapping[str, str], tmp: Path, m: float, off: float, ref: float) -> Iterator[Pair]:
    """A follower (readiness-gated) and a leader, started together; the test records both nodes' dynamics."""
    with ExitStack() as stack:
        env = _env(bus, UAVCAN__NODE__ID=str(FOLLOWER), UAVCAN__SUB__MIMIC_LEADER__ID=str(DYN),
                   UAVCAN__SUB__MIMIC_LEADER_FEEDBACK__ID=str(FB), UAVCAN__PUB__DYNAMICS__ID=str(F_DYN),
                   UAVCAN__SUB__SETPOINT_SERVO__ID=str(F_SP), UAVCAN__SUB__READINESS__ID=str(F_READY),
                   SERVO__DYNAMICS_RATE="200", SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S),
                   SERVO__MIMIC__MULTIPLIER=str(m), SERVO__MIMIC__OFFSET=str(off), SERVO__MIMIC__REFERENCE=str(ref),
                   **LIMITS)
        follower = stack.enter_context(popen([str(BIN / "servo-node"), "run", "--registry", str(tmp / "follower.db")],
                                             env))
        leader_regs = RegisterClient(bus, LEADER, client_node_id=118)
        follower_regs = RegisterClient(bus, FOLLOWER, client_node_id=119)
        stack.callback(leader_regs.close)
        stack.callback(follower_regs.close)
        rec = Recorder(bus, [DYN, F_DYN], node_id=117, sources=[LEADER, FOLLOWER])
        stack.callback(rec.close)
        pair = Pair(dict(bus), tmp, m, off, ref, rec, leader_regs, follower_regs, stack)
        pair.start_leader()
        assert pair.leader is not None
        wait_answers(pair.leader, bus, LEADER, "leader")
        wait_answers(follower, bus, FOLLOWER, "follower")
        # Above this process and what it starts (SCHED_FIFO 5, no time slices among equals: its recorder's thread
        # kept the follower's loop from 54 % of its ticks), as the other scenarios' nodes (Processes.servo_nodes).
        realtime(pair.leader.pid)
        realtime(follower.pid)
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


def constant_window(pair: Pair, v: float, span_s: float, timeout: float = 10.0) -> tuple[float, float]:
    """The latest ``span_s`` of the follower's samples during which (and 0.3 s before which) every leader sample moved
    at ``v``; waited for up to ``timeout`` seconds: on a loaded host the leader now and then leaves its constant
    velocity (once in CI; the run did not say why), and the relation is judged on the next stretch."""
    departures: list[float] = []

    def window() -> tuple[float, float] | None:
        lead = pair.rec.series(0)
        t_end = min(pair.rec.latest(1)[0], lead[-1, 0])
        recent = lead[lead[:, 0] >= t_end - span_s - 0.3]
        departure = float(np.abs(recent[:, 2] - v).max())
        if departure < 2e-3:
            return t_end - span_s, t_end
        departures.append(departure)
        return None

    found = wait_for(window, timeout, what="a stretch of the leader at constant velocity (host overloaded?)")
    if departures:
        print(f"the leader left its constant velocity (by up to {max(departures):.3g}); judged {len(departures)} "
              "polls later")
    return cast(tuple[float, float], found)


def judge_reference(motion: list[dict[str, Any]]) -> None:
    """The follower's reference (what its loop commands, polled from ``sys.motion``) within its own limits."""
    refs = np.array([[float(x) for x in m["ref"]] for m in motion if m.get("engaged")]).reshape(-1, 3)
    print(f"reference: {len(refs)} polls, |v_ref| max {np.abs(refs[:, 1]).max():.4g} (limit {V_LIM:g}), "
          f"|a_ref| max {np.abs(refs[:, 2]).max():.4g} (limit {A_LIM:g})")
    assert len(refs) >= 10, "too few polls of sys.motion"
    assert np.abs(refs[:, 1]).max() <= V_LIM * (1 + 1e-6)
    assert np.abs(refs[:, 2]).max() <= A_LIM * (1 + 1e-6)


def judge_joint(fol: np.ndarray, t_from: float, t_to: float) -> None:
    """The joint's measured velocity, and its velocity change over 50 ms (a step in the command would show as its
    size / 50 ms), within the follower's limits plus the tracking margin — where its loop kept time.

    After the loop missed ticks (the process descheduled on a loaded host) the embedded joint has held the last
    command (for up to its drive's watchdog time, then braked) while the reference moved on, and the velocity law
    ``v_ref + k·e`` catches up at the joint's force limit: the host's stall, not the command, sets that acceleration
    (before the watchdog, a SIGSTOP of the follower for 150 ms during gear-in showed |Δv/Δt| 100 and |v| 17 while the
    reference stayed within 40 and 10). Such stretches are not judged;
    the reference is judged throughout (:func:`judge_reference`).
    """
    f = fol[(fol[:, 0] >= t_from) & (fol[:, 0] <= t_to)]
    stamps = np.unique(f[:, 0])
    gaps = np.flatnonzero(np.diff(stamps) > STALL_S)
    stalls = [(stamps[i], stamps[i + 1] + 0.15) for i in gaps]  # The gap and the catch-up after it.

    def kept_time(a: float, b: float) -> bool:
        return not any(a < s1 and b > s0 for s0, s1 in stalls)

    grid = np.arange(f[0, 0], f[-1, 0] - 0.05, 0.05)
    v_grid = np.interp(grid, f[:, 0], f[:, 2])
    accel = np.abs(np.diff(v_grid)) / 0.05
    judged = np.array([kept_time(a, a + 0.05) for a in grid[:-1]])
    v_ok = np.array([kept_time(t, t) for t in f[:, 0]])
    print(f"joint: {judged.sum()} of {len(judged)} 50 ms windows judged ({len(stalls)} stalls > {STALL_S * 1e3:g} ms, "
          f"longest {np.diff(stamps).max() * 1e3:.1f} ms); |Δv/Δt| max {accel[judged].max():.4g} judged, "
          f"{accel.max():.4g} all (limit {A_LIM:g}); |v| max {np.abs(f[v_ok, 2]).max():.4g} judged (limit {V_LIM:g})")
    assert judged.sum() >= 10, "the follower's loop missed ticks almost throughout (host overloaded?)"
    # The velocity law v_ref + k·e on a loop ticking on time: a 10 % tracking margin on velocity, 25 % on Δv/Δt.
    assert np.abs(f[v_ok, 2]).max() <= V_LIM * 1.1
    assert accel[judged].max() <= A_LIM * 1.25, "a step in the follower's velocity"


@pytest.mark.parametrize("bus", [_bus, _udpmc], ids=["udp", "udpmc"])
def test_follower_keeps_the_relation(bus: Callable[[], dict[str, str]], tmp_path: Path) -> None:
    """Gear-in while the leader moves, the relation at constant velocity (offset and reference honoured), setpoints
    and a second publisher on the leader's subjects ignored, a rest-to-rest move faster than the follower can
    follow, the leader killed mid-move; over UDP the leader restarted."""
    import zubax
    import zubax.physics.dynamics
    import zubax.physics.kinematics
    import zubax.service
    from pycyphal.application.heartbeat_publisher import Health

    from servo_node.axis._reports import feedback_message

    udp = bus is _bus
    m, off, ref = (5.0, 0.3, 0.1) if udp else (-2.0, 1.0, -0.5)
    with mimic_pair(bus(), tmp_path, m, off, ref) as pair:
        rec = pair.rec
        v_l = 0.5
        lead_cmd = pair.y_pub(SP, "zubax.telega.ServoCommand",
                              f"{{target: {{kinematics: {{position: .inf, velocity: {v_l}}}}}}}")
        wait_for(lambda: abs(rec.latest(0)[2] - v_l) < 1e-3, 60, what="leader at constant velocity")
        assert abs(rec.latest(1)[2]) < 1e-6, "the follower moved without readiness"
        # Gear-in to the moving leader (the follower starts far from the relation: it runs at its limits).
        with pair.polling_motion():
            rec.repeat(F_READY, lambda: zubax.service.Readiness_1_0(value=3), 0.05)
            wait_for(lambda: pair.mimic()["following"], 60, what="following")
            t_in = rec.latest(1)[0]
            wait_for(lambda: abs(pair.mimic()["err"]) < 1e-4, 30, what="converged")
            time.sleep(1.0)
            # The relation at constant leader velocity, compared at equal times.
            t0, t1 = constant_window(pair, v_l, 1.0)
            _, err = relation_error(pair, t0, t1)
            latency = leader_latency_s(pair)
            uncompensated = abs(m * v_l * latency)
            print(f"relation error at constant velocity: median {np.median(np.abs(err)):.3e}, p95 "
                  f"{np.percentile(np.abs(err), 95):.3e}; uncompensated m·v·L = {uncompensated:.3e} "
                  f"(L {latency * 1e3:.2f} ms)")
            assert np.median(np.abs(err)) <= 0.1 * uncompensated
            # A stray setpoint on the follower is ignored (counted, reason given); a second publisher on the leader's
            # subjects (far away, claiming to be engaged) is counted and reported, and never followed.
            stop_sp = rec.repeat(F_SP, lambda: servo_command(100.0, 0.0), 0.05)

            def stray_dynamics() -> Any:
                kin = zubax.physics.kinematics.DoF3rd_1_0(
                    base=zubax.physics.kinematics.DoF2nd_1_0(position=100.0, velocity=0.0), acceleration=0.0)
                stamp = zubax.Timestamp_1_0(microsecond=int(time.time() * 1e6))
                return zubax.physics.dynamics.DoF3rdTs_1_0(timestamp=stamp,
                                                           value=zubax.physics.dynamics.DoF3rd_1_0(kinematics=kin))

            stray = Recorder(pair.bus, [], node_id=STRAY)
            pair.stack.callback(stray.close)
            stop_stray = [stray.repeat(DYN, stray_dynamics, 0.02),
                          stray.repeat(FB, lambda: feedback_message(True, Health.NOMINAL, 0.0), 0.1)]
            wait_for(lambda: pair.mimic()["sources"] == 2 and pair.mimic()["foreign"] > 10
                     and pair.follower_regs.json("sys.counters")["ignored_mimic"] > 0, 30, what="both counted")
            mim = pair.mimic()
            print(f"stray publishers: {mim}")
            assert mim["following"] and mim["leader"] == LEADER and pair.err_now() < 1e-3
            for stop in (stop_sp, *stop_stray):
                stop()
            wait_for(lambda: pair.mimic()["sources"] == 1, 30, what="one source again")
            # Rest to rest, the leader faster than the follower can follow (it lags, then catches up).
            end(lead_cmd)
            lags = pair.mimic()["lags"]
            p_goal = round(float(rec.latest(0)[1]) + 1.0, 1)
            v_fast = 1.2 * V_LIM / abs(m)
            lead_cmd = pair.y_pub(SP, "zubax.telega.ServoCommand",
                                  f"{{target: {{kinematics: {{position: {p_goal}}}}}, profile_velocity_reverse_forward:"
                                  f" [-{v_fast:.3g}, {v_fast:.3g}], profile_deceleration_acceleration: [-30, 30], "
                                  "profile_jerk: 300}")
            wait_for(lambda: abs(rec.latest(0)[1] - p_goal) < 1e-4 and abs(rec.latest(1)[2]) < 1e-5, 30,
                     what="both at rest")
            t_rest = rec.latest(1)[0]
        f_end = rec.latest(1)[1]
        stroke = abs(m * 1.0)
        print(f"rest to rest: relation error {abs(f_end - pair.relation(np.array(p_goal))):.2e} (stroke {stroke:.3g})")
        assert abs(f_end - pair.relation(np.array(p_goal))) <= 1e-3 * stroke, (
            pair.follower_regs.json("sys.status"), pair.mimic(), pair.follower_regs.json("sys.timing"))
        assert pair.mimic()["lags"] > lags, "the leader was faster than the follower: lag not flagged"
        judge_reference(pair.motion)
        judge_joint(rec.series(1), t_in - 0.5, t_rest)
        # The leader killed mid-move: the follower stops on its own (deadman + jerk-limited stop), then holds.
        end(lead_cmd)
        stop_lead = rec.repeat(SP, lambda: servo_command(math.inf, v_l), 0.05)
        wait_for(lambda: abs(rec.latest(1)[2] - m * v_l) < 1e-3, 60, what="following at speed")
        assert pair.leader is not None
        pair.leader.kill()
        pair.leader.wait(10)
        stop_lead()
        t_kill = rec.latest(0)[0]
        wait_for(lambda: abs(rec.latest(1)[2]) < 1e-5 and not pair.mimic()["following"], 30, what="stopped")
        fol = rec.series(1)
        moving = fol[(fol[:, 0] > t_kill) & (np.abs(fol[:, 2]) > 1e-3)]
        stopped_after = moving[-1, 0] - t_kill if len(moving) else 0.0
        status = pair.follower_regs.json("sys.status")["servo"]
        print(f"leader killed: follower at rest {stopped_after:.3f} s after the leader's last sample; {status}")
        mim = pair.mimic()
        assert "lost leader" in mim["stop"] and "lost leader" in status["reason"], mim
        assert stopped_after <= DEADMAN_S + 0.5 + 1.0  # deadman + the stop (v 2.5 at 40/s², 400/s³) + slack
        if not udp:
            return
        # Restarted, the leader is not engaged: nothing moves until it is commanded, then the follower gears in.
        p_hold = rec.latest(1)[1]
        pair.start_leader()
        assert pair.leader is not None
        wait_answers(pair.leader, pair.bus, LEADER, "leader (again)")
        realtime(pair.leader.pid)
        time.sleep(1.0)
        assert abs(rec.latest(1)[1] - p_hold) < 1e-4 and not pair.mimic()["following"]
        p_goal = round(float(rec.latest(0)[1]) + 0.2, 1)
        rec.repeat(SP, lambda: servo_command(p_goal, 0.0), 0.05)
        wait_for(lambda: pair.mimic()["following"], 60, what="re-engaged")
        wait_for(lambda: abs(rec.latest(0)[1] - p_goal) < 1e-4 and pair.err_now() < 1e-3, 30, what="re-converged")
