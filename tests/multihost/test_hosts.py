"""Each axis its own host: three hosts (network namespaces on one segment, :mod:`tests.multihost.netns`), each
running a ``servo-node`` with its ``sim-plant`` drive over Cyphal/UDP, and ``servo-coord`` on a fourth host.

Verdicts come from what the nodes report (``sys.motion``, ``sys.status``, the coordinator's table of the nodes'
own plan figures), read by register clients inside the hosts, so a host cut off from the segment can still be
asked. Wall-clock waits are generous and never asserted. Every node runs under SCHED_FIFO where permitted (as a
servo and its drive are deployed), so a loaded test machine stalls none of them.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.multihost.netns import Host, HostRegisterClient, Network, namespaces, unavailable_reason
from tests.procs import BIN, SIM_PLANT, base_env, popen, realtime, wait_for

COORD = [sys.executable, "-m", "servo_node.coord"]
COORD_ID = 30
EXIT_CODE_UNSUCCESSFUL = 100  # servo-coord: a move that could not be made
RATES = {"drive": {"SIM__STEP_RATE": "500", "SIM__PUBLISH_RATE": "50"},
         "servo": {"SERVO__LOOP_RATE": "500", "SERVO__DRIVE__RATE": "50"}}
"""Half the default loop rates and a 50 Hz drive link: six nodes then idle at ~0.5 core instead of ~1 (these tests
judge deadman, stop and arrival, not tracking), leaving the other core to the test and the coordinator."""


@dataclass(frozen=True)
class Axis:
    """Axis i on host ``h<i>``: servo node-ID 10+i, drive 20+i, register client 50+i (the test's, in that host)."""

    index: int
    host: Host

    servo = property(lambda self: 10 + self.index)
    drive = property(lambda self: 20 + self.index)
    spec = property(lambda self: f"{self.servo}:{100 + self.index}:{130 + self.index}")  # for servo-coord --axis


@dataclass
class Bench:
    net: Network
    coord_host: Host
    axes: list[Axis]
    clients: dict[int, HostRegisterClient]

    def motion(self, ax: Axis) -> dict[str, Any]:
        return dict(self.clients[ax.index].json("sys.motion"))

    def status(self, ax: Axis) -> dict[str, Any]:
        return dict(self.clients[ax.index].json("sys.status")["servo"])


def _drive_env(ax: Axis) -> dict[str, str]:
    i = ax.index
    return base_env(UAVCAN__UDP__IFACE=ax.host.address, UAVCAN__NODE__ID=str(ax.drive), **RATES["drive"],
                    UAVCAN__SUB__SERVO__SETPOINT__ID=f"{200 + i}", UAVCAN__SUB__SERVO__READINESS__ID=f"{210 + i}",
                    UAVCAN__PUB__SERVO__DYNAMICS__ID=f"{220 + i}", UAVCAN__PUB__SERVO__FEEDBACK__ID=f"{230 + i}")


def _servo_env(ax: Axis) -> dict[str, str]:
    i = ax.index
    return base_env(UAVCAN__UDP__IFACE=ax.host.address, UAVCAN__NODE__ID=str(ax.servo),
                    UAVCAN__SUB__SETPOINT_SERVO__ID=f"{100 + i}", UAVCAN__PUB__DYNAMICS__ID=f"{130 + i}",
                    SERVO__DRIVE__BACKEND="udral", **RATES["servo"],
                    UAVCAN__PUB__DRIVE_SETPOINT__ID=f"{200 + i}", UAVCAN__PUB__DRIVE_READINESS__ID=f"{210 + i}",
                    UAVCAN__SUB__DRIVE_DYNAMICS__ID=f"{220 + i}", UAVCAN__SUB__DRIVE_FEEDBACK__ID=f"{230 + i}")


def _wait_well(nodes: list[tuple[Host, int]], proc_of: dict[int, subprocess.Popen[str]]) -> None:
    """Wait (in parallel) for a heartbeat of each (host, node-ID), OPERATIONAL and below WARNING, seen inside
    the host."""
    probes = [(nid, subprocess.Popen(host.command([sys.executable, "-m", "cyphal_common.heartbeat_probe",
                                                   "--node-id", str(nid), "--iface", host.address,
                                                   "--timeout", "180"]),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
              for host, nid in nodes]
    for nid, probe in probes:
        out, _ = probe.communicate(timeout=200)
        dead = proc_of[nid].poll()
        assert probe.returncode == 0, f"node {nid} not up (exit code {dead}): {out}"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    tmp: Path = tmp_path_factory.mktemp("multihost")
    with Network() as net, ExitStack() as stack:
        coord_host = net.add_host("h0")
        axes = [Axis(i, net.add_host(f"h{i}")) for i in (1, 2, 3)]
        procs: dict[int, subprocess.Popen[str]] = {}
        for ax in axes:
            procs[ax.drive] = stack.enter_context(
                popen(ax.host.command([*SIM_PLANT, "--registry", str(tmp / f"drive{ax.index}.db")]), _drive_env(ax)))
        _wait_well([(ax.host, ax.drive) for ax in axes], procs)
        for ax in axes:
            procs[ax.servo] = stack.enter_context(popen(ax.host.command(
                [str(BIN / "servo-node"), "-v", "run", "--registry", str(tmp / f"servo{ax.index}.db")]),
                _servo_env(ax)))
        _wait_well([(ax.host, ax.servo) for ax in axes], procs)
        rt = all([realtime(p.pid) for p in procs.values()])
        print(f"six nodes up on three hosts; SCHED_FIFO {'on' if rt else 'not permitted'}")
        clients: dict[int, HostRegisterClient] = {}
        try:
            for ax in axes:
                clients[ax.index] = HostRegisterClient(ax.host, ax.servo, 50 + ax.index)
            yield Bench(net, coord_host, axes, clients)
        finally:
            for c in clients.values():
                c.close()
    left = [n for n in namespaces() if n.startswith(net.tag)]
    assert not left, f"namespaces left behind: {left}"


class Coordinator:
    """``servo-coord move`` on the coordinator's host; its output collected by a thread as it comes."""

    def __init__(self, bench: Bench, targets: list[float], *extra: str) -> None:
        env = base_env(UAVCAN__UDP__IFACE=bench.coord_host.address, UAVCAN__NODE__ID=str(COORD_ID))
        axes = [a for ax in bench.axes for a in ("--axis", ax.spec)]
        self.proc = subprocess.Popen(
            bench.coord_host.command([*COORD, "move", *axes, "--to", ",".join(map(str, targets)), *extra]),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        realtime(self.proc.pid, 5)  # Below the nodes, above the machine's other work: its burst leaves on time.
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)
        return self.proc.returncode

    def node_durations(self) -> dict[int, float]:
        """Each node's planned duration T from the result table (rows ``node <id> from to planned T …``)."""
        rows = [line.split() for line in self.lines if line.startswith("node ")]
        return {int(r[1]): float(r[5]) for r in rows}


def _at(bench: Bench, ax: Axis, target: float) -> dict[str, Any] | None:
    m = bench.motion(ax)
    if abs(m["meas"][0] - target) < 1e-2 and isinstance(m["settled"], float):
        return m
    print(f"servo {ax.servo} not at {target}: {m} {bench.status(ax)}")
    return None


def test_coordinated_move_across_three_hosts_then_sigterm_ends_the_hold(bench: Bench) -> None:
    start = [bench.motion(ax)["meas"][0] for ax in bench.axes]
    targets = [start[0] + 2.0, start[1] - 1.5, start[2] + 3.0]
    coord = Coordinator(bench, targets)  # No --hold: it feeds the servos until a signal.
    try:
        wait_for(lambda: "straight-line deviation" in coord.text, timeout=120, what="the coordinator's result")
        for ax, t in zip(bench.axes, targets, strict=True):
            wait_for(lambda ax=ax, t=t: _at(bench, ax, t), timeout=30, what=f"servo {ax.servo} at {t}")
        coord.proc.terminate()  # SIGTERM, as `docker stop` sends it: ends the hold like Ctrl-C.
    finally:
        code = coord.wait()
    print(coord.text)
    assert code == 0 and "Traceback" not in coord.text
    assert "REJECTED" not in coord.text
    assert "start: each axis on its setpoint's reception: no motion_start subject on" in coord.text
    durations = coord.node_durations()
    assert sorted(durations) == [ax.servo for ax in bench.axes]
    assert max(durations.values()) - min(durations.values()) < 1e-3  # Every node's plan lasts the common duration.
    # Fed no more, every servo expires on its deadman, at rest where it arrived.
    for ax, t in zip(bench.axes, targets, strict=True):
        st = wait_for(lambda ax=ax: (s := bench.status(ax))["state"] == "expired" and s, timeout=30,
                      what=f"servo {ax.servo} to expire")
        m = bench.motion(ax)
        assert st["error"] == 0 and m["meas"][1] == pytest.approx(0.0, abs=1e-3)
        assert m["meas"][0] == pytest.approx(t, abs=1e-2)


def _released_at_rest(m: dict[str, Any]) -> dict[str, Any]:
    """``sys.motion`` once the force is removed with the joint at rest, as the stop defines it (|v| within
    ``servo.stop.rest_velocity``, its default 1e-3: a released frictionless joint keeps what is left of that);
    else AssertionError showing both (``wait_for`` reports the last one)."""
    assert not m["engaged"] and abs(m["meas"][1]) <= 1e-3, m
    return m


def test_cut_link_mid_move_stops_that_axis_on_its_deadman_others_finish_then_recovers(bench: Bench) -> None:
    ax1, ax2, ax3 = bench.axes
    start = [bench.motion(ax)["meas"][0] for ax in bench.axes]
    targets = [start[0] + 15.0, start[1] - 12.0, start[2] + 20.0]  # ~2.2 s together: cut well before the end
    coord = Coordinator(bench, targets, "--hold", "1")
    try:
        wait_for(lambda: abs(bench.motion(ax2)["meas"][1]) > 1.0, timeout=60, interval=0.05,
                 what="servo 12 to move")
        bench.net.cut(ax2.host)
        # Cut off, servo 12 hears no setpoint: its deadman expires and it stops, at rest short of its target.
        # Its drive shares its host and still answers: no drive-lost error.
        st = wait_for(lambda: (s := bench.status(ax2))["state"] == "expired" and s, timeout=30,
                      what="servo 12 to expire")
        m2 = wait_for(lambda: _released_at_rest(bench.motion(ax2)), timeout=30, what="servo 12 at rest, force removed")
        # The others finish their synchronised plan: the coordinator keeps feeding them until it measures.
        for ax, t in ((ax1, targets[0]), (ax3, targets[2])):
            wait_for(lambda ax=ax, t=t: _at(bench, ax, t), timeout=60, what=f"servo {ax.servo} at {t}")
        # …and it cannot read the cut-off node's result: it says so and exits 100.
        code = coord.wait(timeout=60)
    except BaseException:
        print(coord.text)
        raise
    finally:
        bench.net.restore(ax2.host)
        if coord.proc.poll() is None:
            coord.wait(0)
    print(coord.text)
    print(f"servo 12: {st['reason']}; stopped at {m2['meas'][0]:.3f} (target {targets[1]:.3f}); stop {m2['stop']}")
    assert st["error"] == 0
    assert abs(m2["meas"][0] - targets[1]) > 1.0
    _planned, actual, bound = m2["stop"]
    assert 0.0 < actual <= bound
    assert code == EXIT_CODE_UNSUCCESSFUL and "node 12: no answer" in coord.text

    # Link restored: the next coordinated move takes all three again.
    back = [0.0, 0.0, 0.0]
    time.sleep(1.0)  # Let a heartbeat cross the restored link first (the coordinator reads registers at once).
    again = Coordinator(bench, back, "--hold", "0.3")
    code = again.wait(timeout=120)
    print(again.text)
    assert code == 0 and "REJECTED" not in again.text
    for ax in bench.axes:
        wait_for(lambda ax=ax: _at(bench, ax, 0.0), timeout=30, what=f"servo {ax.servo} back at 0")
        assert bench.status(ax)["error"] == 0
