"""The servo's error codes, one table used by the loop, the node and the reports.

Faults inside the control loop are values (:class:`ErrorCode`, reported in ``sys.status``, heartbeat health and
``status``); exceptions are for the Python API and configuration, all rooted at
:class:`cyphal_common.errors.ServoError`.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Servo error codes as reported in ``sys.status`` ``error``; 1 and 2 are the OTG's statuses."""

    NONE = 0
    INFEASIBLE = 1
    """The trajectory is infeasible for the requested target and limits."""
    NUMERICAL_FAILURE = 2
    """The trajectory planner failed numerically."""
    DRIVE_LOST = 3
    """No feedback from the drive within ``servo.drive.feedback_timeout``."""
    FOLLOWING_ERROR = 4
    """|p_ref − p| beyond ``servo.following_error.window`` for longer than ``servo.following_error.time``."""
    STOP_TIMEOUT = 5
    """A stop did not bring the joint to rest within its bound; the drive keeps braking."""
    NODE_ID_COLLISION = 6
    """Another node sends heartbeats with this node's ID; the servo refuses to actuate."""
    DRIVE_INCAPABLE = 7
    """The drive cannot move the joint as configured (no force, or an envelope of zero)."""
    FEEDBACK_NOT_FINITE = 8
    """The drive reported NaN or infinity: distrusted, the stop runs on the last good state."""
    FEEDBACK_IMPLAUSIBLE = 9
    """The drive's feedback moved faster than the drive can (a position step beyond v·Δt plus a margin)."""
    FEEDBACK_STAMP = 10
    """The drive's timestamp jumped against its reception time (a restarted drive, a stepped clock)."""
    DRIVE_FAULT = 11
    """The drive reports a fault (its own code and text in ``sys.status``), or could not be brought up."""

    @property
    def feedback(self) -> bool:
        """True for a fault of the drive's feedback (the loop distrusts it and stops on the last good state)."""
        return self in (ErrorCode.FEEDBACK_NOT_FINITE, ErrorCode.FEEDBACK_IMPLAUSIBLE, ErrorCode.FEEDBACK_STAMP)

    @property
    def text(self) -> str:
        """The error in words."""
        return _TEXT[self]


_TEXT = {
    ErrorCode.NONE: "",
    ErrorCode.INFEASIBLE: "trajectory infeasible for the requested target and limits",
    ErrorCode.NUMERICAL_FAILURE: "trajectory planner numerical failure",
    ErrorCode.DRIVE_LOST: "no feedback from the drive (feedback timeout)",
    ErrorCode.FOLLOWING_ERROR: "following error: the joint does not follow the reference",
    ErrorCode.STOP_TIMEOUT: "the stop did not reach rest within its bound; braking at zero velocity",
    ErrorCode.NODE_ID_COLLISION: "node-ID collision: another node uses this node-ID",
    ErrorCode.DRIVE_INCAPABLE: "the drive cannot move the joint (no force or a zero envelope)",
    ErrorCode.FEEDBACK_NOT_FINITE: "drive feedback not finite (NaN/inf): distrusted, stopping",
    ErrorCode.FEEDBACK_IMPLAUSIBLE: "drive feedback moved faster than the drive can: distrusted, stopping",
    ErrorCode.FEEDBACK_STAMP: "drive timestamp far from its reception: distrusted, stopping",
    ErrorCode.DRIVE_FAULT: "the drive reports a fault",
}
