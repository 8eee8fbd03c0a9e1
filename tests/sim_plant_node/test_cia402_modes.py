"""The emulated drive's modes beyond CSV, by SDO and PDO from canopen's ``BaseNode402`` on a ``virtual:`` bus:
CSP (interpolating position loop with feed-forward, target reached, following error), CST (torque in ‰ of 0x6076),
homing on the current position only when commanded; and the plant's CSP interpolator on its own."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest

from sim_plant import JointParams
from sim_plant_node._plant import Mode, Plant
from sim_plant_node.cia402 import Emulator

from .canopen_master import COUNTS, Master

NODE_ID = 44
IFACE = "virtual:cia402-modes"
PARAMS = JointParams(max_velocity=100.0, max_force=100.0, inertia=2.0)


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[Emulator, Master]]:
    """One emulator (inertia 2, rated torque 100 N·m) and a master in OPERATIONAL with SYNC, shared by the module."""
    emulator = Emulator(PARAMS, NODE_ID, IFACE).start()
    master = Master(IFACE, NODE_ID)
    try:
        master.wait_for_drive()
        master.bring_up()
        yield emulator, master
    finally:
        master.close()
        emulator.close()


@pytest.fixture
def master(bench: tuple[Emulator, Master]) -> Iterator[Master]:
    """The shared master; the drive back in SWITCH ON DISABLED with zero targets afterwards."""
    m = bench[1]
    yield m
    m.node.state = "SWITCH ON DISABLED"
    for name in ("Target position", "Velocity offset"):
        m.node.rpdo[2][name].raw = 0
    for name in ("Target velocity", "Target torque"):
        m.node.rpdo[3][name].raw = 0


def _enable(master: Master, mode: str) -> None:
    master.node.op_mode = mode
    master.node.state = "OPERATION ENABLED"


def test_plant_interpolator_extrapolates_then_holds() -> None:
    """track(): from rest, the joint follows p + a·τ²/2 from the call on, and past the horizon stays where it got
    (the velocity reference drops to 0 there; the position loop pulls back the overshoot that step leaves)."""
    plant = Plant(PARAMS, 1000.0)
    plant.start()
    try:
        before = plant.sample().sim_time  # The reference starts at the physics' time of the call: between these.
        plant.track(0.0, 0.0, 4.0, 10.0, PARAMS.max_force, horizon=0.6)
        s = after = plant.sample()
        while s.sim_time - before < 0.1:
            time.sleep(0.01)
            s = plant.sample()
        late, early = s.sim_time - after.sim_time, s.sim_time - before
        assert s.mode is Mode.TRACK and early < 0.6  # Simulated time: a stall of the host longer than 0.5 s fails.
        tol = 1e-2 * 4.0 * early  # Within 10 ms of the reference's motion.
        assert 2.0 * late * late - tol < s.position < 2.0 * early * early + tol, (late, early, s.position)
        assert 4.0 * late - 1e-2 < s.velocity < 4.0 * early + 1e-2, (late, early, s.velocity)
        while s.sim_time - before < 1.5:
            time.sleep(0.05)
            s = plant.sample()
        assert abs(s.position - 2.0 * 0.6**2) < 1e-2 and abs(s.velocity) < 1e-2
    finally:
        plant.close()


def test_csp_reaches_a_target_and_reports_following_error(master: Master) -> None:
    """A position target is reached (target reached bit 10) through the drive's loop; beyond the following error
    window for longer than its timeout, bit 13 and the warning bit show, and 0x60F4 holds the error."""
    node = master.node
    start = master.position()
    _enable(master, "CYCLIC SYNCHRONOUS POSITION")
    node.rpdo[2]["Target position"].raw = round((start + 0.3) * COUNTS)
    master.wait("target reached", lambda: master.statusword() & 0x0400 and abs(master.position() - start - 0.3) < 1e-3)
    assert master.statusword() & 0x3000 == 0x1000  # Following the command value; no following error.
    node.sdo[0x6065].raw = 100  # 0.01 unit window…
    node.sdo[0x6066].raw = 20  # …for 20 ms.
    node.rpdo[2]["Target position"].raw = round((start + 3.0) * COUNTS)
    master.wait("following error", lambda: master.statusword() & 0x2080 == 0x2080)
    assert abs(node.sdo[0x60F4].raw) > 100
    master.wait("target reached again", lambda: master.statusword() & 0x2400 == 0x0400)
    node.sdo[0x6065].raw = 5000
    node.sdo[0x6066].raw = 200


def test_csp_streamed_ramp_follows_with_velocity_feed_forward(master: Master) -> None:
    """A master streaming p(t) = v·t with the velocity offset v, each target sent right before its SYNC (as a
    servo does): the joint moves at v and the drive's following error at each SYNC stays within the latency of
    the SYNC's processing (the interpolator extrapolates between SYNCs, the position is latched at the SYNC),
    far inside a servo's 1e-2."""
    node = master.node
    p0 = master.position()
    _enable(master, "CYCLIC SYNCHRONOUS POSITION")
    master.network.sync.stop()  # This test sends SYNC itself, each right after its target.
    node.rpdo[2].stop()
    try:
        v = 1.0
        node.rpdo[2]["Velocity offset"].raw = round(v * COUNTS)
        t0 = time.monotonic()
        errors: list[float] = []
        node.tpdo[3].add_callback(lambda m: errors.append(m["Following error actual value"].raw / COUNTS))
        while (now := time.monotonic()) - t0 < 1.0:
            node.rpdo[2]["Target position"].raw = round((p0 + v * (now - t0)) * COUNTS)
            node.rpdo[2].transmit()
            master.network.sync.transmit()
            time.sleep(0.04)
        final = p0 + v * (time.monotonic() - t0)
        velocities = sorted(s[3] / COUNTS for s in master.since(t0 + 0.15))
        assert abs(velocities[len(velocities) // 2] - v) < 0.03 * v  # Median again, as a loaded host stalls.
        # Median (a loaded host delays some SYNCs) within 10 ms of motion; a loop pulling toward each target until
        # the next would lag by the order of the SYNC period (40 ms), one without feed-forward v / sim.control_p.
        late = sorted(abs(e) for e in errors[len(errors) // 4 :])
        assert len(late) > 10 and late[len(late) // 2] < v * 0.01, late
        node.rpdo[2]["Velocity offset"].raw = 0
        node.rpdo[2]["Target position"].raw = round(final * COUNTS)
        node.rpdo[2].transmit()
        master.network.sync.transmit()
    finally:
        node.tpdo[3].callbacks.pop()
        master.network.sync.start(0.005)
        node.rpdo[2].start(0.005)


def test_cst_torque_in_per_mille_of_rated(master: Master) -> None:
    """0x6071 = 100 ‰ of 100 N·m on inertia 2: 5 unit/s², torque actual 100 ‰."""
    node = master.node
    _enable(master, "CYCLIC SYNCHRONOUS TORQUE")
    assert node.sdo[0x6076].raw == 100000
    v0 = master.velocity()
    t0 = time.monotonic()
    node.rpdo[3]["Target torque"].raw = 100
    master.wait("torque applied", lambda: node.sdo[0x6077].raw == 100)
    time.sleep(0.3)
    dv, dt = master.velocity() - v0, time.monotonic() - t0
    assert 0.5 * 5.0 * 0.3 < dv < 5.0 * dt * 1.1
    node.rpdo[3]["Target torque"].raw = 0


def test_homing_on_the_current_position_only_when_commanded(master: Master) -> None:
    """Mode 6, method 37: nothing happens until controlword bit 4 rises; then position actual = home offset,
    homing attained and target reached, with the joint where it was."""
    node = master.node
    node.sdo[0x607C].raw = 12345
    node.sdo[0x6098].raw = 37
    _enable(master, "HOMING")
    time.sleep(0.1)
    assert master.statusword() & 0x3400 == 0  # In progress / not started.
    assert node.sdo[0x6064].raw != 12345
    assert node.homing(timeout=10.0)
    assert abs(node.sdo[0x6064].raw - 12345) <= 1
    assert master.statusword() & 0x3400 == 0x1400
    assert math.isclose(master.velocity(), 0.0, abs_tol=1e-3)
