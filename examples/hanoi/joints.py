"""The five joints as ``servo-node`` processes: their simulated physics, control modes, limits and bus ports.

Each joint is one ``servo-node`` with its embedded simulated joint (``servo.drive.backend = sim``), configured
entirely by register environment variables, as a user would start it by hand. With ``--plant arm`` base, shoulder
and elbow drive the coupled arm plant over UDRAL instead (:mod:`.arm_plant`); the rest of this docstring is the
independent-joint run.

* **base, shoulder, elbow**: the paper's computed-torque PD law, ``servo.drive.mode = torque`` with
  ``servo.control.torque_gains`` = [K_P, K_D] = [36, 12] (τ = J·a_ref + K_P·e + K_D·ė). The paper's law cancels
  the arm's inertia matrix, Coriolis and gravity terms, which leaves every joint a decoupled double integrator
  of unit inertia driven by the PD law; that is what is simulated here (J = 1 kg·m², no gravity, no coupling),
  so the gains are critically damped (K_D² = 4·J·K_P) as in the paper. The links' own masses and the coupling
  between joints are *not* simulated.
* **wrist**: velocity mode (v = v_ref + k·e), J = 0.05 kg·m² (a light wrist).
* **gripper**: a linear joint (the finger opening [m], 0.3 kg of fingers), velocity mode. Closing on a box is
  moving to the box's width: there is no contact physics, no grip force and no slip.

Soft limits (``sim.min_position``/``sim.max_position``) are the arm's joint limits; the profile limits of the
three arm joints and the wrist are equal, so phase-synchronised moves (a straight line in joint space) are
always feasible.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from .cell import Pose
from .kinematics import ArmGeometry

NAMES = ("base", "shoulder", "elbow", "wrist", "gripper")


@dataclass(frozen=True)
class Joint:
    """One joint node: its simulated physics, law and default profile limits."""

    name: str
    kind: str
    """``rotational`` (rad) or ``linear`` (m)."""
    mode: str
    """``torque`` or ``velocity``."""
    inertia: float
    """[kg·m²] or [kg]."""
    limits: tuple[float, float]
    """Soft limits (min, max) of the position."""
    velocity: float
    acceleration: float
    jerk: float
    max_velocity: float
    """Drive velocity limit (sim.max_velocity)."""
    max_force: float
    """Drive torque/force limit (sim.max_force)."""


def joints(arm: ArmGeometry | None = None) -> tuple[Joint, ...]:
    """The five joints of the example, with the arm's joint limits."""
    lim = (arm or ArmGeometry()).limits
    arm_joint = {"kind": "rotational", "velocity": 1.5, "acceleration": 6.0, "jerk": 60.0, "max_velocity": 3.0,
                 "max_force": 20.0}
    return (
        Joint("base", mode="torque", inertia=1.0, limits=lim[0], **arm_joint),  # type: ignore[arg-type]
        Joint("shoulder", mode="torque", inertia=1.0, limits=lim[1], **arm_joint),  # type: ignore[arg-type]
        Joint("elbow", mode="torque", inertia=1.0, limits=lim[2], **arm_joint),  # type: ignore[arg-type]
        Joint("wrist", mode="velocity", inertia=0.05, limits=lim[3], **arm_joint),  # type: ignore[arg-type]
        Joint("gripper", "linear", "velocity", 0.3, (0.0, 0.1), velocity=0.2, acceleration=2.0, jerk=40.0,
              max_velocity=0.4, max_force=40.0),
    )


TORQUE_GAINS = (36.0, 12.0)
"""The paper's K_P, K_D."""


@dataclass(frozen=True)
class Bus:
    """Where the nodes are: the transport and the IDs (node-IDs ``node_id + k``, setpoint subjects
    ``subject + k``, dynamics subjects ``subject + 10 + k`` for joint k, the shared start subject ``subject + 9``;
    helpers take node-IDs above them)."""

    iface: str = "127.0.0.1"
    node_id: int = 61
    subject: int = 6100
    dynamics_rate: float = 100.0

    def node(self, k: int) -> int:
        return self.node_id + k

    def setpoint(self, k: int) -> int:
        return self.subject + k

    def dynamics(self, k: int) -> int:
        return self.subject + 10 + k

    @property
    def start(self) -> int:
        """The joints' shared ``motion_start`` subject: every coordinated motion starts on one frame."""
        return self.subject + 9

    def helper(self, k: int) -> int:
        """Node-ID of the program's own k-th pycyphal node (recorder, coordinators)."""
        return self.node_id + 5 + k

    def environment(self, node_id: int) -> dict[str, str]:
        """``UAVCAN__*`` for a pycyphal node of the program."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("UAVCAN__", "SERVO__", "SIM__"))}
        env.update(UAVCAN__UDP__IFACE=self.iface, UAVCAN__NODE__ID=str(node_id))
        return env


def node_environment(bus: Bus, k: int, joint: Joint, start: float) -> dict[str, str]:
    """The registers of joint ``k``'s node, as environment variables; ``start`` is its initial position."""
    env = bus.environment(bus.node(k))
    env.update(
        UAVCAN__SUB__SETPOINT_SERVO__ID=str(bus.setpoint(k)),
        UAVCAN__SUB__MOTION_START__ID=str(bus.start),
        UAVCAN__PUB__DYNAMICS__ID=str(bus.dynamics(k)),
        SERVO__DYNAMICS_RATE=f"{bus.dynamics_rate:g}",
        SERVO__DRIVE__MODE=joint.mode,
        SERVO__CONTROL__TORQUE_GAINS=f"{TORQUE_GAINS[0]:g} {TORQUE_GAINS[1]:g}",
        SERVO__PROFILE__VELOCITY=f"{-joint.velocity:g} {joint.velocity:g}",
        SERVO__PROFILE__ACCELERATION=f"{-joint.acceleration:g} {joint.acceleration:g}",
        SERVO__PROFILE__JERK=f"{joint.jerk:g}",
        SIM__KIND=joint.kind,
        SIM__INERTIA=f"{joint.inertia!r}",
        SIM__MAX_VELOCITY=f"{joint.max_velocity!r}",
        SIM__MAX_FORCE=f"{joint.max_force!r}",
        SERVO__TORQUE_LIMIT=f"{joint.max_force!r}",
        SIM__ACCELERATION=f"{4.0 * joint.acceleration!r}" if joint.mode == "velocity" else "-1",
        SIM__MIN_POSITION=f"{joint.limits[0]!r}",
        SIM__MAX_POSITION=f"{joint.limits[1]!r}",
        SIM__POSITION=f"{start!r}",
    )
    return env


@contextmanager
def launched(bus: Bus, start: Pose, registry_dir: Path, arm: ArmGeometry | None = None,
             log: Path | None = None, plant: str = "joints") -> Iterator[Sequence[subprocess.Popen[bytes]]]:
    """Five ``servo-node run`` processes at the ``start`` pose; each gets SIGINT (its safe stop) at exit.

    ``plant = "arm"``: base, shoulder and elbow drive the coupled arm (``sim-plant --arm``, started first and
    stopped last; :mod:`.arm_plant`) over UDRAL instead of their embedded joints.
    """
    servo_node = [sys.executable, "-m", "servo_node"]
    with ExitStack() as stack:
        out = stack.enter_context(open(log, "ab")) if log is not None else subprocess.DEVNULL
        procs = []
        overrides: list[dict[str, str]] = [{} for _ in NAMES]
        if plant == "arm":
            from sim_plant.arm import ArmParams

            from . import arm_plant

            arm_plant.check_geometry(arm or ArmGeometry(), ArmParams())
            env = arm_plant.plant_environment(bus, start, joints(arm))
            procs.append(subprocess.Popen([sys.executable, "-m", "sim_plant_node", "--arm", "--registry",
                                           str(registry_dir / "arm.db")], env=env, stdout=out,
                                          stderr=subprocess.STDOUT))
            stack.callback(_stop, [procs[-1]])
            for j in range(len(arm_plant.ARM_JOINTS)):
                overrides[j] = arm_plant.servo_overrides(bus, j)
        elif plant != "joints":
            raise ValueError(f"plant must be 'joints' or 'arm', got {plant!r}")
        servos = []
        for k, (joint, q) in enumerate(zip(joints(arm), start, strict=True)):
            env = node_environment(bus, k, joint, q) | overrides[k]
            servos.append(subprocess.Popen([*servo_node, "run", "--registry", str(registry_dir / f"{joint.name}.db")],
                                           env=env, stdout=out, stderr=subprocess.STDOUT))
        stack.callback(_stop, servos)  # Together (each safe stop takes most of a second), before the arm plant.
        yield [*procs, *servos]


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGINT to every process still running, then each waited for (SIGKILL after 10 s)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(2)
    deadline = time.monotonic() + 10.0
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def running(procs: Sequence[subprocess.Popen[bytes]]) -> Mapping[str, int | None]:
    """Exit codes of the node processes by joint (None: running); with the arm plant, ``arm plant`` first."""
    names = ("arm plant", *NAMES) if len(procs) > len(NAMES) else NAMES
    return {name: p.poll() for name, p in zip(names, procs, strict=True)}
