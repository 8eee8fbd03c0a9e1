"""Real-time subscriptions: a consumer that falls behind takes recent transfers, not an ever older backlog.

Why: pycyphal queues every received CAN frame of a subscription without a bound until its task takes it. A node
whose event loop cannot keep up with its traffic (a busy host) then acts on ever older messages: measured with four
CPU hogs beside a servo and its drive on udpmc CAN, the servo took its drive's feedback two seconds after it arrived,
found it stale and held its drive for lost while the drive reported 200 times a second; the drive, as starved,
followed commands as old.

What: :func:`bounded_backlog` bounds the subscription's frame queue to :data:`FRAMES`, dropped frames counted in
the session's statistics (``drops``): on Cyphal/CAN pycyphal's ``InputSession.frame_queue_capacity`` (a frame
arriving at a full queue is dropped), on Cyphal/UDP the sessions ``_udp_reception`` reads (the oldest queued frame
is dropped for the one just read: the loop reads what waited in the socket in batches). What the consumer takes is
then at most a few frames behind, and it spends no time on the rest. Other transports are left as they are.
"""

from __future__ import annotations

from typing import Any

from pycyphal.transport.udp._session._input import UDPInputSession

from ._udp_reception import BACKLOG_ATTRIBUTE

FRAMES = 8
"""Frames a real-time subscription keeps unread at most: a few messages of a drive's stream (one frame each on
CAN FD), enough for the transfers of several senders arriving together."""


def bounded_backlog(subscriber: Any, frames: int = FRAMES) -> bool:
    """Bound ``subscriber``'s frame queue to ``frames`` (Cyphal/CAN, Cyphal/UDP); True if bounded."""
    session = subscriber.transport_session
    if hasattr(session, "frame_queue_capacity"):
        session.frame_queue_capacity = frames
        return True
    if isinstance(session, UDPInputSession) and hasattr(session, "_frame_queue"):
        setattr(session, BACKLOG_ATTRIBUTE, frames)
        return True
    return False
