"""The modes of operation on the simulated joint: what one drive cycle in OPERATION ENABLED commands the motor.

* CSV (9): the joint's velocity controller gets target velocity + velocity offset.
* CST (10): the motor force is target torque + torque offset (‰ of 0x6076, within 0x6072).
* CSP (8): each new target starts the drive's interpolating position loop (:meth:`~.._plant.Plant.track`): the
  reference is extrapolated from the target with the velocity offset and torque offset / ``sim.inertia``.
* IP (7), sub-mode 0 (linear): while controlword bit 4 (enable ip mode) is set, each new interpolation data record
  0x60C1:01 is the position to reach one interpolation period later; the drive moves its reference linearly from
  the previous one to it over that period (0x60C2:01 · 10^0x60C2:02 s; without 0x60C2 the communication cycle
  period 0x1006, else the time between the last two SYNCs), then holds it. Bit 4 clear: it holds where it is.
* Homing (6): :mod:`._homing`, at the speeds 0x6099; home becomes the home offset 0x607C.

Positions and velocities are in the drive's own units (:class:`._profile.Units`); ``values`` is the drive's dict of
object values, read here under the drive's lock.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .. import _plant
from .._plant import Command, Mode, Plant, interpret
from . import _objects as ob
from ._homing import Homing, Phase
from ._profile import Units

NAN = math.nan

CSP_HORIZON_S = 0.05
"""How long the CSP interpolator extrapolates a target without a newer one before holding where it got."""

CW_IP_ENABLE = 1 << 4
"""Controlword bit 4 in IP: enable ip mode (in homing: homing operation start)."""

IP_PERIOD_BOUNDS_S = (0.0005, 1.0)
"""The interpolation periods the drive takes [second]; outside, the nearest bound."""


def _clip(x: float, bits: int) -> int:
    """Round to a signed integer of ``bits`` bits, saturating."""
    lim = (1 << (bits - 1)) - 1
    return int(max(-lim - 1, min(lim, round(x)))) if math.isfinite(x) else 0


class Motion:
    """The per-mode motion of one drive (see the module docstring); the drive calls it with its lock held."""

    def __init__(self, plant: Plant, units: Units, values: dict[int, int],
                 lookup: Callable[[int, int], int | None], switches: tuple[float, float]) -> None:
        """``lookup(index, sub)``: an object of the node's dictionary (None: absent); ``switches``: the negative and
        positive limit switch positions [unit]."""
        self._plant = plant
        self.units = units
        self._v = values
        self._lookup = lookup
        self.switches = switches
        self.offset = 0
        """Position actual = round(q·counts per unit) + offset [counts]; homing sets it."""
        self.internal_limit = False
        self.targets_written = 0  # Writes of the CSP targets so far, and the count the interpolator last took.
        self._targets_seen = -1
        self.ip_target = 0
        """The last interpolation data record 0x60C1:01 [counts]."""
        self.ip_written = 0
        self._ip_seen = 0
        self.ip_active = False
        self._ip_previous = 0
        self._sync_period = NAN
        self._last_cycle = NAN
        self.homing: Homing | None = None
        self.homing_edge = False

    # ------------------------------------------------------------------ positions

    def counts(self, q: float) -> int:
        """Joint position → position counts (0x6064)."""
        return _clip(q * self.units.position, 64) + self.offset

    def joint(self, counts: int) -> float:
        """Position counts → joint position [unit]."""
        return (counts - self.offset) / self.units.position

    def cycled(self, now: float) -> None:
        """A drive cycle happened (for the SYNC period an IP drive without 0x60C2 and 0x1006 falls back to)."""
        if math.isfinite(self._last_cycle) and now > self._last_cycle:
            self._sync_period = now - self._last_cycle
        self._last_cycle = now

    def ip_period(self) -> float:
        """The interpolation period [second] (see the module docstring)."""
        value, index = self._lookup(ob.INTERPOLATION_PERIOD, 1), self._lookup(ob.INTERPOLATION_PERIOD, 2)
        if value and index is not None:
            period = value * 10.0**index
        elif cycle := self._lookup(ob.CYCLE_PERIOD, 0):
            period = cycle * 1e-6
        else:
            period = self._sync_period if math.isfinite(self._sync_period) else 0.005
        return min(max(period, IP_PERIOD_BOUNDS_S[0]), IP_PERIOD_BOUNDS_S[1])

    # ------------------------------------------------------------------ one cycle

    def disabled(self) -> None:
        """Left OPERATION ENABLED (or entered it anew): IP and homing start over."""
        self.ip_active = False
        self.homing = None
        self.homing_edge = False

    def apply(self, mode: int, controlword: int, torque_limit: float, now: float) -> None:
        """One cycle in OPERATION ENABLED (not halted, no stop ramp) in ``mode``."""
        p = self._plant.params
        v_ = self._v
        rated = v_[ob.RATED_TORQUE] / 1000.0
        kv = self.units.velocity
        command: Command | None
        if mode == ob.MODE_CSV:
            v = (v_[ob.TARGET_VELOCITY] + v_[ob.VELOCITY_OFFSET]) / kv
            self.internal_limit = abs(v) > p.max_velocity
            command = interpret(NAN, v, torque_limit, p.max_velocity, p.max_force)
        elif mode == ob.MODE_CST:
            f = (v_[ob.TARGET_TORQUE] + v_[ob.TORQUE_OFFSET]) / 1000.0 * rated
            self.internal_limit = abs(f) > torque_limit
            f = max(-torque_limit, min(torque_limit, f))
            command = Command(Mode.FORCE, motor_force=p.max_force, force=f)
        elif mode == ob.MODE_CSP:
            if self._targets_seen == self.targets_written and self._plant.sample().mode is Mode.TRACK:
                return  # No new target since the last cycle: the interpolator goes on from the last one.
            self._targets_seen = self.targets_written
            v = v_[ob.VELOCITY_OFFSET] / kv
            a = (v_[ob.TORQUE_OFFSET] / 1000.0 * rated) / p.inertia
            self.internal_limit = abs(v) > p.max_velocity
            self._plant.track(self.joint(v_[ob.TARGET_POSITION]), v, a, p.control_p, torque_limit, CSP_HORIZON_S)
            return
        elif mode == ob.MODE_IP:
            self._interpolate(controlword, torque_limit)
            return
        elif mode == ob.MODE_HOMING:
            command = self._home(torque_limit, now)
        else:  # No mode: hold still.
            self.internal_limit = False
            command = Command(Mode.VELOCITY, math.inf, 0.0, torque_limit)
        if command is not None:
            self._plant.apply(command)

    def _interpolate(self, controlword: int, torque_limit: float) -> None:
        p = self._plant.params
        self.internal_limit = False
        if not controlword & CW_IP_ENABLE:
            if self.ip_active or self._plant.sample().mode is not Mode.TRACK:
                self.ip_active = False  # Inactive: hold where the joint is.
                self._plant.track(self._plant.sample().position, 0.0, 0.0, p.control_p, torque_limit, 0.0)
            return
        if not self.ip_active:  # Enabled now: the first segment starts where the joint is.
            self.ip_active = True
            self._ip_previous = self.counts(self._plant.sample().position)
            self._ip_seen = self.ip_written
        if self._ip_seen == self.ip_written:
            return  # No new record: the reference holds at the last one after its period.
        self._ip_seen = self.ip_written
        period = self.ip_period()
        start, end = self.joint(self._ip_previous), self.joint(self.ip_target)
        self._ip_previous = self.ip_target
        v = (end - start) / period
        self.internal_limit = abs(v) > p.max_velocity
        self._plant.track(start, v, 0.0, p.control_p, torque_limit, period)

    def _home(self, torque_limit: float, now: float) -> Command:
        """Homing: start on a rising bit 4 (:attr:`homing_edge`), then step the search."""
        s = self._plant.sample()
        if self.homing_edge:
            self.homing_edge = False
            speeds = tuple((self._lookup(ob.HOMING_SPEEDS, k) or 0) / self.units.velocity for k in (1, 2))
            self.homing = Homing(self._v[ob.HOMING_METHOD], s.position, (speeds[0], speeds[1]), self.switches, now)
        self.internal_limit = False
        h = self.homing
        if h is None or not h.running:
            return Command(Mode.VELOCITY, math.inf, 0.0, torque_limit)
        v = h.step(s.position, s.velocity, now)
        if h.home is not None and h.phase is Phase.ATTAINED:
            self.offset = self._v[ob.HOME_OFFSET] - _clip(h.home * self.units.position, 64)
        return Command(Mode.VELOCITY, math.inf, v, torque_limit)

    # ------------------------------------------------------------------ status

    def homing_bits(self, at_rest: bool) -> tuple[bool, bool, bool]:
        """(homing attained, target reached, homing error) for the statusword in mode 6."""
        h = self.homing
        if h is None:
            return False, False, False  # Not started: none of them (as in progress).
        attained = h.phase is Phase.ATTAINED
        error = h.phase is Phase.ERROR
        return attained, (attained or error or not h.running) and at_rest, error

    def target_reached(self, mode: int, s: _plant.Sample, position_actual: int) -> bool:
        """Statusword bit 10 in the cyclic and interpolated modes (not halted)."""
        v_ = self._v
        if mode == ob.MODE_CSP:
            return abs(v_[ob.TARGET_POSITION] - position_actual) <= v_[ob.POSITION_WINDOW]
        if mode == ob.MODE_IP:
            return self.ip_active and abs(self.ip_target - position_actual) <= v_[ob.POSITION_WINDOW]
        if mode == ob.MODE_CSV:
            return abs(v_[ob.TARGET_VELOCITY] - s.velocity * self.units.velocity) <= v_[ob.VELOCITY_WINDOW]
        return mode == ob.MODE_CST

    def following_target(self, mode: int) -> int | None:
        """The position a following error is measured against (CSP: 0x607A; IP: 0x60C1:01), or None."""
        if mode == ob.MODE_CSP:
            return self._v[ob.TARGET_POSITION]
        if mode == ob.MODE_IP and self.ip_active:
            return self.ip_target
        return None
