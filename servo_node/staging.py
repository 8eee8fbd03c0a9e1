"""Coordinated start: with a ``motion_start`` subject configured, a new setpoint waits for a start message.

Several nodes that share one start subject receive one multicast frame (on CAN, literally the same frame) naming
the instant their staged setpoints take effect, as a ``uavcan.time.SynchronizedTimestamp.1.0`` a little in the
future: each node's plan then starts at that instant exactly, whatever the delivery jitter of the setpoints before
it (a burst of separate publications, ~0.5 ms apart) or of the start frame itself (within its lead).

- A setpoint that differs from the active one (the command in force: none after an expiry or a stop) is *staged*:
  it does not move the joint, refresh the arming gate or the deadman. The active command stays in force and
  expires by its own deadman if no start follows.
- A start applies the staged setpoint if it is younger than the deadman and the start lies within
  [now − deadman, now + :data:`MAX_LEAD_S`]; otherwise it is refused with a reason.
- A start is obeyed only from the node that published the setpoint it starts (an anonymous one never), and only
  for a setpoint *received before the start was* (to :data:`REORDER_S`): a stranger's start, or a start sent ahead
  of its setpoint, is refused with a reason. Received means the transport's reception timestamps, not the order the
  two are handled in: they travel on different subjects and are handled by different tasks, so a start handled
  before the setpoint that was received just before it waits for it (even past its instant: a busy node's event
  loop reads both late, and the plan then starts late, never earlier than its previous tick); if none comes it
  lapses (refused, once the deadman has passed after its instant). Each sender's start waits on its own (up to
  :data:`MAX_PENDING` senders): a stranger's start never displaces the coordinator's.
- The same setpoint as the active one keeps it alive, as without staging, dated no earlier than a start still
  pending (a repeat must not start it early); it also completes a start that waited for it: an axis a coordinated
  move holds at its target gets its setpoint again and the start, which then has nothing to start (no refusal).
- A repeat of the start just obeyed (same node, same instant) is ignored, whatever is staged since: one start
  starts one setpoint. A coordinator sends its first start twice (``servo_node.coord``: on CAN a restarted sender's
  first transfer can be taken for its former self's last) and repeats each start with its setpoints for a while
  (a node that lost the start, or the setpoint it starts, starts late rather than not at all).

Pure logic on an injected clock [second, the loop's clock]; :mod:`.axis` feeds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .setpoint import Setpoint

MAX_LEAD_S = 1.0
"""A start at most this far ahead is accepted (farther: a wrong clock, refused rather than waited for)."""

MAX_PENDING = 8
"""Starts from this many senders at most wait for their setpoints at once (a flood of senders: the oldest goes)."""

REORDER_S = 0.05
"""How much later than its start a setpoint may be stamped and still count as received before it. The two travel
on different subjects, stamped by different receiving threads: a coordinator's start sent right after its burst is
stamped before the last setpoint now and then (by a few ms, more under load). A start sent ahead of its setpoint
(by more than this) is still refused."""


@dataclass(frozen=True)
class Start:
    """A staged setpoint released: apply ``setpoint`` as if received at ``at_s`` (the start instant)."""

    setpoint: Setpoint
    at_s: float
    received_at_s: float
    """The staged setpoint's latest reception (what the arming gate's deadman counts from)."""


@dataclass(frozen=True)
class _Pending:
    """A start handled before the setpoint it starts: its instant, its reception, its sender."""

    at_s: float
    received_at_s: float
    source: int


class Staging:
    """The setpoint waiting for its start, and the start still pending."""

    def __init__(self, deadman_s: float) -> None:
        self.deadman_s = deadman_s
        self.staged: Setpoint | None = None
        self._staged_at = -math.inf
        self._staged_by: int | None = None
        self._staged_first = -math.inf  # The first reception of the staged setpoint (its repeats keep it).
        self._start_at = -math.inf  # The instant of the last start obeyed, and its sender.
        self._started_by: int | None = None
        self._pending: dict[int, _Pending] = {}  # Sender → its start waiting for its setpoint.

    def offer(self, sp: Setpoint, at_s: float, active: Setpoint | None, source: int | None) -> Start | float | None:
        """A valid, armed setpoint from ``source`` received at ``at_s``: the time to apply it at, the start it
        completes (one from the same node, received after it but handled first), or None if it is staged."""
        p = self._pending.get(source) if source is not None else None
        if sp == active:
            if p is not None and at_s <= p.received_at_s + REORDER_S:
                del self._pending[p.source]  # Its start has nothing to start: this axis holds its target.
            return max(at_s, self._start_at)
        if p is not None and at_s <= p.received_at_s + REORDER_S:
            del self._pending[p.source]
            self.staged, self._start_at, self._started_by = None, p.at_s, p.source
            return Start(sp, p.at_s, at_s)
        if sp != self.staged or source != self._staged_by:
            self._staged_first = at_s  # A repeat keeps its first reception: the one a start must come after.
        self.staged, self._staged_at, self._staged_by = sp, at_s, source
        return None

    def start(self, at_s: float, now_s: float, source: int | None) -> Start | str | None:
        """A start message from ``source`` for ``at_s``, received at ``now_s``: the setpoint it releases, None if
        it waits for its setpoint (see :meth:`offer`), or why it releases none."""
        if source is None:
            return "start from an anonymous node"
        if at_s == self._start_at and source == self._started_by:
            return None  # The start just obeyed, again: it started its setpoint, and starts no other.
        if not math.isfinite(at_s) or at_s - now_s > MAX_LEAD_S:
            return f"start {at_s - now_s:.3f} s ahead: more than {MAX_LEAD_S:g} s (clock not synchronised?)"
        if now_s - at_s > self.deadman_s:
            return f"start {now_s - at_s:.3f} s in the past: older than the deadman"
        sp = self.staged
        if sp is not None and now_s - self._staged_at > self.deadman_s:
            self.staged = sp = None
        if sp is not None and self._staged_first > now_s + REORDER_S:
            return "start received before its setpoint"  # Handled after it, but the setpoint came later.
        if sp is not None and source != self._staged_by:
            return f"start from node {source}: the staged setpoint is node {self._staged_by}'s"
        if sp is None:  # Its setpoint not handled yet (it may be, late: its instant may have passed already).
            self._pending.pop(source, None)  # Its latest start waits (and goes last among the senders').
            if len(self._pending) >= MAX_PENDING:
                del self._pending[next(iter(self._pending))]
            self._pending[source] = _Pending(at_s, now_s, source)
            return None
        self.staged = None
        self._pending.pop(source, None)
        self._start_at, self._started_by = at_s, source
        return Start(sp, at_s, self._staged_at)

    def lapsed(self, now_s: float) -> str | None:
        """Why a start that waited for its setpoint lapsed (once, a deadman after its instant), or None; one per
        call (the supervision calls it every period)."""
        for p in self._pending.values():
            if now_s - p.at_s > self.deadman_s:
                del self._pending[p.source]
                return f"no setpoint from node {p.source} received before its start"
        return None
