"""The ``sim.*`` joint registers: one table derived from ``JointParams``, declared by both applications."""

from __future__ import annotations

import dataclasses

import pytest
from pycyphal.application.register import Real64, Value

from cyphal_common.joint_registers import JOINT_SPECS, NOT_REGISTERS, joint_params
from servo_node.registers import RefusedWriteError, ServoRegistry
from sim_plant import JointParams
from sim_plant_node._app import SPECS as SIM_PLANT_SPECS


def test_one_register_per_joint_field() -> None:
    """Every JointParams field but the external loads is a register, in the servo node and in sim-plant."""
    fields = {f.name for f in dataclasses.fields(JointParams)} - set(NOT_REGISTERS)
    assert set(JOINT_SPECS) == {f"sim.{f}" for f in fields}
    registry = ServoRegistry(None, {})
    try:
        assert {n for n in registry if n.startswith("sim.")} == set(JOINT_SPECS)
    finally:
        registry.shutdown()
    assert set(JOINT_SPECS) <= set(SIM_PLANT_SPECS)


def test_defaults_and_environment_make_the_joint() -> None:
    """Defaults are JointParams' with limits 100; SIM__* variables override them."""
    registry = ServoRegistry(None, {"SIM__KIND": "linear", "SIM__SPRING_CONSTANT": "2.5"})
    try:
        assert joint_params(registry) == JointParams(
            kind="linear", max_velocity=100.0, max_force=100.0, spring_constant=2.5
        )
    finally:
        registry.shutdown()


@pytest.mark.parametrize(
    ("name", "value"),
    [("sim.inertia", 0.0), ("sim.max_force", -1.0), ("sim.acceleration", -0.5), ("sim.min_stop", 0.1)],
)
def test_write_breaking_the_field_constraint_is_refused(name: str, value: float) -> None:
    """The write check is JointParams' own constraint of that field; the old value stays."""
    registry = ServoRegistry(None, {})
    try:
        before = registry.reals(name)
        with pytest.raises(RefusedWriteError, match=name.replace(".", r"\.")):
            registry[name] = Value(real64=Real64([value]))
        assert registry.reals(name) == before and registry.refused_writes == 1
    finally:
        registry.shutdown()


def test_cross_field_constraint_names_the_register() -> None:
    """Soft-limit order is checked when the joint is built, and the error names the register."""
    registry = ServoRegistry(None, {"SIM__MIN_POSITION": "1", "SIM__MAX_POSITION": "-1"})
    try:
        with pytest.raises(ValueError, match=r"^register sim\.min_position"):
            joint_params(registry)
    finally:
        registry.shutdown()
