"""Homing (mode 6) on the simulated joint: the drive's own search for its home, one step per drive cycle.

Pure logic over the joint's position and velocity: each :meth:`Homing.step` says the velocity the motor is to hold
and how far the search got. Methods (CiA 402 numbering):

* 35 and 37: the current position is home (no motion).
* 17: the negative limit switch, without index pulse: towards it at the switch-search speed (0x6099:01) while it is
  inactive, then away from it at the zero-search speed (0x6099:02) until it goes inactive again; that edge is home.
* 18: the same with the positive limit switch.

A limit switch is active at or beyond its position (the joint's ``sim.canopen`` limit switch positions). Home is
where the drive saw the edge, at its cycle's resolution, as on a drive that polls its inputs. The motor stops at
the joint's own acceleration; homing is attained once at rest. A speed of 0, or a search that runs longer than
:data:`SEARCH_LIMIT_S`, is a homing error.
"""

from __future__ import annotations

import enum

SEARCH_LIMIT_S = 60.0
"""The longest a switch search may take before it is a homing error [second]."""

REST_VELOCITY = 1e-3
"""|velocity| at or below which the stopped joint counts as at rest [unit/s]."""


class Phase(enum.Enum):
    SWITCH = "searching the switch"
    ZERO = "searching the edge"
    STOPPING = "stopping"
    ATTAINED = "attained"
    ERROR = "error"


class Homing:
    """One homing run (see the module docstring)."""

    def __init__(self, method: int, position: float, speeds: tuple[float, float], switches: tuple[float, float],
                 now: float) -> None:
        """Start method ``method`` at joint position ``position``; ``speeds``: (switch search, zero search)
        [unit/s, magnitudes]; ``switches``: (negative, positive) limit switch positions [unit]."""
        self.method = method
        self.started = now
        self.home: float | None = None
        """The joint position found as home (None until found)."""
        self.why = ""
        negative = method == 17
        self._switch = switches[0] if negative else switches[1]
        self._toward = -1.0 if negative else 1.0
        self._fast, self._slow = abs(speeds[0]), abs(speeds[1])
        if method in (35, 37):
            self.home, self.phase = position, Phase.STOPPING
        elif method not in (17, 18):
            self.phase, self.why = Phase.ERROR, f"method {method} is not emulated"
        elif self._fast <= 0.0 or self._slow <= 0.0:
            self.phase, self.why = Phase.ERROR, "a homing speed 0x6099 is 0"
        else:
            self.phase = Phase.ZERO if self._active(position) else Phase.SWITCH

    def _active(self, q: float) -> bool:
        return q <= self._switch if self._toward < 0 else q >= self._switch

    def step(self, q: float, v: float, now: float) -> float:
        """The velocity the motor holds from now [unit/s], given the joint's position and velocity."""
        if self.phase in (Phase.SWITCH, Phase.ZERO) and now - self.started > SEARCH_LIMIT_S:
            self.phase, self.why = Phase.ERROR, f"no switch edge within {SEARCH_LIMIT_S:g} s"
        if self.phase is Phase.SWITCH:
            if not self._active(q):
                return self._toward * self._fast
            self.phase = Phase.ZERO
        if self.phase is Phase.ZERO:
            if self._active(q):
                return -self._toward * self._slow
            self.home, self.phase = q, Phase.STOPPING
        if self.phase is Phase.STOPPING and abs(v) <= REST_VELOCITY:
            self.phase = Phase.ATTAINED
        return 0.0

    @property
    def running(self) -> bool:
        return self.phase in (Phase.SWITCH, Phase.ZERO, Phase.STOPPING)
