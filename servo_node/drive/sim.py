"""The embedded simulated drive: a ``sim_plant`` joint configured by the ``sim.*`` registers."""

from __future__ import annotations

from sim_plant import JointKind, JointParams

from ..registers import RegisterReader


def sim_joint_from_registers(reg: RegisterReader) -> JointParams:
    """The joint the sim backend steps inside the control loop (Webots field names, snake_case)."""
    kind: JointKind = "linear" if reg.text("sim.kind") == "linear" else "rotational"
    return JointParams(
        kind=kind,
        inertia=reg.real("sim.inertia"),
        max_velocity=reg.real("sim.max_velocity"),
        max_force=reg.real("sim.max_force"),
        position=reg.real("sim.position"),
        min_stop=reg.real("sim.min_stop"),
        max_stop=reg.real("sim.max_stop"),
        spring_constant=reg.real("sim.spring_constant"),
        damping_constant=reg.real("sim.damping_constant"),
        static_friction=reg.real("sim.static_friction"),
    )
