"""Boot and faults as real drives do them, against emulated drives (in this process, their joints read directly,
:mod:`tests.system.cia402_joints`, or as processes, their joints read by SDO) and a real ``servo-node`` on the
``cia402`` backend, on a private udpmc bus: several drives on one bus where one faulting stops only its own axis, a
drive that takes seconds to boot, a fault reset that needs controlword bit 7 held, and homing by a limit switch
(method 17) beside the current position (35).

The scenarios run real-time where permitted (``tests/system/`` is a ``bus`` scenario: this thread, the drives'
threads it starts and the servo under SCHED_FIFO); heartbeats of 0.5 s (each side watches 1.5 s) and a 2 s
feedback timeout keep a loaded host's stalls from being taken for a lost peer all the same. Every wait is generous
and none is asserted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from sim_plant import JointParams
from sim_plant_node.cia402 import Emulator
from sim_plant_node.cia402._statemachine import State
from tests.procs import BIN, SIM_PLANT, RegisterClient, base_env, popen, realtime, servo_node, wait_for, y
from tests.sim_plant_node.canopen_master import Master
from tests.system.cia402_joints import REST_V, Readings, private_iface

NODE, CLIENT, SETPOINT = 3771, 3772, 3780
"""Uncommon Cyphal node-IDs and subjects (axis k: SETPOINT + k)."""
PARAMS = JointParams(max_velocity=100.0, max_force=1000.0)
TOLERANT = {"HEARTBEAT": "0.5", "FEEDBACK_TIMEOUT": "2"}


def _env(iface: str, axes: list[str], extra: dict[str, str] | None = None) -> dict[str, str]:
    """A servo node of ``axes`` (one axis: the registers without prefix), drive node-IDs 1…n on ``iface``."""
    env = base_env(UAVCAN__NODE__ID=str(NODE))
    if len(axes) > 1:
        env["SERVO__AXES"] = " ".join(axes)
    for k, axis in enumerate(axes):
        p = f"{axis.upper()}__" if len(axes) > 1 else ""
        env.update({
            f"UAVCAN__SUB__{p}SETPOINT_SERVO__ID": str(SETPOINT + k),
            f"{p}SERVO__DRIVE__BACKEND": "cia402",
            f"{p}SERVO__DRIVE__CAN__IFACE": iface,
            f"{p}SERVO__DRIVE__CANOPEN__NODE_ID": str(k + 1),
            f"{p}SERVO__DRIVE__CANOPEN__HEARTBEAT": TOLERANT["HEARTBEAT"],
            f"{p}SERVO__DRIVE__FEEDBACK_TIMEOUT": TOLERANT["FEEDBACK_TIMEOUT"],
            f"{p}SERVO__PROFILE__VELOCITY": "-10 10",
            f"{p}SERVO__PROFILE__ACCELERATION": "-50 50",
            f"{p}SERVO__PROFILE__JERK": "500",
        })
        env.update({f"{p}{k_}": v for k_, v in (extra or {}).items()})
    return env


@contextmanager
def _servo(env: dict[str, str], tmp: Path) -> Iterator[RegisterClient]:
    with servo_node(env, tmp / "servo.db", NODE, log=tmp / "servo.log"):
        reader = RegisterClient(env, NODE, CLIENT + 1)
        try:
            yield reader
        finally:
            reader.close()


def _publishing(env: dict[str, str], targets: list[float]) -> Any:
    """Setpoints at 10 Hz to axis k's subject (the deadman is 0.5 s) until the block ends."""
    e = {k: v for k, v in env.items() if "SERVO__" not in k and not k.startswith(("SIM__", "UAVCAN__SUB__"))}
    e["UAVCAN__NODE__ID"] = str(CLIENT)
    args = [a for k, t in enumerate(targets) for a in (f"{SETPOINT + k}:uavcan.primitive.scalar.real32", str(t))]
    return popen([str(BIN / "y"), "pub", "-T", "0.1", "--", *args], e)


def _state(em: Emulator) -> State:
    """The emulated drive's state machine's state."""
    assert em.drive is not None
    return em.drive.state


def test_one_drive_faulting_on_a_shared_bus_stops_only_its_own_axis(tmp_path: Path) -> None:
    """Three drives on one bus (one SYNC, one network), each its own ``sim-plant --canopen`` process, the middle one
    faulting (over-current) mid-move: its axis reports error 11 with the code and stops; the other two arrive, their
    drives never leave OPERATION ENABLED meanwhile (no fault, no quick stop), and stop at rest when setpoints end;
    the faulted axis's re-arm brings only it back. Where each joint ended is read by SDO from each drive by an
    independent canopen master once the servo has exited."""
    iface, axes, targets = private_iface(), ["a", "b", "c"], [2.0, 3.0, -1.0]
    env = _env(iface, axes)
    with ExitStack() as stack:
        plants = [stack.enter_context(popen(
            [*SIM_PLANT, "--registry", ":memory:", "--canopen", str(k + 1), "--can", iface],
            base_env(**({"SIM_PLANT_CANOPEN_FAULT_AFTER": "0.3"} if k == 1 else {}))))
            for k in range(3)]
        with _servo(env, tmp_path) as reader:
            for a in axes:
                wait_for(lambda a=a: reader.json(f"{a}.sys.drive").get("state") == "SWITCHED ON", timeout=180,
                         what=f"{a}'s drive brought up")
            for proc in plants:
                realtime(proc.pid)  # As deployed, once up (their kernels loaded).
            seen: dict[str, set[str]] = {a: set() for a in axes}

            def arrived(k: int) -> bool:
                d, m = reader.json(f"{axes[k]}.sys.drive"), reader.json(f"{axes[k]}.sys.motion")
                seen[axes[k]].add(d.get("state", "?"))
                return isinstance(m["settled"], float) and abs(m["meas"][0] - targets[k]) < 0.01

            with _publishing(env, targets):
                wait_for(lambda: "0x2310" in (s := reader.json("b.sys.status")["servo"])["reason"]
                         and s["error"] == 11, timeout=60, what="b's drive fault, error 11 with its code")
                for k in (0, 2):
                    wait_for(lambda k=k: arrived(k), timeout=120, interval=0.05, what=f"{axes[k]} at {targets[k]}")
                    assert reader.json(f"{axes[k]}.sys.status")["servo"]["error"] == 0
            for k in (0, 2):
                wait_for(lambda k=k: reader.json(f"{axes[k]}.sys.drive")["state"] == "SWITCHED ON", timeout=60,
                         what=f"{axes[k]} disabled after its stop")
            print(f"drive states seen while a and c moved: {seen}")
            assert all(seen[a] <= {"SWITCHED ON", "OPERATION ENABLED"} for a in ("a", "c")), seen
            assert reader.json("b.sys.drive")["state"] == "FAULT"
            y("cmd", "-T", "20", str(NODE), str(0x7E00), "b", env=env)
            wait_for(lambda: reader.json("b.sys.drive")["state"] == "SWITCHED ON", timeout=60, what="b re-armed")
            wait_for(lambda: reader.json("b.sys.status")["servo"]["state"] == "standby", timeout=30,
                     what="b out of its error")
            assert all(reader.json(f"{a}.sys.status")["servo"]["state"] in ("expired", "standby") for a in axes)
        for k in range(3):
            master = Master(iface, k + 1)
            try:
                q, v = master.position(), master.velocity()
                print(f"{axes[k]}: the drive's joint at {q:.4f}, velocity {v:g}")
                assert v == 0.0
                assert abs(q - targets[k]) < 0.01 if k != 1 else 0.0 < q < targets[k] - 0.01, q  # b stopped short.
            finally:
                master.close()


@pytest.mark.parametrize("boot_timeout", [60.0, 1.0])
def test_a_slow_booting_drive_is_waited_for_and_a_held_fault_reset_clears_its_fault(
    boot_timeout: float, tmp_path: Path
) -> None:
    """A drive silent for 4 s after power-on (no SDO, no heartbeat, then its boot-up): within
    ``servo.drive.canopen.boot_timeout`` no error, past it error 11 naming the register; either way it comes up
    once booted. Then a fault (over-current) that resets only with controlword bit 7 held 0.5 s: the re-arm holds
    it and the drive is back, SWITCHED ON."""
    iface = private_iface()
    env = _env(iface, ["x"], {"SERVO__DRIVE__CANOPEN__BOOT_TIMEOUT": str(boot_timeout)})
    with _servo(env, tmp_path) as reader:
        em = Emulator(PARAMS, 1, iface, boot_delay=4.0, fault_reset_hold=0.5, fault_after=0.3).start()
        try:
            assert em.drive is not None and em.plant is not None
            errors: set[str] = set()
            while not em.booted.is_set():
                s = reader.json("sys.status")["servo"]
                if s["error"] == 11:
                    errors.add(s["reason"])
                time.sleep(0.1)
            wait_for(lambda: reader.json("sys.drive").get("state") == "SWITCHED ON", timeout=60, what="up once booted")
            print(f"boot_timeout {boot_timeout:g} s: errors while it booted: {errors}")
            if boot_timeout > 10:
                assert not errors, errors
            else:
                assert errors and all(e.startswith("CANopen drive 1: no answer from CANopen node-ID 1") for e in errors)
                log = (tmp_path / "servo.log").read_text()  # sys.status shortens the reason to its 255 bytes.
                assert "(none within servo.drive.canopen.boot_timeout 1 s)" in log
            wait_for(lambda: reader.json("sys.status")["servo"]["state"] == "standby", timeout=30, what="standby")
            with _publishing(env, [3.0]):
                wait_for(lambda: "0x2310" in (s := reader.json("sys.status")["servo"])["reason"] and s["error"] == 11,
                         timeout=60, what="the fault, error 11 with its code")
            wait_for(lambda: abs(em.plant.sample().velocity) <= REST_V, timeout=30,
                     what="the faulted joint at rest")
            assert em.drive.state is State.FAULT
            y("r", str(NODE), "servo.drive.rearm", "1", env=env)
            wait_for(lambda: _state(em) is State.SWITCHED_ON, timeout=60,
                     what="out of FAULT by the held reset, SWITCHED ON")
            wait_for(lambda: reader.json("sys.status")["servo"]["state"] == "standby", timeout=30,
                     what="out of the error")
        finally:
            em.close()


@pytest.mark.parametrize("method", [35, 17])
def test_homing_by_the_current_position_or_the_negative_limit_switch(method: int, tmp_path: Path) -> None:
    """Homing on command: 35 makes the current position home (the joint does not move); 17 searches the negative
    limit switch (at -1, the emulator's default) at ``homing_speed`` and takes its edge as home. Either way the
    servo then reads the home offset where the joint stopped, and moves from there in its cyclic mode."""
    iface = private_iface()
    env = _env(iface, ["x"], {"SERVO__DRIVE__CANOPEN__HOMING_METHOD": str(method),
                              "SERVO__DRIVE__CANOPEN__HOMING_SPEED": "1",
                              "SERVO__DRIVE__CANOPEN__HOME_OFFSET": "0.25"})
    with Emulator(PARAMS, 1, iface) as em, _servo(env, tmp_path) as reader:
        readings = Readings(em)
        try:
            assert em.plant is not None and em.drive is not None
            wait_for(lambda: reader.json("sys.drive").get("state") == "SWITCHED ON", timeout=180, what="up")
            out = y("cmd", "-T", "60", str(NODE), str(0x7E01), env=env)
            assert '"status":0' in out.replace(" ", ""), out
            wait_for(lambda: reader.json("sys.drive").get("state") == "SWITCHED ON"
                     and reader.json("sys.drive").get("mode") == "CSV", timeout=60, what="back in CSV")
            home = em.plant.sample().position
            meas = wait_for(lambda: (m := reader.json("sys.motion")["meas"])[0] == pytest.approx(0.25, abs=1e-3)
                            and m, timeout=30, what="the home offset read")
            lowest = min(s[1] for s in readings.samples)
            print(f"method {method}: home at joint {home:.4f} (lowest {lowest:.4f}), servo reads {meas[0]:.4f}")
            if method == 35:
                assert abs(home) < 1e-3 and lowest > -1e-3
            else:
                # Home is the switch's edge; the joint went there (the readings are 100 Hz samples: the moment it
                # was beyond the switch, before the zero search brought it back to the edge, may fall between two).
                assert abs(home + 1.0) < 0.02 and lowest < -0.98, (home, lowest)
            with _publishing(env, [1.25]):  # One unit up from home.
                wait_for(lambda: abs(em.plant.sample().position - (home + 1.0)) < 0.01
                         and isinstance(reader.json("sys.motion")["settled"], float), timeout=120, what="moved 1")
        finally:
            readings.close()


@pytest.mark.parametrize("retries", [2, 0])
def test_sdo_retries_carry_a_drive_that_leaves_requests_unanswered(retries: int, tmp_path: Path) -> None:
    """A drive leaving every third SDO request unanswered: with ``servo.drive.canopen.sdo_retries`` = 2 each request
    gets its answer at the second try and the drive comes up; with 0 no bring-up gets through its requests, error 11
    says there was no answer, and the drive is never enabled."""
    iface = private_iface()
    env = _env(iface, ["x"], {"SERVO__DRIVE__CANOPEN__SDO_RETRIES": str(retries),
                              "SERVO__DRIVE__CANOPEN__SDO_TIMEOUT": "0.3",
                              "SERVO__DRIVE__CANOPEN__BOOT_TIMEOUT": "0"})
    with Emulator(PARAMS, 1, iface, sdo_drop=3) as em, _servo(env, tmp_path) as reader:
        if retries:
            wait_for(lambda: reader.json("sys.drive").get("state") == "SWITCHED ON", timeout=180, what="up")
            wait_for(lambda: reader.json("sys.status")["servo"]["state"] == "standby", timeout=30, what="standby")
            return
        s = wait_for(lambda: (s := reader.json("sys.status")["servo"])["error"] == 11 and s, timeout=180,
                     what="error 11")
        print(s["reason"])
        assert "no answer" in s["reason"] or "SDO" in s["reason"], s
        time.sleep(5.0)  # Several more attempts (one a second), each failing on the same every third request.
        assert reader.json("sys.drive").get("state") != "SWITCHED ON"
        assert 4 not in em.drive.transitions  # type: ignore[union-attr]  # Never enabled.
