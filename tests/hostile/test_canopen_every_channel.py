"""The stop by every channel as a CiA 402 drive sees it, in process on a ``virtual:`` bus: the servo's real ``cia402``
drive (its bus thread, worker and canopen stack) against the emulated drive, the loop's command written into the link
as the loop writes it, a stranger's one SYNC as the loss of control (issue 49).

* CI run 25's runaway: the worker, as on a starved host, ran its stop late; the cycle meanwhile sent Disable
  Operation (the drive SWITCHED ON, ramping down), and the worker's Quick Stop by SDO then took transition 10 to
  SWITCH ON DISABLED: motor off mid-ramp, a frictionless joint coasting for good. The first command must be Quick Stop.
* CI run 34's silence: a stop found the joint at rest, and the load of a brakeless axis moved it afterwards (or the
  drive's readings were late); the servo kept saying "at rest". It must keep reading the joint and say
  "uncontrollable" once it moves again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from servo_node.drive import _remote_link as link
from servo_node.drive.cia402 import _escalate, _network
from servo_node.drive.cia402._bringup import Settings
from servo_node.drive.cia402._context import DriveContext
from servo_node.drive.cia402._drive import Cia402Drive
from sim_plant import JointParams
from sim_plant_node.cia402 import Emulator
from tests.hostile.canopen_stranger import stranger
from tests.procs import wait_for

DRIVE_ID = 23
MASTER_ID = 120
COUNTS = 10000.0
"""The emulated drive's counts per unit (its default)."""
CRUISE = 10.0
WORKER_LATE_S = 0.05
"""How late the worker starts its stop (a thread a loaded host schedules late): five cycles at 100 Hz, within the
drive's own 0.2 s ramp down."""
V_REST = 0.05
_channels = itertools.count()


Start = Callable[[float], tuple[Cia402Drive, Emulator, str]]


@pytest.fixture
def servo_and_drive() -> Iterator[Start]:
    """Factory: the emulated drive (its joint under a constant ``load``) and the servo's drive (CSV, 100 Hz, SYNC
    producer), brought up, on a private bus. The master's heartbeat every 0.5 s (the drive's consumer time 1.5 s):
    both live in this one process, which a loaded host starves for longer than 0.3 s (with a 0.1 s heartbeat a CI
    run's drive faulted on the master's silence before the stranger's frame, and the fault was its own)."""
    opened: list[tuple[Cia402Drive, Emulator]] = []

    def start(load: float) -> tuple[Cia402Drive, Emulator, str]:
        iface = f"virtual:every-channel-{next(_channels)}"
        emulator = Emulator(JointParams(max_velocity=100.0, max_force=100.0, load=load), DRIVE_ID, iface).start()
        settings = Settings(node_id=DRIVE_ID, law="velocity", counts_per_unit=COUNTS, rated_torque=0.0, period_s=0.01,
                            heartbeat_s=0.5, master_id=MASTER_ID, timeout_s=1.0, homing_method=0, home_offset=0.0,
                            inertia=1.0, compensation=False, lost_after_s=1.0, velocity_limit=CRUISE,
                            acceleration_limit=50.0)
        drive = Cia402Drive(_network.acquire(iface, 1_000_000, 100.0, True, MASTER_ID, 0.5), settings)
        opened.append((drive, emulator))
        drive.start()
        wait_for(lambda: drive.c.up, timeout=30, what=f"the bring-up: {drive.fault()}")
        return drive, emulator, iface

    try:
        yield start
    finally:
        for drive, emulator in opened:
            drive.close()
            emulator.close()


def _command(drive: Cia402Drive, v: float) -> None:
    """What the loop writes each tick: engaged, this velocity, the envelope's force beside it."""
    link.command(drive.arrays, time.monotonic(), True, v, 100.0, np.full(5, np.nan))


def _velocity(emulator: Emulator) -> float:
    assert emulator.drive is not None
    return (emulator.drive.read(0x606C) or 0) / COUNTS


def test_a_lost_drive_gets_quick_stop_first_however_late_the_worker(
    servo_and_drive: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    drive, emulator, iface = servo_and_drive(0.0)
    assert emulator.drive is not None

    def late_stop(c: DriveContext) -> None:
        time.sleep(WORKER_LATE_S)
        _escalate.stop_by_every_channel(c)

    monkeypatch.setattr("servo_node.drive.cia402._worker.stop_by_every_channel", late_stop)
    _command(drive, CRUISE)
    wait_for(lambda: abs(_velocity(emulator) - CRUISE) < 1e-3, timeout=30, what="cruising")
    with stranger(iface, DRIVE_ID) as s:
        before = len(emulator.drive.transitions)
        s.network.send_message(0x80, b"")  # One SYNC the servo did not send: another master.
        fault = wait_for(lambda: drive.fault(), timeout=10, what="the loss of control")
        assert "SYNC COB-ID 0x080" in fault[1], fault
        samples: list[float] = []

        def at_rest() -> bool:
            samples.append(_velocity(emulator))
            return len(samples) >= 5 and all(abs(v) <= V_REST for v in samples[-5:])

        try:
            wait_for(at_rest, timeout=CRUISE / 50.0 + 10.0, interval=0.05, what="the joint at rest")
        finally:
            taken = emulator.drive.transitions[before:]
            print(f"velocities {samples[:3]} … {samples[-3:]}; transitions {taken}; {drive.events()}")
        assert taken and taken[0] == 11, f"the drive's transitions after the loss: {taken} (11: Quick Stop)"
        p = emulator.drive.read(0x6064)
        time.sleep(0.3)
        assert emulator.drive.read(0x6064) == p, "the joint still moves"


SLOW_LOAD = 0.02
"""A load so small (J = 1: 0.02 unit/s²) that the joint, its motor off, is still within rest (0.05 unit/s) for 2.5 s:
the stop finds it at rest, and it moves afterwards [N·m]."""


def test_a_joint_that_moves_after_the_stop_found_it_at_rest_is_reported_uncontrollable(
    servo_and_drive: Start,
) -> None:
    drive, emulator, iface = servo_and_drive(SLOW_LOAD)
    _command(drive, 0.0)  # Holding against the load.
    time.sleep(0.3)
    notes: list[str] = []
    with stranger(iface, DRIVE_ID) as s:
        s.network.send_message(0x80, b"")

        def said(text: str) -> bool:
            notes.extend(drive.events())
            return any(text in n for n in notes)

        wait_for(lambda: said("at rest"), timeout=10, what="the stop's first verdict")
        v_at_rest = _velocity(emulator)
        try:
            wait_for(lambda: said("uncontrollable"), timeout=30, what="the joint moving again, reported")
        finally:
            print("\n".join(notes))
        fault = drive.fault()
        assert fault is not None and "uncontrollable" in fault[1], fault
        assert any("moves again after the stop" in n for n in notes), notes
        assert abs(v_at_rest) <= V_REST < abs(_velocity(emulator))
