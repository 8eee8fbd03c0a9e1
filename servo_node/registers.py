"""Every application register of the servo node, declared in one table, with validation of writes.

Port registers (``uavcan.{pub,sub}.<port>.id``/``.type``) are created by pycyphal when the port is resolved;
the ports are listed in :data:`PORTS`. The standard ``uavcan.*`` transport and node registers are pycyphal's.
The ``sys.*`` report registers are read-only views computed on each read: their names are :data:`REPORTS` (those of
every axis) and :data:`FOLLOWER_REPORTS` (a follower's too), served by ``axis/_views.py`` under those names, and
the last column names the function that builds each.

=====================================  ============  ==================  ===============================================
Register                               Type          Default             Meaning
=====================================  ============  ==================  ===============================================
``servo.profile.velocity``             real32[2]     [-10, 10]           {v_min ≤ 0, v_max > 0} [m/s or rad/s]
``servo.profile.acceleration``         real32[2]     [-50, 50]           {a_min < 0 (deceleration), a_max > 0
                                                                         (acceleration)} [m/s² or rad/s²]
``servo.profile.jerk``                 real32        500                 jerk limit > 0 [m/s³ or rad/s³]
``servo.torque_limit``                 real32        100                 default force/torque limit > 0 [N or N·m]
``servo.deadman_timeout``              real32        0.5                 setpoint expiry [second], 0.01..10
``servo.loop_rate``                    real32        1000                control loop rate [Hz], 10..10000
``servo.loop_clock``                  string        "monotonic"         ``monotonic``: loop time is the measured clock;
                                                                         ``stepped`` (sim backend): exactly one period
                                                                         per tick, paced by the wall clock (a
                                                                         deterministic simulation)
``servo.loop_priority``               real32        0                   SCHED_FIFO priority 1..99 of the loop thread
                                                                         where permitted (root or CAP_SYS_NICE); 0: off
``servo.arrival_tolerance``            real32        0.001               |p − target| that counts as arrived
                                                                         (``sys.motion`` ``settled``)
``servo.drive.backend``                string        "sim"               a name of :data:`servo_node.drive.BACKENDS`:
                                                                         ``sim`` (embedded sim_plant), ``udral``,
                                                                         ``cia402`` or ``odrive``
``servo.drive.mode``                   string        "velocity"          ``velocity`` or ``torque`` command to the drive
                                                                         or ``position`` (cia402: CSP; odrive:
                                                                         POSITION_CONTROL; the drive's own position
                                                                         loop)
``servo.drive.kind``                   string        "rotational"        ``rotational`` (rad, N·m) or ``linear`` (m, N);
                                                                         also the UDRAL face's Planar or Linear
``servo.udral.group_index``            natural16     0                   UDRAL group mode: this axis's element of the
                                                                         ``sp.*`` array (0..30)
``servo.udral.group_quantity``         string        "position"          UDRAL group mode: what the element commands
                                                                         (``position`` or ``velocity``)
``servo.udral.bus_voltage``            real32        48                  UDRAL power estimate: the nominal DC bus [V]
``servo.drive.rate``                  real32        200                 udral backend: drive setpoint rate [Hz]
``servo.drive.feedback_timeout``       real32        0.5                 remote drive silence that is an error [second]
``servo.drive.node_id``                natural16     65535               udral backend: the drive's node-ID; messages
                                                                         on its subjects from any other node are
                                                                         dropped (counted, reported once per source);
                                                                         65535: pin the first drive that answers
``servo.drive.compensation``           string        "predict"           udral backend: ``predict`` (feed-forward over
                                                                         the interval each command is held at the
                                                                         drive, feedback on the position predicted
                                                                         over the measured link delay) or ``off``
                                                                         (the law of a local drive)
``servo.control.velocity_gain``        real32        0                   k_p of v_cmd = v_ref + k_p·e [1/s], ≥ 0;
                                                                         0: 20 (sim), 40 (udral, predict), 5 (udral,
                                                                         off: tolerates ~0.2 s of bus round trip
                                                                         before the loop rings)
``servo.control.torque_gains``         real32[2]     [36, 12]            {K_p, K_d} of τ = J·a_ref + K_p·e + K_d·ė
                                                                         (critically damped for J = 1: K_d² = 4·J·K_p)
``servo.control.inertia``             real32        0                   J of the torque feed-forward; 0: sim.inertia
                                                                         (sim backend) or 1
``servo.stop.acceleration``            real32        0                   least deceleration of every stop; 0: the
                                                                         default profile's (within 5..100 % of the
                                                                         envelope)
``servo.stop.jerk``                    real32        0                   least jerk of every stop; 0: the profile's
``servo.stop.rest_velocity``           real32        0                   |v| that counts as at rest; 0: min(1e-3,
                                                                         arrival_tolerance / 1 s)
``servo.stop.hold_max``                real32        1                   hold after a stop before STOP_TIMEOUT [s]
``servo.stop.disengage_immediately``   bit           false               skip the jerk-limited stop on expiry
``servo.envelope.velocity``            real32        0                   hard |v| limit; 0: derived (axis/_config.py)
``servo.envelope.acceleration``        real32        0                   hard |a| limit; 0: derived
``servo.envelope.jerk``                real32        0                   hard |j| limit; 0: acceleration·rate/20
``servo.envelope.force``               real32        0                   hard force limit; 0: derived
``servo.following_error.window``       real32        0.5                 |p_ref − p| that is a following error
``servo.following_error.time``         real32        0.2                 …when it lasts longer than this [second]
``servo.dynamics_rate``                real32        50                  ``dynamics`` publication rate [Hz], > 0
``servo.mimic.multiplier``             real64        1                   mimic: follower = multiplier·(leader −
                                                                         reference) + offset; ≠ 0 (see mimic.py)
``servo.mimic.offset``                 real64        0                   mimic: offset of that relation
``servo.mimic.reference``              real64        0                   mimic: the leader's reference position
``servo.mimic.compensation``           bit           true                mimic: extrapolate the leader's sample from
                                                                         its timestamp (true) or its reception
``servo.mimic.leader_node_id``         natural16     65535               mimic: the leader's node-ID; 65535: the
                                                                         sender of the first leader sample
``servo.drive.rearm``                  natural16     0                   a drive fault is reset when a write changes it
                                                                         (as ExecuteCommand 0x7E00 does)
``servo.time_sync``                    string        "slave"             node-wide: ``slave`` (adopt a
                                                                         uavcan.time.Synchronization master if one
                                                                         is heard), ``master``, or ``off``
``servo.time_sync.master_node_id``     natural16     65535               node-wide: the only time master adopted;
                                                                         65535: the Cyphal rule (the lowest node-ID
                                                                         heard wins)
``servo.hardware_version``             natural8[2]   [0, 0]              node-wide: {major, minor} that
                                                                         ``uavcan.node.GetInfo`` reports as the
                                                                         hardware version (from the next start or
                                                                         RESTART); 0.0: a software-only node, no
                                                                         board of its own
(the backends')                        …             …                   each backend's own registers (its
                                                                         ``Drive.register_specs()``), e.g. ``sim.*``:
                                                                         the embedded joint (``sim`` backend), the
                                                                         table of
                                                                         :mod:`cyphal_common.joint_registers` that
                                                                         ``sim-plant`` declares too
``sys.status``                         string (ro)   —                   JSON: servo state, active target and limits,
                                                                         error code and reason, pinned peers, a
                                                                         follower's lag (``axis/_reports.status_view``)
``sys.motion``                         string (ro)   —                   JSON: reference and measured state, the plan,
                                                                         settling, the last stop, a bus drive's link,
                                                                         engagement (``axis/_reports.motion_view``)
``sys.reference``                      real64[3]     —                   the reference [p, v, a] at full precision while
                                       (ro)                              engaged, else NaN
                                                                         (``axis/_reports.reference_view``)
``sys.envelope``                       real64[4]     —                   the envelope in force [|v|, |a|, |j|, force]:
                                       (ro)                              ``servo.envelope.*`` or derived; every
                                                                         setpoint's limits are clipped into it (a
                                                                         coordinator plans within it), NaN before the
                                                                         loop runs (``axis/_reports.envelope_view``)
``sys.counters``                       string (ro)   —                   JSON: setpoint intake counts, refused writes,
                                                                         restarts (``axis/_reports.counters_view``)
``sys.events``                         string (ro)   —                   JSON: coordinated starts, dropped frames, loop
                                                                         errors, feedback faults, clipped commands,
                                                                         foreign drive messages, time master changes,
                                                                         uptime (``axis/_reports.events_view``)
``sys.timing``                         string (ro)   —                   JSON: the control loop's ticks, ticks missed
                                                                         (the host too busy for the loop), the largest
                                                                         and the p99 lateness of a tick
                                                                         (``axis/_reports.timing_view``)
``sys.drive``                          string (ro)   —                   JSON: the drive's own state, ``{}`` if the
                                                                         backend has none (its ``Drive.view``, e.g.
                                                                         ``drive/cia402/_units.drive_view``)
``sys.last_rejection``                 string (ro)   —                   why the last setpoint was rejected (text, set
                                                                         by ``axis/_intake.py``)
``sys.mimic``                          string (ro)   —                   a follower only; JSON: leader, relation,
                                                                         target, error, lag, why following ended
                                                                         (``axis/_follower.Follower.view``)
=====================================  ============  ==================  ===============================================

A write that breaks a constraint, is not finite, cannot be converted to the register's type, or (application
registers) has another number of values is refused (the old value stays), counted, and reported through the
``on_refused`` callback (the node turns it into a ``uavcan.diagnostic.Record``), whatever layer refused it
(:class:`cyphal_common.registers.ValidatingRegistry`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pycyphal.application import register
from pycyphal.application.register import ValueProxy

from cyphal_common.errors import ConfigurationError
from cyphal_common.registers import RefusedWriteError as RefusedWriteError
from cyphal_common.registers import RegisterSpec as RegisterSpec
from cyphal_common.registers import (
    ValidatingRegistry,
    anything,
    bit,
    choice,
    natural8,
    natural16,
    pair,
    real32,
    real64,
    scalar,
    string,
)
from cyphal_common.timesync import MODES as TIME_SYNC_MODES

from .drive import BACKENDS
from .drive._table import backend_ports, backend_register_specs

RESERVED_AXIS_NAMES = ("servo", "sim", "sys", "uavcan", "reg", "zubax")
"""Axis names that would collide with unprefixed register namespaces."""


def _axis_list(v: ValueProxy) -> str | None:
    words = [w for w in re.split(r"[\s,]+", v.value.string.value.tobytes().decode(errors="replace")) if w]
    ok = all(re.fullmatch(r"[a-z][a-z0-9_]*", w) and w not in RESERVED_AXIS_NAMES for w in words)
    return None if ok and len(set(words)) == len(words) else "must be distinct names [a-z][a-z0-9_]*, not reserved"


NODE_ANY = 0xFFFF
"""A node-ID register that pins no node in advance (the drive, the leader: the first to answer; the time master:
the Cyphal rule)."""

LEADER_ANY = NODE_ANY
"""``servo.mimic.leader_node_id`` that pins no node: the sender of the first leader sample is the leader."""

PORTS: Mapping[str, str] = {
    "uavcan.sub.setpoint_servo": "zubax.telega.ServoCommand.1.0 (or a structural supertype, e.g. Real32)",
    "uavcan.sub.readiness": "zubax.service.Readiness.1.0; unset = no arming gate",
    "uavcan.sub.motion_start": "uavcan.time.SynchronizedTimestamp.1.0: a new setpoint waits for this start (coord)",
    "uavcan.pub.feedback": "zubax.service.actuator.Feedback.1.0, after each applied setpoint and at 1 Hz",
    "uavcan.pub.status": "zubax.service.actuator.Status.1.0 at 1 Hz",
    "uavcan.pub.dynamics": "zubax.physics.dynamics.DoF3rdTs.1.0 at servo.dynamics_rate",
    "uavcan.sub.mimic_leader": "zubax.physics.dynamics.DoF3rdTs.1.0: the leader's dynamics; set: this is a follower",
    "uavcan.sub.mimic_leader_feedback": "zubax.service.actuator.Feedback.1.0: the leader's state (needed to follow)",
    **backend_ports(),
    "uavcan.sub.servo.setpoint": "UDRAL servo: reg.udral.physics.dynamics.rotation.Planar / translation.Linear",
    "uavcan.sub.servo.group_setpoint": "UDRAL servo group: reg.udral.service.actuator.common.sp.Vector31 (or smaller)",
    "uavcan.sub.servo.readiness": "UDRAL servo: reg.udral.service.common.Readiness",
    "uavcan.pub.servo.feedback": "UDRAL servo: reg.udral.service.actuator.common.Feedback",
    "uavcan.pub.servo.status": "UDRAL servo: reg.udral.service.actuator.common.Status at 1 Hz",
    "uavcan.pub.servo.power": "UDRAL servo: reg.udral.physics.electricity.PowerTs (torque × velocity estimate)",
    "uavcan.pub.servo.dynamics": "UDRAL servo: reg.udral.physics.dynamics.rotation.PlanarTs / translation.LinearTs",
}
"""Every port the node may use (the backends' own included) and its type; configure with
``uavcan.<pub|sub>.<name>.id`` (65535 = off)."""

SYS_STATUS = "sys.status"
SYS_MOTION = "sys.motion"
SYS_REFERENCE = "sys.reference"
SYS_ENVELOPE = "sys.envelope"
SYS_COUNTERS = "sys.counters"
SYS_EVENTS = "sys.events"
SYS_TIMING = "sys.timing"
SYS_DRIVE = "sys.drive"
SYS_LAST_REJECTION = "sys.last_rejection"
SYS_MIMIC = "sys.mimic"
REPORTS = (SYS_STATUS, SYS_MOTION, SYS_REFERENCE, SYS_ENVELOPE, SYS_COUNTERS, SYS_EVENTS, SYS_TIMING, SYS_DRIVE,
           SYS_LAST_REJECTION)
"""The read-only ``sys.*`` report registers every axis serves (see the module docstring for what each holds)."""
FOLLOWER_REPORTS = (SYS_MIMIC,)
"""The ``sys.*`` report registers a follower (mimic) serves besides :data:`REPORTS`."""

_POSITIVE = scalar(lambda x: x > 0, "> 0")
_NONNEGATIVE = scalar(lambda x: x >= 0, ">= 0")
_NODE_ID_OR_ANY = scalar(lambda x: x == int(x) and 0 <= x <= NODE_ANY, f"a node-ID, or {NODE_ANY} (any)")
_ZERO_OR_SANE = scalar(lambda x: x == 0 or 1e-3 <= x <= 1e9, "0 (derived) or in [1e-3, 1e9]")

SPECS: Mapping[str, RegisterSpec] = {
    "servo.profile.velocity": RegisterSpec(real32(-10, 10), pair(lambda a, b: a <= 0 < b, "{v_min <= 0, v_max > 0}")),
    "servo.profile.acceleration": RegisterSpec(
        real32(-50, 50), pair(lambda a, b: a < 0 < b, "{a_min < 0, a_max > 0}")
    ),
    "servo.profile.jerk": RegisterSpec(real32(500), _POSITIVE),
    "servo.torque_limit": RegisterSpec(real32(100), _POSITIVE),
    "servo.deadman_timeout": RegisterSpec(real32(0.5), scalar(lambda x: 0.01 <= x <= 10, "in [0.01, 10] s")),
    "servo.loop_rate": RegisterSpec(real32(1000), scalar(lambda x: 10 <= x <= 10000, "in [10, 10000] Hz")),
    "servo.loop_clock": RegisterSpec(string("monotonic"), choice("monotonic", "stepped")),
    "servo.arrival_tolerance": RegisterSpec(real32(1e-3), _POSITIVE),
    "servo.loop_priority": RegisterSpec(real32(0), scalar(lambda x: x == int(x) and 0 <= x <= 99, "in 0..99")),
    "servo.drive.backend": RegisterSpec(string("sim"), choice(*BACKENDS)),
    "servo.drive.mode": RegisterSpec(string("velocity"), choice("velocity", "torque", "position")),
    "servo.drive.kind": RegisterSpec(string("rotational"), choice("rotational", "linear")),
    "servo.drive.rate": RegisterSpec(real32(200), scalar(lambda x: 1 <= x <= 1000, "in [1, 1000] Hz")),
    "servo.drive.feedback_timeout": RegisterSpec(real32(0.5), _POSITIVE),
    "servo.drive.compensation": RegisterSpec(string("predict"), choice("predict", "off")),
    "servo.drive.node_id": RegisterSpec(natural16(NODE_ANY), _NODE_ID_OR_ANY),
    "servo.control.velocity_gain": RegisterSpec(real32(0), _NONNEGATIVE),
    "servo.control.torque_gains": RegisterSpec(real32(36, 12), pair(lambda a, b: a >= 0 and b >= 0, ">= 0")),
    "servo.control.inertia": RegisterSpec(real32(0), _NONNEGATIVE),
    "servo.stop.acceleration": RegisterSpec(real32(0), _ZERO_OR_SANE),
    "servo.stop.jerk": RegisterSpec(real32(0), _ZERO_OR_SANE),
    "servo.stop.rest_velocity": RegisterSpec(real32(0), scalar(lambda x: 0 <= x <= 1, "in [0, 1]")),
    "servo.stop.hold_max": RegisterSpec(real32(1), scalar(lambda x: 0.01 <= x <= 60, "in [0.01, 60] s")),
    "servo.envelope.velocity": RegisterSpec(real32(0), _ZERO_OR_SANE),
    "servo.envelope.acceleration": RegisterSpec(real32(0), _ZERO_OR_SANE),
    "servo.envelope.jerk": RegisterSpec(real32(0), _ZERO_OR_SANE),
    "servo.envelope.force": RegisterSpec(real32(0), _ZERO_OR_SANE),
    "servo.following_error.window": RegisterSpec(real32(0.5), scalar(lambda x: 1e-6 <= x <= 1e6, "in [1e-6, 1e6]")),
    "servo.following_error.time": RegisterSpec(real32(0.2), scalar(lambda x: 0 <= x <= 10, "in [0, 10] s")),
    "servo.stop.disengage_immediately": RegisterSpec(bit(False), anything),
    "servo.dynamics_rate": RegisterSpec(real32(50), scalar(lambda x: 0 < x <= 1000, "in (0, 1000] Hz")),
    "servo.mimic.multiplier": RegisterSpec(real64(1), scalar(lambda x: x != 0, "!= 0")),
    "servo.mimic.offset": RegisterSpec(real64(0), scalar(lambda x: True, "(finite)")),
    "servo.mimic.reference": RegisterSpec(real64(0), scalar(lambda x: True, "(finite)")),
    "servo.mimic.compensation": RegisterSpec(bit(True), anything),
    "servo.mimic.leader_node_id": RegisterSpec(
        natural16(LEADER_ANY),
        scalar(lambda x: x == int(x) and 0 <= x <= LEADER_ANY, f"a node-ID, or {LEADER_ANY} (the first sender)"),
    ),
    "servo.time_sync": RegisterSpec(string("slave"), choice(*TIME_SYNC_MODES)),
    "servo.time_sync.master_node_id": RegisterSpec(natural16(NODE_ANY), _NODE_ID_OR_ANY),
    "servo.hardware_version": RegisterSpec(natural8(0, 0), pair(lambda a, b: True, "{major, minor}, each 0..255")),
    "servo.axes": RegisterSpec(string(""), _axis_list),
    "servo.udral.group_index": RegisterSpec(natural16(0), scalar(lambda x: x == int(x) and 0 <= x <= 30, "in 0..30")),
    "servo.udral.group_quantity": RegisterSpec(string("position"), choice("position", "velocity")),
    "servo.udral.bus_voltage": RegisterSpec(real32(48), _POSITIVE),
    "servo.drive.rearm": RegisterSpec(
        natural16(0), scalar(lambda x: x == int(x) and 0 <= x <= 0xFFFF, "a count 0..65535")
    ),
    **backend_register_specs(),
}
"""The application registers (see the module docstring for their meaning)."""


def spec_for(name: str) -> RegisterSpec | None:
    """The spec of an application register, also under an axis prefix (``left.servo.profile.jerk``)."""
    spec = SPECS.get(name)
    if spec is None and "." in name:
        spec = SPECS.get(name.split(".", 1)[1])
    return spec


class ServoRegistry(ValidatingRegistry):
    """The servo's :data:`SPECS` over a validating registry that survives in-process node restarts.

    pycyphal closes the registry when a node closes; this one ignores that so that a RESTART re-creates the
    node over the same registry, and environment variables are applied once per process (at creation), never
    over values a user wrote since. :meth:`shutdown` really closes it.
    """

    def __init__(
        self,
        register_file: str | Path | None,
        environment_variables: Mapping[str, str] | None = None,
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        super().__init__(register_file, SPECS, environment_variables, on_refused)
        self.declare()

    def spec_for(self, name: str) -> RegisterSpec | None:
        """Also an axis's prefixed copy of an application register (``left.servo.profile.jerk``)."""
        return spec_for(name)

    def close(self) -> None:
        """Kept open across node restarts; see :meth:`shutdown`."""

    def shutdown(self) -> None:
        """Close the storage backends for good."""
        super().close()

    def factory_reset(self) -> None:
        """Delete every stored register; defaults (and environment overrides) apply again at the next restart."""
        del self["*"]


# ---- one axis's names and view of the registry ----------------------------------------------------------------

AXIS_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
"""What an axis name looks like: it becomes a register name component and an environment variable part."""

RESERVED = frozenset(RESERVED_AXIS_NAMES)
"""Axis names that would collide with the unprefixed register namespaces."""

NODE_REGISTERS = frozenset({"servo.axes", "servo.time_sync", "servo.hardware_version"})
"""Application registers of the node, not of an axis (never prefixed)."""


@dataclass(frozen=True)
class AxisNames:
    """The naming scheme of one axis; ``axis=""`` is the single, unprefixed axis."""

    axis: str = ""

    def port(self, name: str) -> str:
        """Port name as pycyphal resolves it (``uavcan.<sub|pub>.<this>.id``)."""
        return f"{self.axis}.{name}" if self.axis else name

    def register(self, name: str) -> str:
        """Application register name (``servo.*``, ``sim.*``, ``sys.*``)."""
        return f"{self.axis}.{name}" if self.axis else name

    @property
    def label(self) -> str:
        """For log lines and diagnostics: ``"left: "`` or nothing."""
        return f"{self.axis}: " if self.axis else ""


def parse_axes(text: str) -> list[AxisNames]:
    """The axes named by ``servo.axes`` (space or comma separated); empty: one unprefixed axis.

    :raises ConfigurationError: a name is malformed, reserved or repeated.
    """
    names = [n for n in re.split(r"[\s,]+", text.strip()) if n]
    if not names:
        return [AxisNames()]
    for n in names:
        if not AXIS_NAME.match(n) or n in RESERVED:
            raise ConfigurationError(f"servo.axes: {n!r} is not a usable axis name ([a-z][a-z0-9_]*, not reserved)")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"servo.axes: repeated axis name in {text!r}")
    return [AxisNames(n) for n in names]


class AxisRegisters:
    """The registers of one axis, read by their plain names (``real("servo.profile.jerk")``)."""

    def __init__(self, registry: ServoRegistry, names: AxisNames) -> None:
        self.registry = registry
        self.names = names

    def declare(self) -> None:
        """Create this axis's prefixed application registers that do not exist yet (defaults, then environment).

        The single axis uses the registry's own (``ServoRegistry.declare``).
        """
        if not self.names.axis:
            return
        for name in _axis_register_names():
            self.registry.setdefault(self.names.register(name), SPECS[name].default)

    def __getitem__(self, name: str, /) -> register.ValueProxy:
        """The value of this axis's register by its plain name."""
        return self.registry[self.names.register(name)]

    def real(self, name: str) -> float:
        """Scalar value of a numeric register."""
        return self.registry.real(self.names.register(name))

    def reals(self, name: str) -> tuple[float, ...]:
        """All values of a numeric register."""
        return self.registry.reals(self.names.register(name))

    def text(self, name: str) -> str:
        """Value of a string register."""
        return self.registry.text(self.names.register(name))

    def flag(self, name: str) -> bool:
        """Value of a bit register."""
        return self.registry.flag(self.names.register(name))

    def serve(self, name: str, getter: register.Registry.Assignable) -> None:
        """Expose a read-only live register (a getter) under this axis's name."""
        self.registry[self.names.register(name)] = getter


def _axis_register_names() -> Iterable[str]:
    return (n for n in SPECS if n not in NODE_REGISTERS)
