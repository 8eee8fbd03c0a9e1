"""The embedded simulated drive: a ``sim_plant`` joint configured by the ``sim.*`` registers."""

from __future__ import annotations

from cyphal_common.joint_registers import joint_params
from sim_plant import JointParams

from ..registers import ServoRegistry


def sim_joint_from_registers(reg: ServoRegistry) -> JointParams:
    """The joint the sim backend steps inside the control loop: the ``sim.*`` table shared with ``sim-plant``."""
    return joint_params(reg)
