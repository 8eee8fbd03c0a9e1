"""The pieces of ``sim_plant_node`` without a bus: setpoint interpretation, demand factor, registers, real time."""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path

import pytest
from pycyphal.application import make_registry

from sim_plant import Joint, JointParams
from sim_plant_node._app import ConfigError, load_config
from sim_plant_node._plant import (
    QUICK_STOP_MARGIN_S,
    REST_VELOCITY,
    Command,
    Mode,
    Plant,
    Sample,
    SetpointRejectedError,
    demand_factor_pct,
    interpret,
)

NAN = math.nan
INF = math.inf


@pytest.mark.parametrize(
    ("setpoint", "expected"),
    [
        ((1.0, 2.0, 5.0), Command(Mode.POSITION, target_position=1.0, velocity=2.0, motor_force=5.0)),
        ((1.0, -2.0, -5.0), Command(Mode.POSITION, target_position=1.0, velocity=2.0, motor_force=5.0)),
        ((1.0, NAN, NAN), Command(Mode.POSITION, target_position=1.0, velocity=100.0, motor_force=50.0)),
        ((1.0, 500.0, 500.0), Command(Mode.POSITION, target_position=1.0, velocity=100.0, motor_force=50.0)),
        ((NAN, -2.0, 10.0), Command(Mode.VELOCITY, target_position=INF, velocity=-2.0, motor_force=10.0)),
        ((NAN, 2.0, NAN), Command(Mode.VELOCITY, target_position=INF, velocity=2.0, motor_force=50.0)),
        ((NAN, -300.0, 0.0), Command(Mode.VELOCITY, target_position=INF, velocity=-100.0, motor_force=0.0)),
        ((NAN, NAN, -3.0), Command(Mode.FORCE, motor_force=50.0, force=-3.0)),
        ((NAN, NAN, 80.0), Command(Mode.FORCE, motor_force=50.0, force=50.0)),
        ((NAN, NAN, NAN), None),
    ],
)
def test_interpret(setpoint: tuple[float, float, float], expected: Command | None) -> None:
    """Each field combination selects the Webots control mode and its arguments; limits clip."""
    assert interpret(*setpoint, max_velocity=100.0, max_force=50.0) == expected


@pytest.mark.parametrize("setpoint", [(INF, 1.0, 1.0), (NAN, -INF, NAN), (NAN, NAN, INF), (0.0, 0.0, -INF)])
def test_interpret_rejects_infinities(setpoint: tuple[float, float, float]) -> None:
    """Any infinite field rejects the setpoint as a whole."""
    with pytest.raises(SetpointRejectedError):
        interpret(*setpoint, max_velocity=100.0, max_force=50.0)


def test_demand_factor() -> None:
    """Percent of the available force, negative when braking, 0 when no force is available, clamped to int8."""
    assert demand_factor_pct(5.0, 10.0, 1.0) == 50
    assert demand_factor_pct(-5.0, 10.0, -1.0) == 50
    assert demand_factor_pct(-5.0, 10.0, 1.0) == -50
    assert demand_factor_pct(5.0, 10.0, 0.0) == 50
    assert demand_factor_pct(5.0, 0.0, 1.0) == 0
    assert demand_factor_pct(NAN, 10.0, 1.0) == 0
    assert demand_factor_pct(50.0, 10.0, 1.0) == 127  # Static friction above the motor force.
    assert demand_factor_pct(-50.0, 10.0, 1.0) == -128


def test_load_config_defaults_and_environment() -> None:
    """Registers default to JointParams' values (limits 100) and take SIM__* environment variables."""
    reg = make_registry(None, environment_variables={"SIM__KIND": "linear", "SIM__INERTIA": "2.5"})
    try:
        config = load_config(reg)
        assert config.params == JointParams(kind="linear", inertia=2.5, max_velocity=100.0, max_force=100.0)
        assert (config.step_rate, config.publish_rate, config.quick_stop_deceleration) == (1000.0, 100.0, 50.0)
        assert str(reg["sim.kind"]) == "linear"
        assert {n for n in reg if n.startswith("sim.")} == {
            f"sim.{n}"
            for n in (
                "kind inertia max_velocity max_force control_p acceleration position min_position max_position "
                "min_stop max_stop spring_constant damping_constant static_friction step_rate publish_rate "
                "quick_stop_deceleration"
            ).split()
        }
    finally:
        reg.close()


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"SIM__INERTIA": "0"}, "sim.inertia"),
        ({"SIM__KIND": "spherical"}, "sim.kind"),
        ({"SIM__MAX_FORCE": "-1"}, "sim.max_force"),
        ({"SIM__MIN_POSITION": "1", "SIM__MAX_POSITION": "-1"}, "sim.min_position"),
        ({"SIM__STEP_RATE": "0"}, "sim.step_rate"),
        ({"SIM__PUBLISH_RATE": "nan"}, "sim.publish_rate"),
        ({"SIM__QUICK_STOP_DECELERATION": "0"}, "sim.quick_stop_deceleration"),
    ],
)
def test_load_config_rejects_invalid_values(env: dict[str, str], name: str) -> None:
    """Invalid registers raise ConfigError naming the register."""
    reg = make_registry(None, environment_variables=env)
    try:
        with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
            load_config(reg)
    finally:
        reg.close()


def test_plant_keeps_simulated_time_equal_to_wall_time() -> None:
    """The stepping thread steps by measured elapsed time: sim time tracks the monotonic clock."""
    params = JointParams(inertia=2.0, max_force=100.0)
    Joint.warm_up(params)
    plant = Plant(params, 1000.0)
    try:
        start = time.monotonic()
        plant.start()
        plant.apply(Command(Mode.FORCE, motor_force=100.0, force=4.0))
        time.sleep(1.0)
        s = plant.sample()
        elapsed = s.monotonic - start
        assert plant.alive
        assert math.isclose(s.sim_time + plant.lost_time, elapsed, abs_tol=0.05)  # Start-up skew only.
        assert s.acceleration == pytest.approx(2.0)
        assert s.force == 4.0 and s.available_force == 100.0 and s.mode is Mode.FORCE
        plant.passive()
        passive_at = time.monotonic()
        deadline = passive_at + 30.0
        while (s := plant.sample()).monotonic <= passive_at and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.force == 0.0 and s.acceleration == 0.0 and s.mode is Mode.PASSIVE
    finally:
        plant.close()
    assert not plant.alive


def test_registers_persist_in_the_register_file(tmp_path: Path) -> None:
    """Values from the environment are stored in the register file and survive a restart without them."""
    path = tmp_path / "plant.db"
    try:
        reg = make_registry(str(path), environment_variables={"SIM__INERTIA": "3", "SIM__PUBLISH_RATE": "50"})
        try:
            load_config(reg)
        finally:
            reg.close()
        reg = make_registry(str(path), environment_variables={})
        try:
            config = load_config(reg)
        finally:
            reg.close()
        assert config.params.inertia == 3.0 and config.publish_rate == 50.0
    finally:
        path.unlink(missing_ok=True)


def _spin_then_quick_stop(params: JointParams, velocity: float, deceleration: float) -> tuple[float, list[Sample]]:
    """Spin a plant to ``velocity`` in velocity control, quick-stop it; (bound, samples until 1 s after passive)."""
    Joint.warm_up(params)
    plant = Plant(params, 1000.0)
    try:
        plant.start()
        plant.apply(Command(Mode.VELOCITY, target_position=INF, velocity=velocity, motor_force=params.max_force))
        deadline = time.monotonic() + 60.0
        while abs(plant.sample().velocity - velocity) > 1e-6:
            assert time.monotonic() < deadline, f"never reached {velocity}: {plant.sample()}"
            time.sleep(0.01)
        bound = plant.quick_stop(deceleration)
        samples = [plant.sample()]
        passive_at = math.inf
        while samples[-1].monotonic < passive_at + 1.0:  # Plant time (monotonic of the steps), not a verdict.
            assert time.monotonic() < deadline + 60.0, f"no passive joint: {samples[-1]}"
            time.sleep(0.002)
            s = plant.sample()
            if s.monotonic > samples[-1].monotonic:
                samples.append(s)
            if s.mode is Mode.PASSIVE and passive_at == math.inf:
                passive_at = s.monotonic
        return bound, samples
    finally:
        plant.close()


@pytest.mark.parametrize(
    ("params", "deceleration", "effective"),
    [
        (JointParams(max_velocity=100.0, max_force=100.0), 20.0, 20.0),  # The ramp limits.
        (JointParams(inertia=2.0, max_velocity=100.0, max_force=10.0), 50.0, 5.0),  # The motor's force limits.
        (JointParams(max_velocity=100.0, max_force=100.0, acceleration=4.0), 20.0, 20.0),  # Joint limit lifted.
    ],
)
def test_quick_stop_brakes_to_rest_then_lets_go(params: JointParams, deceleration: float, effective: float) -> None:
    """A quick stop decelerates at min(deceleration, max_force/inertia) to rest, then the motor goes off and the
    (frictionless) joint stays where it stopped; all within the bound computed from that deceleration."""
    v0 = 4.0
    bound, samples = _spin_then_quick_stop(params, v0, deceleration)
    assert bound == pytest.approx(v0 / effective + QUICK_STOP_MARGIN_S)
    start = samples[0].sim_time
    braking = [s for s in samples if s.mode is Mode.QUICK_STOP]
    passive = [s for s in samples if s.mode is Mode.PASSIVE]
    assert braking and passive and samples.index(passive[0]) == len(braking)  # Braking, then passive for good.
    rest = passive[0]
    assert abs(rest.velocity) <= REST_VELOCITY and rest.force == 0.0
    assert rest.sim_time - start <= bound  # In simulated time: the ramp's duration and the margin.
    assert rest.sim_time - start >= v0 / effective - 0.01  # Not faster than the deceleration allows.
    for a, b in itertools.pairwise(braking):
        assert b.velocity <= a.velocity + 1e-9  # Never speeds up.
        assert (a.velocity - b.velocity) / (b.sim_time - a.sim_time) <= effective * 1.02 + 1e-6
    assert all(abs(s.velocity) <= REST_VELOCITY and s.force == 0.0 for s in passive)
    assert max(s.position for s in passive) - min(s.position for s in passive) <= REST_VELOCITY * 1.0


def test_command_after_quick_stop_restores_the_joint_acceleration_limit() -> None:
    """After a quick stop (which lifts ``sim.acceleration``) the next command runs under that limit again."""
    params = JointParams(max_velocity=100.0, max_force=100.0, acceleration=2.0)
    Joint.warm_up(params)
    plant = Plant(params, 1000.0)
    try:
        plant.start()
        plant.quick_stop(50.0)  # At rest already: passive at once.
        deadline = time.monotonic() + 30.0
        while plant.sample().mode is not Mode.PASSIVE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        plant.apply(Command(Mode.VELOCITY, target_position=INF, velocity=10.0, motor_force=100.0))
        first = plant.sample()
        while (s := plant.sample()).monotonic < first.monotonic + 0.5:
            assert time.monotonic() < deadline + 30.0
            time.sleep(0.01)
        assert 0.0 < s.velocity <= first.velocity + 2.0 * (s.monotonic - first.monotonic) * 1.02 + 1e-6
    finally:
        plant.close()
