"""An axis's views: its health and the ``sys.*`` report registers, read from the shared state on demand.

The views themselves (what each register holds) are :mod:`._reports`' pure functions; here they are fed from the
axis's gate, loop, drive, follower and counters. Nothing here changes the axis.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from pycyphal.application.heartbeat_publisher import Health

from cyphal_common.clocks import system_minus_monotonic_s

from .. import registers as R
from ..arming import ServoState
from ..control import MimicSample
from ..control import _layout as L
from ._counters import EventCounts
from ._reports import (
    counters_view,
    envelope_view,
    events_view,
    json_register,
    motion_view,
    real64_register,
    reference_view,
    status_view,
    text_register,
    timing_view,
)
from ._state import AxisState


class AxisViews:
    """Health, ``sys.status``, ``sys.motion``, ``sys.reference``, ``sys.counters``, ``sys.events``, ``sys.timing``,
    ``sys.drive``, ``sys.last_rejection`` and (a follower's) ``sys.mimic`` of one axis.

    :param restarts: how many times the node restarted (for ``sys.counters``).
    :param started_at_s: when the node started [second, ``time.monotonic``] (for ``sys.events``).
    """

    def __init__(self, state: AxisState, restarts: Callable[[], int], started_at_s: float) -> None:
        self._s = state
        self._restarts = restarts
        self._started_at_s = started_at_s

    def serve(self) -> None:
        """Serve the report registers every axis has, :data:`~servo_node.registers.REPORTS` (a follower's
        ``sys.mimic`` is served once it exists)."""
        s = self._s
        views = {
            R.SYS_STATUS: json_register(self.status),
            R.SYS_MOTION: json_register(self.motion),
            R.SYS_REFERENCE: real64_register(self.reference),
            R.SYS_ENVELOPE: real64_register(self.envelope),
            R.SYS_COUNTERS: json_register(self.counts),
            R.SYS_EVENTS: json_register(self.events),
            R.SYS_TIMING: json_register(self.timing),
            R.SYS_DRIVE: json_register(lambda: s.drive.view() if s.drive else {}),
            R.SYS_LAST_REJECTION: text_register(lambda: s.counters.last_rejection),
        }
        if set(views) != set(R.REPORTS):
            raise RuntimeError(f"the report views {sorted(views)} are not the declared {R.REPORTS}")
        for name in R.REPORTS:
            s.registers.serve(name, views[name])

    def serve_mimic(self) -> None:
        """Serve ``sys.mimic``, the :data:`~servo_node.registers.FOLLOWER_REPORTS` (a follower only)."""
        self._s.registers.serve(R.SYS_MIMIC, json_register(self.mimic))

    def health(self) -> Health:
        """WARNING in error, ADVISORY for a second after a rejected setpoint or missed ticks of the loop, else
        NOMINAL."""
        s = self._s
        if s.gate.update(s.now()) is ServoState.ERROR:
            return Health.WARNING
        now = time.monotonic()
        if now - max(s.counters.last_rejection_at, s.counters.ticks_missed_at) < 1.0:
            return Health.ADVISORY
        return Health.NOMINAL

    def udral_state(self) -> tuple[bool, int, int]:
        """(engaged, health, error count) for the UDRAL publications."""
        s = self._s
        sample = s.started_loop().sample()
        errors = s.counters.setpoints_rejected + s.registry.refused_writes + sample.error_count
        return s.gate.update(s.now()) is ServoState.ENGAGED, int(self.health()), errors

    def status(self) -> dict[str, Any]:
        """``sys.status`` (see :func:`~servo_node.axis._reports.status_view`)."""
        st = self._s
        g = st.gate
        state = g.update(st.now())  # First: the update that finds the deadman expired sets its reaction time.
        s = st.last_sample
        expired = s is not None and s.expired
        expired_after_s = s.expired_after_s if s is not None and expired else g.expired_after_s
        expired_at_s = math.nan
        if s is not None and expired and st.loop_clock == "real":
            expired_at_s = system_minus_monotonic_s() + s.expired_at_s  # The loop's clock is time.monotonic.
        extra: dict[str, Any] = dict(st.drive.peers()) if st.drive is not None else {}
        if st.timesync.pinned is not None or st.timesync.master_node_id is not None:
            extra["time_master"] = st.timesync.master_node_id
        if st.counters.last_refusal:
            extra["refused"] = st.counters.last_refusal
        if st.follower is None:
            return status_view(state, g.reason, g.error_code, st.setpoint, expired_after_s, expired_at_s, extra)
        # A follower: its motion is the relation (no setpoint); the lag flag and count, and why it stopped.
        m = MimicSample.read(st.started_loop().out) if st.loop is not None else None
        reason = st.follower.status_reason(m, state is ServoState.ENGAGED, g.reason)
        extra.update(lag=bool(m.lag) if m else False, lags=m.lag_count if m else 0)
        return status_view(state, reason, g.error_code, None, expired_after_s, expired_at_s, extra)

    def mimic(self) -> dict[str, Any]:
        """``sys.mimic`` (a follower only; see :meth:`~servo_node.axis._follower.Follower.view`)."""
        st = self._s
        assert st.follower is not None
        if st.loop is None:
            return {"leader": None}
        s = st.loop.sample()
        following = s.engaged and s.mode == L.MODE_MIMIC
        return st.follower.view(MimicSample.read(st.loop.out), following, st.counters.setpoints_ignored_mimic)

    def motion(self) -> dict[str, Any]:
        """``sys.motion`` (see :func:`~servo_node.axis._reports.motion_view`)."""
        loop = self._s.loop
        if loop is None:
            return motion_view(None, None, self._s.loop_clock)
        return motion_view(loop.sample(), loop.link_stats(), self._s.loop_clock)

    def reference(self) -> list[float]:
        """``sys.reference`` (see :func:`~servo_node.axis._reports.reference_view`)."""
        loop = self._s.loop
        return reference_view(loop.sample() if loop is not None else None)

    def envelope(self) -> list[float]:
        """``sys.envelope`` (see :func:`~servo_node.axis._reports.envelope_view`)."""
        loop = self._s.loop
        return envelope_view(loop.config.envelope if loop is not None else None)

    def counts(self) -> dict[str, Any]:
        """``sys.counters`` (see :func:`~servo_node.axis._reports.counters_view`)."""
        return counters_view(self._s.counters, self._s.registry.refused_writes, self._restarts())

    def timing(self) -> dict[str, Any]:
        """``sys.timing`` (see :func:`~servo_node.axis._reports.timing_view`)."""
        loop = self._s.loop
        if loop is None:
            return timing_view(None, np.zeros(0))
        return timing_view(loop.sample(), loop.period_errors(), self._s.counters.dynamics_lost)

    def events(self) -> dict[str, Any]:
        """``sys.events`` (see :func:`~servo_node.axis._reports.events_view`)."""
        st = self._s
        s, ts = st.last_sample, st.timesync
        drive = st.drive.peers() if st.drive is not None else {}
        e = EventCounts(
            loop_errors=s.error_count if s is not None else 0,
            feedback_faults=s.feedback_faults if s is not None else 0,
            commands_clipped=s.commands_clipped if s is not None else 0,
            foreign_drive=int(drive.get("foreign", 0)),
            master_changes=ts.master_changes,
            clock_steps=ts.clock_steps,
        )
        return events_view(st.counters, e, time.monotonic() - self._started_at_s)
