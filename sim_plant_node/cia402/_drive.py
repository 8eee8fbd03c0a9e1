"""The CiA 402 drive around the simulated joint: state machine actions, modes, scaling, faults, actual values.

No CANopen framing here: :mod:`._node` feeds controlword, targets and parameters in (:meth:`Cia402Drive.write`),
calls :meth:`Cia402Drive.cycle` at each SYNC (or on the drive's own clock without SYNC) and reads the values the
TPDOs and SDO uploads carry (:meth:`Cia402Drive.read`). All methods are thread-safe (one lock).

Motion: the joint (:class:`sim_plant_node._plant.Plant`) runs continuously in real time like a drive's inner loops;
a cycle latches the targets and applies the mode (:mod:`._modes`: CSV, CST, CSP, IP, homing). Stops are the
plant's constant-deceleration ramp (quick stop 0x6085, slow down 0x6084, in velocity units per second) ending with
the motor off. Positions and velocities are in the drive's units (:class:`._profile.Units`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping

from .. import _plant
from .._plant import Command, Mode, Plant
from . import _objects as ob
from . import _statemachine as sm
from ._modes import Motion
from ._profile import Units
from ._statemachine import State

_logger = logging.getLogger(__name__)

NAN = math.nan

MAX_LATCH_AGE_S = 0.1
"""Longest a physics step is carried forward to a SYNC's instant (a stall beyond it: the position stays there)."""



def latch(s: _plant.Sample, now: float) -> _plant.Sample:
    """``s`` (the latest physics step) carried forward by its velocity to ``now``, by at most
    :data:`MAX_LATCH_AGE_S`: ≤ 1 ms normally, longer when the host lags; past the bound (a stall) it stays there, so
    successive latches of one step never go back (a drive's encoder does not run backwards)."""
    age = min(now - s.monotonic, MAX_LATCH_AGE_S)
    if not age > 0.0:
        return s
    return dataclasses.replace(s, monotonic=s.monotonic + age, position=s.position + s.velocity * age)


EmcyCallback = Callable[[int, int], None]
"""(error code, error register): send an EMCY (code 0 = error reset)."""


class RefusedError(ValueError):
    """A write the drive refuses (value out of range, or not writable now)."""


def _clip(x: float, bits: int) -> int:
    """Round to a signed integer of ``bits`` bits, saturating."""
    lim = (1 << (bits - 1)) - 1
    return int(max(-lim - 1, min(lim, round(x)))) if math.isfinite(x) else 0


class Cia402Drive:
    """A CiA 402 servo drive whose power stage and motor are a simulated joint."""

    def __init__(
        self,
        plant: Plant,
        defaults: Mapping[int, int],
        units: Units,
        emcy: EmcyCallback,
        fault_after: float = 0.0,
        *,
        modes: tuple[int, ...] = ob.MODES,
        supported: int = ob.SUPPORTED_MODES_BITS,
        lookup: Callable[[int, int], int | None] = lambda index, sub: None,
        switches: tuple[float, float] = (-1.0, 1.0),
        fault_reset_hold: float = 0.0,
    ) -> None:
        """Start in NOT READY TO SWITCH ON with the motor off; ``defaults``: initial values of
        :data:`~._objects.DRIVE_OBJECTS`; ``fault_after``: seconds after the first OPERATION ENABLED at which an
        over-current fault is injected (0: never); ``modes``: the 0x6060 values it takes, ``supported``: its 0x6502;
        ``lookup(index, sub)``: the node's other objects (interpolation period, homing speeds); ``switches``: its
        limit switches [unit]; ``fault_reset_hold``: how long controlword bit 7 must stay set for a fault reset
        [second] (0: the rising edge)."""
        self._plant = plant
        self._units = units
        self._emcy = emcy
        self._lock = threading.RLock()
        self._v: dict[int, int] = {i: int(defaults.get(i, 0)) for i in ob.DRIVE_OBJECTS}
        self._v[ob.SUPPORTED_DRIVE_MODES] = supported
        self._v[ob.MODES_OF_OPERATION_DISPLAY] = self._v[ob.MODES_OF_OPERATION]
        self._allowed = {**ob.ALLOWED, ob.MODES_OF_OPERATION: modes}
        self.motion = Motion(plant, units, self._v, lookup, switches)
        self._fault_reset_hold = fault_reset_hold
        self._reset_asked_at: float | None = None
        self.state = State.NOT_READY_TO_SWITCH_ON
        self.transitions: list[int] = [0]
        """Transition numbers taken so far (diagnostics and tests)."""
        self.error_register = 0
        self._controlword = 0
        self._sample = plant.sample()
        self._ramping = False  # A stop ramp is running in the plant (ends with the motor off).
        self._hold_after_ramp = False  # …after which the motor holds velocity 0 (quick stop "stay", halt).
        self._following_since: float | None = None
        self._following_error = False
        self._comm_warning = False
        self._fault_after = fault_after
        self._fault_at: float | None = None

    # ------------------------------------------------------------------ inputs

    def ready(self) -> None:
        """Initialisation is over (transition 1)."""
        with self._lock:
            self._take(sm.on_ready(self.state))

    def write(self, index: int, value: int) -> None:
        """A new value of a drive object (SDO download or RPDO); the controlword acts at once.

        :raises RefusedError: a read-only object, or a value outside the allowed ones.
        """
        with self._lock:
            if index in (ob.STATUSWORD, ob.MODES_OF_OPERATION_DISPLAY, ob.SUPPORTED_DRIVE_MODES, ob.ERROR_CODE):
                raise RefusedError(f"0x{index:04X} is read-only")
            allowed = self._allowed.get(index)
            if allowed is not None and value not in allowed:
                raise RefusedError(f"0x{index:04X} = {value} is not one of {allowed}")
            self._v[index] = int(value)
            if index in (ob.TARGET_POSITION, ob.VELOCITY_OFFSET, ob.TORQUE_OFFSET):
                self.motion.targets_written += 1
            if index == ob.CONTROLWORD:
                self._on_controlword(int(value))
            elif index == ob.MODES_OF_OPERATION:
                if self._v[ob.MODES_OF_OPERATION_DISPLAY] != int(value):
                    self.motion.disabled()  # A new mode starts afresh (an RPDO repeating the mode changes nothing).
                self._v[ob.MODES_OF_OPERATION_DISPLAY] = int(value)

    def write_entry(self, index: int, sub: int, value: int) -> None:
        """A new value of a sub-indexed drive object: the interpolation data record 0x60C1:01."""
        with self._lock:
            if (index, sub) == (ob.INTERPOLATION_DATA, 1):
                self.motion.ip_target = int(value)
                self.motion.ip_written += 1

    def fault(self, code: int, register: int) -> None:
        """A fault: transition 13, EMCY, 0x603F/0x1001 set, then the fault reaction (0x605E)."""
        with self._lock:
            t = sm.on_fault(self.state)
            if t is None:
                return
            _logger.warning("Fault 0x%04X: %s → FAULT REACTION ACTIVE", code, self.state.value)
            self._v[ob.ERROR_CODE] = code
            self.error_register = register | ob.ERR_GENERIC
            was_powered = self.state in sm.POWERED
            self._take(t)
            self._emcy(code, self.error_register)
            if was_powered and self._stop_by_option(self._v[ob.FAULT_REACTION_OPTION], hold=False):
                return  # The reaction ramp runs; supervise() ends it (14).
            self._take(sm.on_fault_reaction_done(self.state))

    def communication_lost(self) -> None:
        """The heartbeat of a monitored node stopped: the reaction of 0x6007 and an EMCY 0x8130."""
        with self._lock:
            option = self._v[ob.ABORT_CONNECTION_OPTION]
            _logger.warning("Communication lost (0x6007 = %d) in %s", option, self.state.value)
            if option == 1:
                self.fault(ob.EMCY_HEARTBEAT, ob.ERR_COMMUNICATION)
                return
            self._comm_warning = True
            self.error_register |= ob.ERR_COMMUNICATION
            self._emcy(ob.EMCY_HEARTBEAT, self.error_register)
            self._abort_connection(option)

    def connection_ended(self) -> None:
        """NMT stopped or a reset while OPERATION ENABLED: the reaction of 0x6007 (no heartbeat error)."""
        with self._lock:
            if self.state is not State.OPERATION_ENABLED:
                return
            option = self._v[ob.ABORT_CONNECTION_OPTION]
            _logger.warning("NMT left OPERATIONAL while enabled (0x6007 = %d)", option)
            if option == 1:
                self.fault(ob.EMCY_HEARTBEAT, ob.ERR_COMMUNICATION)
            self._abort_connection(option)

    def _abort_connection(self, option: int) -> None:
        """0x6007 = 2: a disable voltage command; 3: a quick stop command (0: nothing; 1 is a fault)."""
        if option == 2:
            self._on_controlword(self._controlword & ~sm.CW_ENABLE_VOLTAGE)
        elif option == 3:
            self._on_controlword(self._controlword & ~sm.CW_QUICK_STOP)

    def communication_restored(self) -> None:
        """The monitored heartbeat is back: the communication warning clears (EMCY error reset if no fault)."""
        with self._lock:
            if not self._comm_warning:
                return
            self._comm_warning = False
            self.error_register &= ~ob.ERR_COMMUNICATION
            if self.state not in (State.FAULT, State.FAULT_REACTION_ACTIVE):
                self.error_register = 0
                self._emcy(0, 0)

    # ------------------------------------------------------------------ state machine

    def _on_controlword(self, cw: int) -> None:
        previous, self._controlword = self._controlword, cw
        self._v[ob.CONTROLWORD] = cw
        if self.state is State.FAULT and self._fault_reset_hold > 0.0:
            self._hold_fault_reset(cw, previous)
        else:
            self._take(sm.on_controlword(self.state, cw, previous, self._v[ob.QUICK_STOP_OPTION]))
        if self.state is State.OPERATION_ENABLED:
            if cw & sm.CW_HOMING_START and not previous & sm.CW_HOMING_START:
                self.motion.homing_edge = True
            halted = bool(cw & sm.CW_HALT)
            if halted and not previous & sm.CW_HALT:
                self._stop_by_option(self._v[ob.HALT_OPTION], hold=True)

    def _hold_fault_reset(self, cw: int, previous: int) -> None:
        """A drive that resets a fault only once bit 7 stayed set for ``fault_reset_hold``: the rising edge starts
        the count (:meth:`supervise` ends it), a falling one cancels it."""
        if cw & sm.CW_FAULT_RESET and not previous & sm.CW_FAULT_RESET:
            self._reset_asked_at = time.monotonic()
        elif not cw & sm.CW_FAULT_RESET:
            self._reset_asked_at = None

    def _take(self, t: sm.Transition | None) -> None:
        """Enter the transition's target state and do what its numbers mean for the motor."""
        if t is None:
            return
        before, self.state = self.state, t.target
        self.transitions.extend(t.numbers)
        _logger.info("CiA 402: %s → %s (%s)", before.value, t.target.value, ", ".join(map(str, t.numbers)))
        n = t.numbers[-1]
        if n in (4, 5, 8, 9, 11, 13, 16):
            self.motion.disabled()
        if n in (4, 16):
            self._ramping = self._hold_after_ramp = False
            self._following_since, self._following_error = None, False
            if self._fault_after > 0.0 and self._fault_at is None:
                self._fault_at = time.monotonic() + self._fault_after
        elif n == 5:
            self._stop_by_option(self._v[ob.DISABLE_OPERATION_OPTION], hold=False)
        elif n == 8:
            self._stop_by_option(self._v[ob.SHUTDOWN_OPTION], hold=False)
        elif n == 11:
            option = self._v[ob.QUICK_STOP_OPTION]
            if not self._stop_by_option(option - 4 if option > 4 else option, hold=sm.quick_stop_stays(option)):
                self._take(sm.on_quick_stop_done(self.state, option))
        elif n in (7, 9, 10, 12, 14):
            self._motor_off()
        elif n == 15:
            self._v[ob.ERROR_CODE] = 0
            self.error_register = ob.ERR_COMMUNICATION if self._comm_warning else 0
            self._emcy(0, self.error_register)

    def _stop_by_option(self, option: int, hold: bool) -> bool:
        """Start the stop an option code names (0 coast, 1 slow down ramp, 2 quick stop ramp, 3/4 at the motor's
        limit); True if a ramp runs (it ends with the motor off, or holding 0 velocity if ``hold``)."""
        if option == 0:
            self._motor_off()
            return False
        if option == 1:
            decel = self._v[ob.PROFILE_DECELERATION] / self._units.velocity
        elif option == 2:
            decel = self._v[ob.QUICK_STOP_DECELERATION] / self._units.velocity
        else:
            decel = math.inf
        p = self._plant.params
        decel = min(decel, p.max_force / p.inertia) if p.inertia > 0.0 else decel
        if not (math.isfinite(decel) and decel > 0.0):
            self._motor_off()
            return False
        self._plant.quick_stop(decel)
        self._ramping, self._hold_after_ramp = True, hold
        return True

    def _motor_off(self) -> None:
        self._plant.passive()
        self._ramping = self._hold_after_ramp = False

    # ------------------------------------------------------------------ cycle

    def cycle(self) -> None:
        """One drive cycle: apply the latched targets of the mode in OPERATION ENABLED, then sample the joint."""
        with self._lock:
            now = time.monotonic()
            self.motion.cycled(now)
            if self.state is State.OPERATION_ENABLED and not self._ramping and not self._hold_after_ramp:
                if not self._controlword & sm.CW_HALT:
                    p = self._plant.params
                    torque_limit = p.max_force * min(self._v[ob.MAX_TORQUE], 1000) / 1000.0
                    self.motion.apply(self._v[ob.MODES_OF_OPERATION_DISPLAY], self._controlword, torque_limit, now)
            self._sample = self._latched(now)
            self._update_following_error(now)

    def _latched(self, now: float) -> _plant.Sample:
        """The joint's state at ``now`` (the SYNC's instant, as a drive latches its encoder)."""
        return latch(self._plant.sample(), now)

    def supervise(self, now: float | None = None) -> None:
        """Ramps that ended, a fault reset held long enough, the injected fault's time: called often (≥ 50 Hz)
        whatever the SYNC does."""
        with self._lock:
            now = time.monotonic() if now is None else now
            if self._fault_at is not None and now >= self._fault_at and self.state is State.OPERATION_ENABLED:
                self._fault_at = math.inf  # Once per process.
                self.fault(ob.EMCY_OVER_CURRENT, ob.ERR_CURRENT)
            asked = self._reset_asked_at
            if asked is not None and self.state is State.FAULT and now - asked >= self._fault_reset_hold:
                self._reset_asked_at = None
                self._take(sm.Transition(State.SWITCH_ON_DISABLED, (15,)))
            if self._ramping and self._plant.sample().mode is Mode.PASSIVE:
                self._ramping = False
                if self._hold_after_ramp:
                    self._plant.apply(Command(Mode.VELOCITY, math.inf, 0.0, self._plant.params.max_force))
                self._take(sm.on_fault_reaction_done(self.state))
                self._take(sm.on_quick_stop_done(self.state, self._v[ob.QUICK_STOP_OPTION]))
            if not self._controlword & sm.CW_HALT and self._hold_after_ramp and self.state is State.OPERATION_ENABLED:
                self._hold_after_ramp = self._ramping = False  # Halt released: follow the targets again.

    def _update_following_error(self, now: float) -> None:
        target = self.motion.following_target(self._v[ob.MODES_OF_OPERATION_DISPLAY])
        if self.state is not State.OPERATION_ENABLED or target is None:
            self._v[ob.FOLLOWING_ERROR_ACTUAL] = 0
            self._following_since, self._following_error = None, False
            return
        error = target - self.position_actual()
        self._v[ob.FOLLOWING_ERROR_ACTUAL] = _clip(error, 32)
        if abs(error) <= self._v[ob.FOLLOWING_ERROR_WINDOW]:
            self._following_since, self._following_error = None, False
        elif self._following_since is None:
            self._following_since = now
        elif now - self._following_since > self._v[ob.FOLLOWING_ERROR_TIMEOUT] / 1000.0:
            self._following_error = True

    # ------------------------------------------------------------------ outputs

    def position_actual(self) -> int:
        """0x6064 [counts] at the latest cycle."""
        return self.motion.counts(self._sample.position)

    def digital_inputs(self) -> int:
        """0x60FD: bit 0 the negative limit switch, bit 1 the positive one (active at or beyond its position)."""
        q, (negative, positive) = self._sample.position, self.motion.switches
        return (1 if q <= negative else 0) | (2 if q >= positive else 0)

    def statusword(self) -> int:
        """0x6041: the state's bits plus remote, warning, target reached, internal limit and mode-specific bits."""
        with self._lock:
            sw = sm.state_bits(self.state) | sm.SW_REMOTE
            s = self._sample
            at_rest = abs(s.velocity) <= _plant.REST_VELOCITY
            mode = self._v[ob.MODES_OF_OPERATION_DISPLAY]
            if self._following_error or self._comm_warning:
                sw |= sm.SW_WARNING
            if self.state is State.OPERATION_ENABLED:
                if self.motion.internal_limit:
                    sw |= sm.SW_INTERNAL_LIMIT
                if mode == ob.MODE_HOMING:
                    attained, reached, error = self.motion.homing_bits(at_rest)
                    sw |= (sm.SW_OP_MODE_12 if attained else 0) | (sm.SW_TARGET_REACHED if reached else 0)
                    sw |= sm.SW_OP_MODE_13 if error else 0
                else:
                    halted = bool(self._controlword & sm.CW_HALT)
                    if (mode in (ob.MODE_CSP, ob.MODE_CSV, ob.MODE_CST) or (mode == ob.MODE_IP
                            and self.motion.ip_active)) and not halted:
                        sw |= sm.SW_OP_MODE_12  # CSx: following the command; IP: ip mode active.
                    if (at_rest and not self._ramping) if halted else self.motion.target_reached(
                            mode, s, self.position_actual()):
                        sw |= sm.SW_TARGET_REACHED
                    if mode in (ob.MODE_CSP, ob.MODE_IP) and self._following_error:
                        sw |= sm.SW_OP_MODE_13
            elif self.state is State.QUICK_STOP_ACTIVE and at_rest and not self._ramping:
                sw |= sm.SW_TARGET_REACHED
            return sw

    def read(self, index: int) -> int | None:
        """The value of a drive object (None: not the drive's), as of the latest cycle."""
        with self._lock:
            if index == ob.STATUSWORD:
                return self.statusword()
            if index == ob.POSITION_ACTUAL:
                return _clip(self.position_actual(), 32)
            if index == ob.VELOCITY_ACTUAL:
                return _clip(self._sample.velocity * self._units.velocity, 32)
            if index == ob.TORQUE_ACTUAL:
                rated = self._v[ob.RATED_TORQUE] / 1000.0
                return _clip(1000.0 * self._sample.force / rated, 16) if rated > 0.0 else 0
            if index == ob.DIGITAL_INPUTS:
                return self.digital_inputs()
            return self._v.get(index)
