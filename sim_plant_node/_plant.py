"""The joint behind the ``sim-plant`` node: setpoint interpretation and a thread stepping it in real time.

Kept free of pycyphal so that the semantics can be unit-tested without a bus; :mod:`sim_plant_node._app` wires it up.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import threading
import time
from typing import Protocol

from sim_plant import Joint, JointParams

_logger = logging.getLogger(__name__)

REST_VELOCITY = 1e-3
"""|velocity| at or below which a quick stop counts the joint as at rest [rad/s or m/s]."""

QUICK_STOP_MARGIN_S = 0.5
"""Time a quick stop may take beyond its ideal duration (velocity / deceleration) before the motor is switched off
anyway: a load stronger than the motor must not keep it powered forever."""

TRACK_SUBSTEP_S = 0.002
"""Longest step of the joint while tracking: the position loop is re-evaluated at least this often, so a stall
cannot make its gain unstable."""

MAX_STEP_S = 0.5
"""Longest wall-time gap stepped at once; a longer stall (a suspended process) loses the excess instead of
stepping through seconds of simulated time in one lock-holding call."""


class Mode(enum.Enum):
    """What the joint's motor is doing."""

    PASSIVE = "passive"  # Motor off, no force (STANDBY/SLEEP, or after a quick stop).
    QUICK_STOP = "quick_stop"  # Motor braking the joint to rest on the quick-stop ramp (control timeout).
    POSITION = "position"
    VELOCITY = "velocity"
    FORCE = "force"
    TRACK = "track"  # A streamed position reference followed by an interpolating position loop (CiA 402 CSP).


class SetpointRejectedError(ValueError):
    """A setpoint with infinite fields: ignored as a whole, the joint keeps its previous command."""


@dataclasses.dataclass(frozen=True)
class Command:
    """A fully determined joint command (Webots semantics), the result of interpreting one setpoint."""

    mode: Mode
    target_position: float = 0.0  # set_position argument (+inf in velocity control)
    velocity: float = 0.0  # set_velocity argument (signed in velocity control, ≥ 0 in position control)
    motor_force: float = 0.0  # set_motor_force argument (available force, ≤ max_force)
    force: float = 0.0  # set_force argument (force control)


def interpret(position: float, velocity: float, force: float, max_velocity: float, max_force: float) -> Command | None:
    """Turn a UDRAL dynamics setpoint into a joint command; None means "no change" (every field NaN).

    NaN marks a field as unset. Position finite → position control, |velocity| caps the speed (NaN: max_velocity);
    position NaN, velocity finite → velocity control; only force finite → force control. In position/velocity
    control a finite force is the motor force limit (|force| clipped to max_force; NaN: max_force), in force
    control it is the force to apply (clipped to ±max_force). Infinities raise :class:`SetpointRejectedError`.
    """
    values = {"position": float(position), "velocity": float(velocity), "force": float(force)}
    for name, x in values.items():
        if math.isinf(x):
            raise SetpointRejectedError(f"setpoint {name} is {x}")
    p, v, f = values["position"], values["velocity"], values["force"]
    limit = max_force if math.isnan(f) else min(abs(f), max_force)
    if not math.isnan(p):
        vd = max_velocity if math.isnan(v) else min(abs(v), max_velocity)
        return Command(Mode.POSITION, target_position=p, velocity=vd, motor_force=limit)
    if not math.isnan(v):
        vd = max(-max_velocity, min(v, max_velocity))
        return Command(Mode.VELOCITY, target_position=math.inf, velocity=vd, motor_force=limit)
    if not math.isnan(f):
        return Command(Mode.FORCE, motor_force=max_force, force=max(-max_force, min(f, max_force)))
    return None


@dataclasses.dataclass(frozen=True)
class Sample:
    """A consistent snapshot of the joint, taken under the lock right after a physics step."""

    monotonic: float  # time.monotonic() at which the state was reached [s]
    sim_time: float  # simulated time since start [s]; tracks wall time
    position: float
    velocity: float
    acceleration: float
    force: float  # force the motor applies: motor force feedback, or the applied force in force control
    available_force: float  # the motor force Fm currently available (0 when passive)
    mode: Mode


class JointDrive(Protocol):
    """What the UDRAL node drives: a :class:`Plant`, or one joint of the coupled arm (``_arm_plant.ArmJoint``)."""

    params: JointParams

    @property
    def alive(self) -> bool: ...

    def apply(self, command: Command) -> None: ...

    def passive(self) -> None: ...

    def quick_stop(self, deceleration: float) -> float: ...

    def sample(self) -> Sample: ...


class RealTimeStepper:
    """A daemon thread that steps a model by the *measured* elapsed monotonic time, so simulated time equals wall
    time: deadlines are absolute (``start + n/step_rate``) so the mean rate does not drift, after a stall the
    schedule restarts from now, and a step longer than :data:`MAX_STEP_S` is cut (the rest counted as lost time).
    Subclasses step their model in :meth:`_step`, called under :attr:`_lock`, which also guards their commands."""

    def __init__(self, step_rate_hz: float, name: str) -> None:
        if not (math.isfinite(step_rate_hz) and step_rate_hz > 0.0):
            raise ValueError(f"step_rate must be a finite positive number, got {step_rate_hz!r}")
        self._period = 1.0 / step_rate_hz
        self._name = name
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stamp = time.monotonic()
        self.lost_time = 0.0
        """Wall time not simulated because of stalls longer than :data:`MAX_STEP_S` [s]."""
        self.max_gap = 0.0
        """Largest wall-time gap between two steps so far [s] (diagnostics)."""

    def start(self) -> None:
        """Start the stepping thread; simulated time starts now. Idempotent."""
        if self._thread is None:
            with self._lock:
                self._stamp = time.monotonic()
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the stepping thread and wait for it. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    @property
    def alive(self) -> bool:
        """True while the stepping thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _step(self, gap: float) -> None:
        """Advance the model by ``gap`` seconds (under the lock)."""
        raise NotImplementedError

    def _run(self) -> None:
        """Step by the measured elapsed time until closed."""
        deadline = time.monotonic()
        while not self._stop.is_set():
            deadline += self._period
            delay = deadline - time.monotonic()
            if delay > 0.0:
                self._stop.wait(delay)
            elif delay < -10.0 * self._period:
                deadline = time.monotonic()  # Hopelessly behind (a stall): restart the schedule instead of bursting.
            with self._lock:
                now = time.monotonic()
                gap = now - self._stamp
                self._stamp = now
                self.max_gap = max(self.max_gap, gap)
                if gap > MAX_STEP_S:
                    self.lost_time += gap - MAX_STEP_S
                    gap = MAX_STEP_S
                self._step(gap)


class Plant(RealTimeStepper):
    """One :class:`Joint` stepped by a daemon thread so that simulated time equals wall (monotonic) time.

    Each iteration steps the joint by the *measured* elapsed monotonic time, so a late wake-up (GIL, load) costs
    accuracy of nothing but the sample instant; deadlines are absolute (``start + n/step_rate``) so the mean rate
    does not drift, and after a stall the schedule restarts from now. The joint kernel releases the GIL. A lock
    serialises joint access between the stepping thread and the commands from the asyncio thread.
    """

    def __init__(self, params: JointParams, step_rate_hz: float) -> None:
        """Create the joint passive (motor off) at its initial position; call :meth:`start` to run time."""
        super().__init__(step_rate_hz, "sim-plant-physics")
        self.params = params
        self._joint = Joint(params)
        self._mode = Mode.PASSIVE
        self._motor_force = 0.0
        self._force = 0.0
        self._stop_start = 0.0  # Quick stop: when it started (simulated time), from which velocity, at which rate,
        self._stop_velocity = 0.0  # and its bound [s] (QUICK_STOP mode only).
        self._stop_deceleration = 0.0
        self._stop_bound = 0.0
        self._track = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # TRACK: (start, position, velocity, acceleration, gain, horizon)
        self._track_hold = False  # TRACK: the reference held, not extrapolated (see track())
        self._joint.set_force(0.0)

    def _step(self, gap: float) -> None:
        try:
            if self._mode is Mode.TRACK:
                self._track_steps(gap)
            else:
                if self._mode is Mode.QUICK_STOP:
                    self._quick_stop_step(gap)
                self._joint.step(gap)
        except Exception:  # Never let the physics thread die silently: the node would freeze.
            _logger.exception("Joint step failed; the joint is made passive")
            self._apply_passive()

    def apply(self, command: Command) -> None:
        """Put the motor under the command (thread-safe); ends a quick stop."""
        with self._lock:
            j = self._joint
            if command.mode is Mode.PASSIVE:
                self._apply_passive()
                return
            if command.mode in (Mode.QUICK_STOP, Mode.TRACK):
                raise ValueError(f"{command.mode.value} is started by its own method, not by a command")
            j.set_acceleration(self.params.acceleration)  # A quick stop lifted the limit; the joint's own again.
            j.set_motor_force(command.motor_force)
            if command.mode is Mode.FORCE:
                j.set_force(command.force)
                self._force = max(-command.motor_force, min(command.force, command.motor_force))
            else:
                j.set_position(command.target_position)
                j.set_velocity(command.velocity)
                self._force = 0.0
            self._motor_force = command.motor_force
            self._mode = command.mode

    def track(
        self, position: float, velocity: float, acceleration: float, gain: float, motor_force: float, horizon: float,
        *, hold: bool = False,
    ) -> None:
        """Follow a position reference from now on (thread-safe): the drive's interpolating position loop of CiA 402
        CSP. The reference is extrapolated from this instant, p(τ) = position + velocity·τ + acceleration·τ²/2, and
        the joint's velocity controller (the motor, up to ``motor_force``) gets v(τ) + gain·(p(τ) − q) at every
        step of at most :data:`TRACK_SUBSTEP_S`; a new call replaces the reference (one per SYNC). Past ``horizon``
        seconds without a new call the reference stops where it got (a silent master must not drive the joint on).
        ``hold``: the position is held as given and ``velocity`` is a feed-forward, v + gain·(position − q), until the
        next call, however late (an ODrive's position control in PASSTHROUGH: no interpolation, no horizon; its
        watchdog is what ends a silent master's command). Ends a quick stop.
        """
        with self._lock:
            j = self._joint
            j.set_acceleration(self.params.acceleration)
            j.set_motor_force(motor_force)
            j.set_position(math.inf)
            self._track = (j.time, position, velocity, acceleration, gain, horizon)
            self._track_hold = hold
            self._motor_force = motor_force
            self._force = 0.0
            self._mode = Mode.TRACK
            self._track_command()

    def _track_command(self) -> None:
        """With the lock held: the velocity command of the position loop at the joint's present time."""
        j = self._joint
        t0, p, v, a, gain, horizon = self._track
        if self._track_hold:
            vmax = self.params.max_velocity
            j.set_velocity(max(-vmax, min(vmax, v + gain * (p - j.position))))
            return
        tau = min(j.time - t0, horizon)
        moving = j.time - t0 <= horizon
        vc = (v + a * tau if moving else 0.0) + gain * (p + v * tau + 0.5 * a * tau * tau - j.position)
        vmax = self.params.max_velocity
        j.set_velocity(max(-vmax, min(vmax, vc)))

    def _track_steps(self, dt: float) -> None:
        """With the lock held: step ``dt`` in substeps, the position loop evaluated before each."""
        n = max(1, math.ceil(dt / TRACK_SUBSTEP_S))
        for _ in range(n):
            self._track_command()
            self._joint.step(dt / n)

    def quick_stop(self, deceleration: float) -> float:
        """Brake the joint to rest, then switch the motor off (thread-safe); returns the bound on its duration [s].

        The drive's quick stop on a lost controller (CiA 402 "quick stop ramp", then disable): the motor, at its full
        force ``max_force``, drives the joint's velocity controller along a ramp from the velocity now to 0 at
        ``deceleration`` (the stepping thread moves the ramp's target at every step, on the joint's simulated time:
        a stalled process neither skips the ramp nor runs out its bound while nothing was simulated). The joint's
        own acceleration limit is lifted meanwhile (the ramp is the limit; the next command
        restores it). The motor goes off when the ramp has ended and |v| ≤ :data:`REST_VELOCITY`, or at the latest at
        the returned bound: the ramp's duration at the deceleration the motor can deliver,
        |v| / min(deceleration, max_force / inertia), plus :data:`QUICK_STOP_MARGIN_S`. Without motor force it
        cannot brake: passive at once (bound 0).
        """
        if not (math.isfinite(deceleration) and deceleration > 0.0):
            raise ValueError(f"quick-stop deceleration must be a finite positive number, got {deceleration!r}")
        with self._lock:
            j = self._joint
            p = self.params
            if p.max_force <= 0.0:
                self._apply_passive()
                return 0.0
            v0 = j.velocity
            bound = abs(v0) / min(deceleration, p.max_force / p.inertia) + QUICK_STOP_MARGIN_S
            self._stop_start, self._stop_velocity, self._stop_deceleration = j.time, v0, deceleration
            self._stop_bound = bound
            j.set_acceleration(-1.0)
            j.set_motor_force(p.max_force)
            j.set_position(math.inf)
            j.set_velocity(v0)
            self._mode = Mode.QUICK_STOP
            self._motor_force = p.max_force
            self._force = 0.0
            return bound

    def _quick_stop_step(self, dt: float) -> None:
        """With the lock held, before a step of ``dt``: motor off once at rest (or at the bound), else move the
        ramp's target to the end of that step."""
        j = self._joint
        elapsed = j.time - self._stop_start
        ramp_done = abs(self._stop_velocity) <= self._stop_deceleration * elapsed
        if (ramp_done and abs(j.velocity) <= REST_VELOCITY) or elapsed >= self._stop_bound:
            if abs(j.velocity) > REST_VELOCITY:
                _logger.warning("Quick stop: not at rest by its bound (v = %.6g); motor off anyway", j.velocity)
            self._apply_passive()
            return
        remaining = abs(self._stop_velocity) - self._stop_deceleration * (elapsed + dt)
        j.set_velocity(math.copysign(max(0.0, remaining), self._stop_velocity))

    def passive(self) -> None:
        """Motor off, no force: the joint coasts (spring, damper and static friction still act). Thread-safe."""
        with self._lock:
            self._apply_passive()

    def _apply_passive(self) -> None:
        """:meth:`passive` with the lock held: Webots ``set_force(0)``."""
        self._joint.set_force(0.0)
        self._mode = Mode.PASSIVE
        self._force = 0.0
        self._motor_force = 0.0

    def sample(self) -> Sample:
        """The state after the latest step (thread-safe)."""
        with self._lock:
            j = self._joint
            force = self._force if self._mode in (Mode.FORCE, Mode.PASSIVE) else j.motor_force_feedback
            return Sample(
                monotonic=self._stamp,
                sim_time=j.time,
                position=j.position,
                velocity=j.velocity,
                acceleration=j.acceleration,
                force=force,
                available_force=self._motor_force,
                mode=self._mode,
            )


def demand_factor_pct(force: float, available: float, velocity: float) -> int:
    """|force| / available force in percent for the UDRAL feedback, negative when the force brakes the motion."""
    if not (available > 0.0 and math.isfinite(force)):
        return 0
    pct = round(100.0 * abs(force) / available)
    if force * velocity < 0.0:
        pct = -pct
    return max(-128, min(127, pct))
