"""Real drives' object dictionaries: every EDS/DCF of ``../shared/eds`` loaded into the emulated drive, a real
``servo-node`` on the ``cia402`` backend, and the bring-up's result — it moves 0 → 3 and stops at rest, or it
refuses with one line naming the drive, the object and the reason (:data:`EXPECTED`; a file this table does not
know must do one or the other too).

The files are found in ``$CYPHAL_SERVO_EDS_DIR`` or ``<repo>/../shared/eds`` (as ``tests/dsdl/test_compat.py`` finds
the DSDL reference); the cases are skipped only when it is absent. Each case: its emulator in this process (drive
node-ID = the file's place in the sorted list), a servo node of one axis for it on a private udpmc bus, the
bring-up's result, the move, both closed. Motion is judged from the drive's own readings: its
joint's position and velocity and its state machine, never from the servo's view alone and never by wall-clock
speed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sim_plant import JointParams
from sim_plant_node.cia402 import Emulator
from sim_plant_node.cia402._statemachine import State
from tests.procs import BIN, RegisterClient, base_env, popen, servo_node, wait_for
from tests.system.cia402_joints import REST_V, Readings, private_iface

REPO = Path(__file__).resolve().parents[2]
EDS_DIR = Path(os.environ.get("CYPHAL_SERVO_EDS_DIR") or REPO.parent / "shared" / "eds")
FILES = sorted(p for p in EDS_DIR.glob("*") if p.suffix.lower() in (".eds", ".dcf")) if EDS_DIR.is_dir() else []

NODE, CLIENT, SETPOINT = 3761, 3762, 3700
"""Uncommon Cyphal node-IDs and subject."""
TARGET = 3.0
PARAMS = JointParams(max_velocity=100.0, max_force=1000.0)
"""A strong joint: a file's 0x6072 may allow 10 % of it (Nanotec's default 100 ‰)."""

MOVES = "moves"
UNITS = "gives 0.159 counts per unit (< 100): set servo.drive.canopen.counts_per_unit"
EXPECTED = {
    "Elmo_Gold.dcf": f"(Elmo Motion Control, Gold Drive): 0x6092 = 1/1 {UNITS}",
    "Elmo_SimplIQ.dcf": f"(Elmo Motion Control, product 0x00000000): 0x608F = 1/1 {UNITS}",
    "Faulhaber_MCBL300x_CO_605.3150.67-B-EK-2-60.eds":
        "(Faulhaber, MCBL300...CO): 0x6502 = 0x00000025 offers no streaming mode (CSP, CSV, CST, IP)",
    "Nanotec_C5-E-2-09.eds": MOVES,
    "Nanotec_CL3-E-2-0F.eds": MOVES,
    "Pilz_PRBT_prbt_0_1.dcf": MOVES,
    "Schunk_0_63.dcf": MOVES,
    "Schunk_PRL120.eds": MOVES,
    "Schunk_scanned.eds": MOVES,
    "Technosoft_ISD860.eds": MOVES,
    "Technosoft_iPOS_rev04.eds": MOVES,
    "Technosoft_iPOS_rev05.eds": f"(Technosoft, iPOS): 0x6092 = 1/1 {UNITS}",
    "maxon_EPOS2_50-5_347717.eds":
        "(maxon motor, EPOS2 50/5): 0x6502 = 0x00000020 offers no streaming mode (CSP, CSV, CST, IP)",
}
"""What each file of ../shared/eds gives: :data:`MOVES`, or the refusal after ``CANopen drive N``. Why: see
``docs/cia402.md`` ("Real drives' dictionaries")."""

pytestmark = pytest.mark.skipif(not FILES, reason=f"no EDS/DCF files in {EDS_DIR} (set CYPHAL_SERVO_EDS_DIR)")


@dataclass
class Rig:
    iface: str
    env: dict[str, str]
    reader: RegisterClient

    def status(self) -> dict[str, Any]:
        return dict(self.reader.json("sys.status")["servo"])

    def drive(self) -> dict[str, Any]:
        return dict(self.reader.json("sys.drive"))

    def motion(self) -> dict[str, Any]:
        return dict(self.reader.json("sys.motion"))


@contextmanager
def servo(iface: str, nid: int, tmp: Path) -> Iterator[Rig]:
    """A servo node of one ``cia402`` axis commanding drive ``nid`` on ``iface`` (its SYNC, its heartbeat as master
    127). Its own process per file: one drive's bring-up, retries and loop never load another's case. Heartbeats
    of 0.5 s (each side watches 1.5 s) and a 2 s feedback timeout: what the case judges is the bring-up and the
    motion, not the watch's timing, and a loaded host's stalls must not be taken for a lost peer (the scenario runs
    real-time where permitted, the emulator's threads too: ``tests/system/`` is a ``bus`` scenario)."""
    env = base_env(
        UAVCAN__NODE__ID=str(NODE),
        UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT),
        SERVO__DRIVE__BACKEND="cia402",
        SERVO__DRIVE__MODE="position",
        SERVO__DRIVE__CAN__IFACE=iface,
        SERVO__DRIVE__CANOPEN__NODE_ID=str(nid),
        SERVO__DRIVE__CANOPEN__HEARTBEAT="0.5",
        SERVO__DRIVE__FEEDBACK_TIMEOUT="2",
        SERVO__PROFILE__VELOCITY="-10 10",
        SERVO__PROFILE__ACCELERATION="-50 50",
        SERVO__PROFILE__JERK="500",
    )
    with servo_node(env, tmp / "servo.db", NODE, log=tmp / "servo.log"):
        reader = RegisterClient(env, NODE, CLIENT + 1)
        try:
            yield Rig(iface, env, reader)
        finally:
            reader.close()


def _publishing(rig: Rig, target: float) -> Any:
    """Setpoints at 10 Hz (the deadman is 0.5 s) until the block ends."""
    e = {k: v for k, v in rig.env.items() if not k.startswith(("SERVO__", "SIM__", "UAVCAN__SUB__"))}
    e["UAVCAN__NODE__ID"] = str(CLIENT)
    return popen([str(BIN / "y"), "pub", "-T", "0.1", f"{SETPOINT}:uavcan.primitive.scalar.real32", str(target)], e)


@pytest.mark.parametrize("eds", FILES, ids=[p.name for p in FILES])
def test_a_real_drives_dictionary_moves_or_is_refused_in_one_line(eds: Path, tmp_path: Path) -> None:
    """The emulator presents the file's dictionary; the servo comes up and moves 0 → 3, the joint stopping at rest
    before the drive is disabled, or refuses with the exact line of :data:`EXPECTED`, the drive never enabled."""
    nid = FILES.index(eds) + 1
    name = f"CANopen drive {nid}"
    expected = EXPECTED.get(eds.name)
    iface = private_iface()
    emulator = Emulator(PARAMS, nid, iface, eds=str(eds)).start()
    readings = Readings(emulator)
    try:
        with servo(iface, nid, tmp_path) as rig:
            _judge(rig, emulator, readings, eds.name, name, expected)
    finally:
        readings.close()
        emulator.close()


def _judge(rig: Rig, emulator: Emulator, readings: Readings, file: str, name: str, expected: str | None) -> None:
    t0 = time.monotonic()

    def outcome() -> dict[str, Any] | None:
        s, d = rig.status(), rig.drive()
        if d.get("state") == "SWITCHED ON" or (s["error"] == 11 and s["reason"].startswith(f"{name} (")):
            return {"status": s, "drive": d}
        return None

    # Generous: the servo's first bring-up may wait for kernels compiling on a loaded host.
    got = wait_for(outcome, timeout=180, interval=0.1, what=f"{file}: the bring-up's result")
    up_s = time.monotonic() - t0
    assert emulator.drive is not None and emulator.plant is not None
    if got["drive"].get("state") != "SWITCHED ON":
        reason = got["status"]["reason"]
        print(f"{file}: refused after {up_s:.1f} s: {reason}")
        assert expected != MOVES, f"{file} was to move: {reason}"
        if expected is not None:
            assert reason == f"{name} {expected}"
        else:
            assert reason.startswith(f"{name} (") and "0x" in reason, reason
        time.sleep(0.5)
        assert 4 not in emulator.drive.transitions and emulator.drive.state is not State.OPERATION_ENABLED
        assert abs(emulator.plant.sample().position) <= 1e-3
        return
    d = got["drive"]
    assert expected in (MOVES, None), f"{file} came up ({d}), expected the refusal {expected!r}"
    plant, drive = emulator.plant, emulator.drive
    with _publishing(rig, TARGET):

        def arrived() -> dict[str, Any] | None:
            m = rig.motion()
            return m if isinstance(m["settled"], float) and abs(plant.sample().position - TARGET) < 0.01 else None

        m = wait_for(arrived, timeout=120, interval=0.1, what=f"{file}: arrival at {TARGET}")
    wait_for(lambda: drive.state is State.SWITCHED_ON, timeout=60, what=f"{file}: Disable Operation after the stop")
    time.sleep(0.3)
    readings.close()
    moving_unpowered, last = readings.moving_unpowered(), readings.last(0.3)
    print(f"{file}: up after {up_s:.1f} s in {d['mode']}, units {d.get('units')}, watch {d.get('watch')}; "
          f"settled {m['settled']:.3f} s, track_max {m['track_max']:.3g}; the joint at "
          f"{readings.samples[-1][1]:.5f}, |v| <= {max(abs(s[2]) for s in last):.2g} over its last 0.3 s")
    assert not moving_unpowered, moving_unpowered[:3]
    assert last and all(abs(s[1] - TARGET) < 0.01 and abs(s[2]) <= REST_V for s in last), last[-3:]
