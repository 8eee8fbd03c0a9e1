"""What an axis counts: its setpoint intake and starts (:class:`AxisCounters`, kept since the process started) and
the other events ``sys.events`` reports (:class:`EventCounts`). Plain data; the views are in :mod:`._reports`."""

from __future__ import annotations

import math
from dataclasses import dataclass

COUNT_MAX = 2**32 - 1
"""Counts are reported up to this (saturated beyond): the largest that every counter register is sized for."""


@dataclass
class AxisCounters:
    """Event counts of one axis since the process started (they survive RESTART)."""

    setpoints_accepted: int = 0
    setpoints_rejected: int = 0
    setpoints_ignored_unarmed: int = 0
    """Valid setpoints not applied: not armed, still initialising, or stopping for a close/RESTART."""
    setpoints_ignored_error: int = 0
    """Valid setpoints not applied because the error that stopped the servo persists."""
    setpoints_bad_payload: int = 0
    """Rejected setpoints that were no ServoCommand at all (a payload of another size, undecodable)."""
    setpoints_coalesced: int = 0
    """Queued setpoints not applied behind newer ones: frames dropped unseen (a flood faster than the node decodes),
    and valid setpoints a newer one in the same batch superseded (a busy node)."""
    setpoint_publishers: int = 0
    """Distinct publishers on the setpoint subject within the last second."""
    setpoints_ignored_mimic: int = 0
    """Valid setpoints not applied because this axis follows a leader (mimic)."""
    setpoints_staged: int = 0
    """Setpoints that differed from the active one and waited for a start message (:mod:`servo_node.staging`)."""
    starts: int = 0
    """Start messages that applied a staged setpoint."""
    starts_refused: int = 0
    """Start messages that applied nothing (their setpoint never came, too old, too far ahead, not from the setpoint's
    publisher, sent before it)."""
    last_refusal: str = ""
    """The latest refused message that is no setpoint (a start), with its reason; ``sys.status`` ``refused``."""
    last_rejection: str = ""
    last_rejection_at: float = -math.inf
    """When [second, time.monotonic] the last setpoint was rejected."""
    dynamics_lost: int = 0
    """Traced samples the loop overwrote before the node published them as ``dynamics`` (``sys.timing``)."""
    ticks_missed_at: float = -math.inf
    """When [second, time.monotonic] the loop was last seen to have missed ticks (``sys.timing``)."""


@dataclass(frozen=True)
class EventCounts:
    """What ``sys.events`` counts besides the axis's :class:`AxisCounters`."""

    loop_errors: int = 0
    feedback_faults: int = 0
    commands_clipped: int = 0
    foreign_drive: int = 0
    """Messages on the drive's subjects from other nodes than the pinned drive (dropped)."""
    master_changes: int = 0
    """Time masters adopted after the first (:mod:`cyphal_common.timesync`)."""
    clock_steps: int = 0
    """Steps of the time master's clock beyond its bound."""
