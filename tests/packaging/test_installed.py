"""The installed commands work with nothing but the wheel: ``servo-node`` and ``sim-plant`` from a fresh venv.

Each starts from the user's venv (see ``conftest.py``) on UDP loopback with an uncommon node-ID; the test sees its
heartbeat and commands it with the real yakut of the test venv, pointed at the *installed* DSDL through what the
installed ``servo-node dsdl-env`` prints (``zubax.*`` and ``reg.udral.*`` are not known to yakut otherwise).
The first start in the new venv compiles the numba kernels there (cold cache), hence the generous deadlines.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cyphal_common.heartbeat_probe import wait_heartbeat
from tests.procs import popen, wait_for

from .conftest import REPO_ROOT, Installed

pytestmark = [pytest.mark.install, pytest.mark.timeout(1800), pytest.mark.xdist_group("packaging")]
"""The whole test (the fresh venv's creation included) may take :data:`STARTUP_TIMEOUT` to start a node and more:
ci28, with two CPU hogs beside the suite, hit a 900 s limit (the same as the start-up's own) inside the demo test."""

YAKUT = Path(sys.executable).parent / "y"
"""yakut of the test venv (the user's venv needs none)."""
STARTUP_TIMEOUT = 900.0
"""Until a node is OPERATIONAL: the first start in a new venv compiles every numba kernel (~100 CPU-seconds here),
on a machine whose cores the other tests share (a guard against a hang, not a verdict on speed)."""
TIMEOUT = 120.0
"""Deadline for any behaviour expected once a node runs (a guard, as above)."""
OPERATIONAL = 0


def _ids() -> tuple[int, int, int]:
    """Node-ID of the node under test, of yakut, and a base subject-ID: uncommon and random (other buses)."""
    rnd = random.SystemRandom()
    node, client = rnd.sample(range(30, 100), 2)
    return node, client, rnd.randrange(3000, 6000, 8)


def _yakut_env(installed: Installed, client: int) -> dict[str, str]:
    """A user's shell after ``eval "$(servo-node dsdl-env)"`` with the installed command, plus the transport."""
    exports = installed.dsdl_env()
    assert set(exports) == {"CYPHAL_PATH", "PYCYPHAL_PATH"}
    dsdl = Path(exports["CYPHAL_PATH"])
    assert dsdl.is_relative_to(installed.venv) and not dsdl.is_relative_to(REPO_ROOT)
    assert {"uavcan", "zubax", "reg"} <= {p.name for p in dsdl.iterdir() if p.is_dir()}
    assert Path(exports["PYCYPHAL_PATH"]).is_dir()
    return {**installed.env, **exports, "UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(client)}


def _y(env: Mapping[str, str], cwd: Path, *args: str, timeout: float = TIMEOUT) -> str:
    """One yakut command; returns stdout, fails with its output."""
    res = subprocess.run([str(YAKUT), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=dict(env))
    assert res.returncode == 0, f"y {' '.join(args)} -> {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _messages(env: Mapping[str, str], cwd: Path, subject: str, source: int, count: int = 1) -> list[Any]:
    """``y sub`` until ``count`` messages arrived, as JSON; only those the ``source`` node published."""
    out = _y(env, cwd, "-j", "sub", "+M", "--count", str(count), subject)
    msgs = [next(iter(json.loads(line).values())) for line in out.splitlines() if line.strip()]
    return [m for m in msgs if m["_meta_"]["source_node_id"] == source]


def _operational(env: Mapping[str, str], cwd: Path, node: int) -> bool:
    """A heartbeat of ``node`` in mode OPERATIONAL arrived."""
    beats = _messages(env, cwd, "uavcan.node.heartbeat", node, count=3)
    return any(b["mode"]["value"] == OPERATIONAL for b in beats)


def _wait_running(proc: subprocess.Popen[str], log: Path, predicate: Any, timeout: float, what: str) -> Any:
    """:func:`wait_for` that fails at once, with the log, if the process exits."""

    def check() -> Any:
        assert proc.poll() is None, f"the process exited with {proc.returncode}:\n{log.read_text(errors='replace')}"
        return predicate()

    try:
        return wait_for(check, timeout=timeout, interval=0.5, what=what)
    except AssertionError as ex:
        raise AssertionError(f"{ex}\nlog:\n{log.read_text(errors='replace')[-4000:]}") from None


def _wait_operational(proc: subprocess.Popen[str], log: Path, yenv: Mapping[str, str], wd: Path, node: int) -> None:
    """Until the node's heartbeat says OPERATIONAL: awaited on the wire in this process (the first start compiles
    for a minute; a ``y sub`` every half second meanwhile would cost more than the compile), then seen by yakut."""
    well = lambda: wait_heartbeat(node, "127.0.0.1", 2.0)[0] is not None  # noqa: E731
    _wait_running(proc, log, well, STARTUP_TIMEOUT, "an OPERATIONAL heartbeat")
    assert _operational(yenv, wd, node), "yakut did not see the OPERATIONAL heartbeat the wire carried"


def test_installed_servo_node_demo_moves_under_yakut(installed: Installed) -> None:
    """``servo-node demo`` from the venv: heartbeat, then a ``zubax.telega.ServoCommand`` from ``y pub`` moves it."""
    node, client, base = _ids()
    setpoint, dynamics = base, base + 3
    yenv = _yakut_env(installed, client)
    node_env = {
        **installed.env,
        "UAVCAN__UDP__IFACE": "127.0.0.1",
        "UAVCAN__NODE__ID": str(node),
        "UAVCAN__SUB__SETPOINT_SERVO__ID": str(setpoint),
        "UAVCAN__PUB__FEEDBACK__ID": str(base + 1),
        "UAVCAN__PUB__STATUS__ID": str(base + 2),
        "UAVCAN__PUB__DYNAMICS__ID": str(dynamics),
    }
    wd, log = installed.workdir, installed.workdir / "servo-node.log"
    with popen([installed.bin("servo-node"), "demo", "--registry", "demo.db"], node_env, wd, log) as proc:
        _wait_operational(proc, log, yenv, wd, node)
        printed = log.read_text()
        assert f"export CYPHAL_PATH={yenv['CYPHAL_PATH']}\n" in printed  # The demo tells the same DSDL.
        assert f"y r {node} sys.status" in printed and f"y pub -T 0.1 {setpoint}:" in printed  # Its own IDs.

        target = 2.5
        pub = [str(YAKUT), "pub", "-T", "0.1", f"{setpoint}:zubax.telega.ServoCommand", f"{{target: {target}}}"]
        with popen(pub, yenv, wd, wd / "y-pub.log") as publisher:

            def arrived() -> bool:
                motion = json.loads(json.loads(_y(yenv, wd, "-j", "r", str(node), "sys.motion")))
                return bool(motion["engaged"]) and abs(motion["meas"][0] - target) < 1e-2 and motion["settled"]

            _wait_running(proc, log, arrived, TIMEOUT, f"the joint at {target} (sys.motion)")
            assert publisher.poll() is None, (wd / "y-pub.log").read_text()
            (msg,) = _messages(yenv, wd, f"{dynamics}:zubax.physics.dynamics.DoF3rdTs", node)
            assert abs(msg["value"]["kinematics"]["base"]["position"] - target) < 1e-2
    assert "Traceback" not in log.read_text()


def test_installed_sim_plant_follows_a_udral_setpoint(installed: Installed) -> None:
    """``sim-plant`` from the venv: heartbeat, then ENGAGED readiness and a velocity setpoint from ``y pub`` spin it."""
    node, client, base = _ids()
    yenv = _yakut_env(installed, client)
    node_env = {
        **installed.env,
        "UAVCAN__UDP__IFACE": "127.0.0.1",
        "UAVCAN__NODE__ID": str(node),
        "UAVCAN__SUB__SERVO__SETPOINT__ID": str(base),
        "UAVCAN__SUB__SERVO__READINESS__ID": str(base + 1),
        "UAVCAN__PUB__SERVO__DYNAMICS__ID": str(base + 2),
        "UAVCAN__PUB__SERVO__FEEDBACK__ID": str(base + 3),
    }
    wd, log = installed.workdir, installed.workdir / "sim-plant.log"
    with popen([installed.bin("sim-plant"), "--registry", "sim_plant.db"], node_env, wd, log) as proc:
        _wait_operational(proc, log, yenv, wd, node)
        setpoint = (
            "{kinematics: {angular_position: {radian: .nan}, angular_velocity: {radian_per_second: 2.0},"
            " angular_acceleration: {radian_per_second_per_second: .nan}}, torque: {newton_meter: 10}}"
        )
        pub = [
            str(YAKUT), "pub", "-T", "0.05",
            f"{base + 1}:reg.udral.service.common.readiness", "3",
            f"{base}:reg.udral.physics.dynamics.rotation.planar", setpoint,
        ]  # fmt: skip
        dynamics = f"{base + 2}:reg.udral.physics.dynamics.rotation.PlanarTs"

        def kinematics(msg: Any) -> tuple[float, float, float]:
            kin = msg["value"]["kinematics"]
            t = msg["timestamp"]["microsecond"] * 1e-6
            return t, kin["angular_position"]["radian"], kin["angular_velocity"]["radian_per_second"]

        def at_speed() -> bool:
            (msg,) = _messages(yenv, wd, dynamics, node)
            return abs(kinematics(msg)[2] - 2.0) < 0.02

        with popen(pub, yenv, wd, wd / "y-pub-udral.log") as publisher:
            _wait_running(proc, log, at_speed, TIMEOUT, "velocity 2 rad/s")
            # Consecutive samples of one subscription, about 0.6 s of them at the default 100 Hz: two calls of
            # ``y sub`` lay seconds apart on a loaded host, and a stall of the plant between them (its step is cut
            # at 0.5 s) would be judged as well.
            run = [kinematics(m) for m in _messages(yenv, wd, dynamics, node, count=60)]
            assert publisher.poll() is None, (wd / "y-pub-udral.log").read_text()
        (t0, p0, _v0), (t1, p1, v1) = run[0], run[-1]
        assert t1 - t0 > 0.4, run
        assert abs(v1 - 2.0) < 0.02
        assert abs((p1 - p0) / (t1 - t0) - 2.0) < 0.05  # It moves at the commanded speed on its own timestamps.
    assert "Traceback" not in log.read_text()


def test_installed_warmup_leaves_no_kernel_to_compile_at_a_first_start(installed: Installed) -> None:
    """After ``servo-node warmup`` the first start of ``servo-node``, ``sim-plant`` and ``sim-plant --arm`` loads
    every numba kernel it runs from the cache and compiles none (numba's own cache log: nothing saved). The tests
    above started the first two cold in this venv; the coupled arm's kernels come from the warm-up alone."""
    printed = installed.run("servo-node", "warmup")
    assert "caches warm" in printed, printed
    node, client, _base = _ids()
    yenv = _yakut_env(installed, client)
    wd = installed.workdir
    for name, args in (("servo-node", ["run", "--registry", "warm.db"]), ("sim-plant", ["--registry", "warm.db"]),
                       ("sim-plant", ["--arm", "--registry", "warm-arm.db"])):
        env = {**installed.env, "UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(node),
               "NUMBA_DEBUG_CACHE": "1"}
        log = wd / f"{name}{'-arm' if '--arm' in args else ''}-warm.log"
        with popen([installed.bin(name), *args], env, wd, log) as proc:
            _wait_operational(proc, log, yenv, wd, node)
        out = log.read_text(errors="replace")
        assert "[cache] data loaded from" in out, f"{name} {args}: no kernel loaded from the cache?\n{out[-3000:]}"
        compiled = sorted({line for line in out.splitlines() if "[cache] data saved to" in line})
        assert not compiled, f"{name} {args} compiled at its first start after the warm-up:\n" + "\n".join(compiled)
