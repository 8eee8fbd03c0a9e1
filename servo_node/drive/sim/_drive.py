"""The embedded joint's Python half: its arrays and the backend's hooks (registers ``sim.*``, derived limits)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cyphal_common.errors import ConfigurationError
from sim_plant import JointParams
from sim_plant._joint import make_arrays

from .._base import DRIVE_SIM, Drive, DriveArrays

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterReader, RegisterSpec

VELOCITY_GAIN = 20.0
"""Position gain of the velocity law [1/s] when ``servo.control.velocity_gain`` holds 0."""


class SimDrive(Drive):
    """The embedded joint: no I/O, the loop steps it."""

    kind = DRIVE_SIM
    stepped_clock = True
    unit_register = "sim.kind"

    def __init__(self, joint: JointParams) -> None:
        self.joint = joint
        params, state = make_arrays([joint])
        self._arrays = DriveArrays(params, state, np.zeros(1), np.zeros(1), np.zeros(1))

    @property
    def arrays(self) -> DriveArrays:
        """The joint's params/state arrays (``state`` may be edited by tests between simulated ticks)."""
        return self._arrays

    @classmethod
    def register_specs(cls) -> Mapping[str, RegisterSpec]:
        """The ``sim.*`` registers, the table ``sim-plant`` declares too."""
        from cyphal_common.joint_registers import JOINT_SPECS

        return JOINT_SPECS

    @classmethod
    def derived_envelope(cls, reg: RegisterReader) -> tuple[float, float, float]:
        """Velocity 0.95·``sim.max_velocity``, acceleration 0.8·(``sim.max_force`` − ``sim.static_friction``)/
        ``sim.inertia`` (springs and loads not included), force ``sim.max_force``."""
        sim = joint_from_registers(reg)
        usable = sim.max_force - sim.static_friction
        if usable <= 0.0:
            raise ConfigurationError(
                f"the embedded joint cannot move: sim.max_force {sim.max_force:g} does not exceed "
                f"sim.static_friction {sim.static_friction:g}"
            )
        return 0.95 * sim.max_velocity, 0.8 * usable / sim.inertia, sim.max_force

    @classmethod
    def default_inertia(cls, reg: RegisterReader) -> float:
        """The joint's own inertia (``sim.inertia``)."""
        return joint_from_registers(reg).inertia

    @classmethod
    def default_velocity_gain(cls, reg: RegisterReader, compensation: bool) -> float:
        """:data:`VELOCITY_GAIN` (no link to compensate)."""
        return VELOCITY_GAIN

    @classmethod
    def create(cls, reg: RegisterReader, node: Any, port_prefix: str = "") -> SimDrive:
        """The joint the ``sim.*`` registers describe."""
        return cls(joint_from_registers(reg))


def joint_from_registers(reg: RegisterReader) -> JointParams:
    """The joint the sim backend steps inside the control loop (the ``sim.*`` registers, shared with sim-plant)."""
    from cyphal_common.joint_registers import joint_params

    return joint_params(reg)
