"""The arming gate: readiness and the deadman timeout decide whether setpoints may move the servo.

Pure logic on an injected monotonic clock [second], so it is tested without a network or real time.

- With the gate configured (a readiness port is set), the servo starts in STANDBY and acts on no setpoint unless
  the latest readiness is ENGAGED and younger than the deadman timeout; SLEEP and the invalid value 1 count as
  STANDBY.
- The command expires when no valid setpoint arrived within the deadman timeout; the servo then needs a fresh
  setpoint (and ENGAGED, if gated) to move again.
- An error (from the drive or the trajectory) holds until a fresh setpoint is accepted with the cause cleared
  (the axis decides whether the cause persists); a drive that reports again ends the error in STANDBY.
- A halt (the node closing or restarting) is STANDBY that the axis keeps: it applies no setpoint after it.
"""

from __future__ import annotations

import enum
import math

from .errors import ErrorCode

READINESS_ENGAGED = 3
"""zubax.service.Readiness.1.0 ENGAGED; SLEEP = 0, STANDBY = 2, 1 is invalid and treated as STANDBY."""


class ServoState(enum.StrEnum):
    """The state reported in ``sys.status``."""

    STANDBY = "standby"
    ENGAGED = "engaged"
    EXPIRED = "expired"
    ERROR = "error"


class ArmingGate:
    """Decides, at each instant, whether the servo may act on its latest accepted setpoint."""

    def __init__(self, gated: bool, deadman_timeout_s: float) -> None:
        self.gated = gated
        self.deadman_timeout_s = deadman_timeout_s
        self._readiness = 0
        self._readiness_at = -math.inf
        self._setpoint_at = -math.inf
        self._state = ServoState.STANDBY
        self.expired_after_s = math.nan
        """Age of the last setpoint when the command was found expired (the deadman's reaction time)."""
        self._reason = "waiting for a setpoint" + (" and readiness ENGAGED" if gated else "")
        self.error_code = ErrorCode.NONE
        """The error that stopped the servo last; cleared when a fresh setpoint engages it."""

    @property
    def reason(self) -> str:
        """Why the servo is in its state, in words."""
        return self._reason

    def on_readiness(self, value: int, now: float) -> None:
        """A readiness message arrived."""
        self._readiness = int(value)
        self._readiness_at = now

    def armed(self, now: float) -> bool:
        """True if the readiness gate allows motion now (always true when not gated)."""
        if not self.gated:
            return True
        return self._readiness == READINESS_ENGAGED and now - self._readiness_at <= self.deadman_timeout_s

    def on_setpoint(self, now: float) -> bool:
        """A valid setpoint arrived; returns True if it is to be applied (the servo is or becomes engaged)."""
        if not self.armed(now):
            self._disarm(now)
            return False
        self._setpoint_at = now
        self._state = ServoState.ENGAGED
        self._reason = "following the setpoint"
        self.error_code = ErrorCode.NONE
        return True

    def on_error(self, reason: str, code: ErrorCode = ErrorCode.NONE) -> None:
        """The loop or the drive failed; motion stops until a fresh setpoint."""
        self._state = ServoState.ERROR
        self._reason = reason
        self.error_code = code
        self._setpoint_at = -math.inf

    def on_recovered(self, reason: str) -> None:
        """The cause of the error went away by itself (the drive reports again): STANDBY until a fresh setpoint."""
        if self._state is ServoState.ERROR:
            self._state = ServoState.STANDBY
            self._reason = reason

    def halt(self, reason: str) -> None:
        """The node is closing or restarting: STANDBY, whatever the state was."""
        self._state = ServoState.STANDBY
        self._reason = reason
        self._setpoint_at = -math.inf

    def update(self, now: float) -> ServoState:
        """Advance the timeouts and return the current state."""
        if self._state is ServoState.ENGAGED:
            if not self.armed(now):
                self._disarm(now)
            elif now - self._setpoint_at > self.deadman_timeout_s:
                self.expired_after_s = now - self._setpoint_at
                self._state = ServoState.EXPIRED
                self._reason = f"no valid setpoint for {self.deadman_timeout_s:g} s (deadman timeout)"
        return self._state

    def _disarm(self, now: float) -> None:
        if self._state is ServoState.ERROR:
            return
        self._state = ServoState.STANDBY
        if now - self._readiness_at > self.deadman_timeout_s:
            self._reason = "readiness missing or older than the deadman timeout"
        else:
            names = {0: "SLEEP", 1: "invalid (1)", 2: "STANDBY"}
            self._reason = f"readiness is {names.get(self._readiness, self._readiness)}, not ENGAGED"
