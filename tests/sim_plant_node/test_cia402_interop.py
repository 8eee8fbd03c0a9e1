"""Interop: ``sim-plant --canopen`` as a separate process on a ``udpmc:`` CAN bus, driven by canopen's own
``BaseNode402`` (an independent master: setup_402_state_machine, state, op_mode, targets by PDO with SYNC)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from .canopen_master import COUNTS, Master, emulator_process, private_udpmc_iface
from .conftest import SIM_PLANT, clean_env

NODE_ID = 23
PERIOD = 0.005


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Master]:
    """The emulator process on a private udpmc group, and a master in this process brought to OPERATIONAL."""
    iface = private_udpmc_iface()
    log_path = tmp_path_factory.mktemp("cia402") / "sim_plant.log"
    with emulator_process(SIM_PLANT, iface, NODE_ID, clean_env(), log_path) as proc:
        m = Master(iface, NODE_ID)
        try:
            try:
                m.wait_for_drive(timeout=120.0, boot=True)
            except Exception:
                pytest.fail(f"the emulator did not answer (exit code {proc.poll()}):\n{log_path.read_text()}")
            m.bring_up(PERIOD)
            yield m
        finally:
            m.close()


CRUISING_SAMPLES = 20
"""TPDOs received at the target velocity before it is set back to 0 (each must show the target)."""


def test_base_node_402_drives_csv_and_reads_the_motion_back(master: Master) -> None:
    """Enabled through the state machine in CSV, a target velocity streamed by RPDO moves the joint: the TPDO's
    velocity settles on the target and the position advances with it, never beyond its integral."""
    node = master.node
    assert node.is_op_mode_supported("CYCLIC SYNCHRONOUS VELOCITY")
    assert not node.is_op_mode_supported("PROFILED POSITION")
    node.op_mode = "CYCLIC SYNCHRONOUS VELOCITY"
    assert node.op_mode == "CYCLIC SYNCHRONOUS VELOCITY"
    node.state = "OPERATION ENABLED"
    assert node.state == "OPERATION ENABLED"
    target = 1.5
    t0 = time.monotonic()
    node.rpdo[3]["Target velocity"].raw = round(target * COUNTS)
    master.wait("the target velocity", lambda: any(abs(s[3] / COUNTS - target) < 1e-3 for s in master.since(t0)))
    reached = next(s[0] for s in master.since(t0) if abs(s[3] / COUNTS - target) < 1e-3)
    # Half a second of cruising, in samples received, however starved this process is (ci38: 5 samples in a 0.5 s
    # sleep that took 13 s).
    master.wait("cruising samples", lambda: len(x := master.since(reached)) > CRUISING_SAMPLES
                and x[-1][0] - reached >= 0.5)
    t_zero = time.monotonic()
    node.rpdo[3]["Target velocity"].raw = 0
    t1 = time.monotonic()
    master.wait("rest", lambda: any(s[3] == 0 for s in master.since(t1)))
    time.sleep(0.1)
    samples = master.since(t0)
    assert len(samples) > 50
    _, _, p0, _ = samples[0]
    _, _, p1, _ = samples[-1]
    integral = 0.0
    for (ta, _, _, va), (tb, _, _, vb) in itertools.pairwise(samples):
        integral += 0.5 * (va + vb) / COUNTS * (tb - ta)  # Reception times: the TPDOs are sent at each SYNC.
    moved = (p1 - p0) / COUNTS
    print(f"moved {moved:.4f}, reported velocity integrated over the receptions {integral:.4f}")
    assert moved > 0.5
    # Never farther than the target velocity takes it in the time that passed (the reported velocity never exceeds
    # it: checked below), and at least half the reported velocity's integral. Not bounded by that integral from
    # above: it is taken over this process's reception times, and this process is not real-time here (TPDOs
    # received in bunches after a stall shrink it: CI measured 1.209 moved against 0.934 integrated). Less is
    # allowed down to half: the emulator's joint is simulated in real time and a starved host loses simulated time.
    elapsed = samples[-1][0] - t0  # At rest before t0; the last sample was taken before it was received.
    assert 0.5 * integral < moved < 1.05 * target * elapsed + 0.02, (moved, integral, elapsed)
    cruising = [s[3] / COUNTS for s in samples if reached <= s[0] < t_zero]
    assert len(cruising) > CRUISING_SAMPLES and max(abs(v - target) for v in cruising) < 1e-3
    assert all(s[1] & 0x6F == 0x27 for s in samples)  # OPERATION ENABLED throughout.
    node.state = "SWITCH ON DISABLED"
    assert node.state == "SWITCH ON DISABLED"
