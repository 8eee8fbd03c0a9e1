"""Mimic intake of one follower axis: the leader's ``dynamics`` and ``feedback`` become the loop's ``lead`` array.

A servo is a follower when its ``mimic_leader`` subscription is configured (``zubax.physics.dynamics.DoF3rdTs.1.0``,
what a leader servo publishes on ``dynamics``). The leader is ``servo.mimic.leader_node_id``, or if that is 65535
the node-ID of the first sample, for the life of the node (a RESTART chooses again): a second publisher on the
leader's subjects can neither take over nor move the follower. Its samples are counted (``sys.mimic``
``foreign``), the publishers of the last second too (``sources``; more than one is a diagnostic, as for the
setpoint subject). Its *state* is observed through its ``feedback``
(``zubax.service.actuator.Feedback.1.0``, which a servo publishes right after each applied setpoint and state
change and at ≥ 1 Hz) on ``mimic_leader_feedback``, from the same node-ID: readiness ENGAGED with health below
WARNING is a leader that may be followed; anything else — or no feedback for :data:`LEADER_STATE_TIMEOUT_S` — is
written into the loop at once, and the loop stops the follower at its next tick (``control/_mimic.py``). Without
that port the leader's state cannot be observed, and the follower refuses to follow (a configuration fault).

Timestamps: the leader stamps its dynamics with Cyphal synchronized time (:mod:`cyphal_common.timesync`); the
follower maps a stamp onto its loop clock through its own offset, so the loop can extrapolate the sample from the
instant it describes.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import pycyphal
import pycyphal.application
import zubax.physics.dynamics
import zubax.service.actuator

from cyphal_common.clocks import system_minus_monotonic_s
from cyphal_common.timesync import TimeSync

from ..control import LeaderInput, MimicSample, Relation
from ..control import _layout as L
from ..diagnostics import Diagnostics, Severity
from ..registers import LEADER_ANY, AxisNames, AxisRegisters
from ..setpoint import ProfileLimits, Setpoint
from ._counters import COUNT_MAX, AxisCounters
from ._intake import PUBLISHER_WINDOW_S, reception_time_s
from ._reports import REGISTER_STRING_MAX

LEADER_STATE_TIMEOUT_S = 3.0
"""No feedback from the leader for this long: its state is unknown, and the follower stops [second]."""

SOURCES_MAX = 64
"""Sources remembered on the leader's subjects (spoofed node-IDs cannot grow memory beyond this)."""

STALE_WINDOW_US = 10_000_000
"""A leader sample stamped up to this much older than the newest one taken is a stale duplicate [µs]."""

HEALTH_WARNING = 2
"""zubax.service.Health: WARNING and worse are a leader in error."""

READINESS_ENGAGED = 3

_STATE_NAMES = {L.LEADER_OK: "engaged", L.LEADER_DISENGAGED: "disengaged", L.LEADER_ERROR: "error"}


class Follower:
    """The leader's streams of one axis. Create with :meth:`create` (None: the axis is no follower).

    :param now: the axis's clock [second] (the loop clock).
    """

    def __init__(
        self,
        node: pycyphal.application.Node,
        names: AxisNames,
        registers: AxisRegisters,
        dynamics: pycyphal.presentation.Subscriber[Any],
        clock: TimeSync,
        real_clock: bool,
        diagnostics: Diagnostics,
        loop_now: Callable[[], float],
    ) -> None:
        self._diag = diagnostics
        self._label = names.label
        self.relation = Relation(
            registers.real("servo.mimic.multiplier"),
            registers.real("servo.mimic.offset"),
            registers.real("servo.mimic.reference"),
        )
        self.compensate = registers.flag("servo.mimic.compensation")
        self._registers = registers
        self._deadman_s = registers.real("servo.deadman_timeout")  # Read at start, as the loop's (restart applies).
        self._dynamics = dynamics
        self._feedback = _subscriber(node, zubax.service.actuator.Feedback_1_0, names.port("mimic_leader_feedback"))
        self.fault = "" if self._feedback is not None else "mimic: mimic_leader_feedback not configured (leader state)"
        """Why this follower cannot follow (its configuration); empty when it can."""
        self._clock = clock
        self._real_clock = real_clock
        self._now = loop_now  # The axis's clock: a sample's reception when it has no transport stamp to use.
        self._input: LeaderInput | None = None
        pinned = int(registers.real("servo.mimic.leader_node_id"))
        self.leader_node_id: int | None = None if pinned == LEADER_ANY else pinned
        """The node followed: the register's, or the first sample's sender; samples from any other are foreign."""
        self.state = L.LEADER_DISENGAGED
        self._state_at = -math.inf  # [second, the axis's clock] of the latest feedback
        self._sample_at = -math.inf  # [second, the axis's clock] of the latest leader sample taken
        self._lost = False  # The leader went silent: its last reported state is void until it reports again.
        self.samples = 0
        self.foreign_samples = 0
        """Samples on the leader subjects from other nodes than the leader (ignored)."""
        self._seen: dict[int, float] = {}  # source node-ID -> time.monotonic of its latest sample on either subject
        self.sources = 0
        """Distinct publishers on the leader's subjects within the last second (the leader and any other)."""
        self.bad_samples = 0
        """Leader samples with a non-finite position or velocity (ignored; the lost-leader deadman runs on)."""
        self.stale_samples = 0
        """Leader samples dropped: stamped no newer than the newest taken (a late duplicate)."""
        self._newest_stamp_us = 0
        self.on_sample: Any = None
        """Called with the reception time [loop clock] of each valid leader sample (the axis engages here)."""
        self.on_state: Any = None
        """Called after the leader's state changed."""

    @staticmethod
    def create(
        node: pycyphal.application.Node,
        names: AxisNames,
        registers: AxisRegisters,
        clock: TimeSync,
        real_clock: bool,
        diagnostics: Diagnostics,
        loop_now: Callable[[], float],
    ) -> Follower | None:
        """A follower if ``mimic_leader`` is configured, else None."""
        sub = _subscriber(node, zubax.physics.dynamics.DoF3rdTs_1_0, names.port("mimic_leader"))
        return None if sub is None else Follower(node, names, registers, sub, clock, real_clock, diagnostics, loop_now)

    @property
    def leader_ok(self) -> bool:
        """The leader reports ENGAGED and healthy (and the report is fresh)."""
        return self.state == L.LEADER_OK and not self._lost and not self.fault

    def limits(self) -> Setpoint:
        """The follower's own limits (``servo.profile.*``, ``servo.torque_limit``), as a setpoint without target."""
        reg = self._registers
        v, a = reg.reals("servo.profile.velocity"), reg.reals("servo.profile.acceleration")
        lim = ProfileLimits(v[0], v[1], a[0], a[1], reg.real("servo.profile.jerk"))
        return Setpoint(0.0, 0.0, lim, reg.real("servo.torque_limit"))

    def start(self, lead: Any) -> None:
        """Begin feeding the loop's ``lead`` array (``ControlLoop.arrays.lead``)."""
        self._input = LeaderInput(lead, self.relation, self.compensate)
        self._dynamics.receive_in_background(self._on_dynamics)
        if self._feedback is not None:
            self._feedback.receive_in_background(self._on_feedback)

    def close(self) -> None:
        """Close the subscriptions; idempotent."""
        for sub in (self._dynamics, self._feedback):
            if sub is not None:
                sub.close()

    def _rx_loop_s(self, meta: pycyphal.transport.TransferFrom, now: float) -> float:
        return reception_time_s(meta) if self._real_clock else now

    def _is_leader(self, src: int | None) -> bool:
        if src is None:
            return False
        self._saw(src)
        if self.leader_node_id is None:
            self.leader_node_id = src
        if src != self.leader_node_id:
            self.foreign_samples += 1
            return False
        return True

    def stamp_to_loop_s(self, stamp_us: int) -> float:
        """A leader timestamp [µs, synchronized time] on the loop clock (NaN: none, or a simulated loop clock)."""
        if stamp_us <= 0 or not self._real_clock:
            return math.nan
        return stamp_us * 1e-6 - self._clock.offset_s - system_minus_monotonic_s()

    async def _on_dynamics(self, msg: Any, meta: pycyphal.transport.TransferFrom) -> None:
        if not self._is_leader(meta.source_node_id) or self._input is None:
            return
        kin = msg.value.kinematics
        p, v, a = float(kin.base.position), float(kin.base.velocity), float(kin.acceleration)
        if not (math.isfinite(p) and math.isfinite(v)):
            self.bad_samples += 1
            return
        stamp_us = int(msg.timestamp.microsecond)
        if stamp_us > 0 and 0 <= self._newest_stamp_us - stamp_us <= STALE_WINDOW_US:
            # Not newer than what we have: a late duplicate (accepted again after the transfer-ID timeout, or
            # from another interface) must never make a dead leader look alive, nor re-arm the follower. A stamp much
            # older than the newest is a leader that restarted with its clock: taken.
            self.stale_samples += 1
            if self.stale_samples == 1:
                self._diag.report(f"{self._label}mimic: a leader sample no newer than the last one dropped")
            return
        self._newest_stamp_us = stamp_us
        rx = self._rx_loop_s(meta, self._now())
        measured_at = self.stamp_to_loop_s(stamp_us)
        self._input.sample(p, v, a if math.isfinite(a) else 0.0, measured_at, rx)
        self.samples += 1
        self._sample_at = self._now()
        if self.on_sample is not None:
            self.on_sample(rx)

    async def _on_feedback(self, msg: Any, meta: pycyphal.transport.TransferFrom) -> None:
        if meta.source_node_id is not None:
            self._saw(meta.source_node_id)
        if meta.source_node_id is None or meta.source_node_id != self.leader_node_id:
            if meta.source_node_id is not None and self.leader_node_id is not None:
                self.foreign_samples += 1
            return
        hb = msg.heartbeat
        if int(hb.health.value) >= HEALTH_WARNING:
            state = L.LEADER_ERROR
        else:
            state = L.LEADER_OK if int(hb.readiness.value) == READINESS_ENGAGED else L.LEADER_DISENGAGED
        self._state_at = self._now()
        self._lost = False
        self._set_state(state, self._rx_loop_s(meta, self._now()))

    def _set_state(self, state: float, received_at_s: float) -> None:
        if state == self.state or self._input is None:
            return
        self.state = state
        self._input.state(state, received_at_s)  # The loop stops at its next tick if this is not OK.
        if self.on_state is not None:
            self.on_state()

    def _saw(self, src: int) -> None:
        if src not in self._seen and len(self._seen) >= SOURCES_MAX:
            del self._seen[min(self._seen, key=self._seen.__getitem__)]  # The longest silent one.
        self._seen[src] = time.monotonic()

    def supervise(self, now: float) -> None:
        """A leader whose feedback stopped is in an unknown state: not followed (the follower stops). So is a lost
        leader (no sample within the deadman timeout): only a feedback received after that may report it ENGAGED
        again — a leader that restarts sends samples before its first feedback (STANDBY), and the ENGAGED of its
        previous life must not arm the follower meanwhile. More than one publisher on the leader's subjects is
        reported (on change)."""
        if self.state == L.LEADER_OK and now - self._state_at > LEADER_STATE_TIMEOUT_S:
            self._set_state(L.LEADER_DISENGAGED, now)
        if now - max(self._sample_at, self._state_at) > self._deadman_s:
            self._lost = True  # The loop stops on its own (lost leader); this only keeps it from re-arming.
        before = self.sources
        mono = time.monotonic()
        recent = sorted(n for n, t in self._seen.items() if mono - t <= PUBLISHER_WINDOW_S)
        self.sources = len(recent)
        if self.sources > 1 and before <= 1:
            others = [n for n in recent if n != self.leader_node_id]
            self._diag.report(f"{self._label}mimic: {self.sources} publishers on the leader's subjects; following "
                              f"node {self.leader_node_id} only, ignoring {others}")
        elif self.sources <= 1 < before:
            self._diag.report(f"{self._label}mimic: one publisher on the leader's subjects again", Severity.INFO)

    def ignore_setpoint(self, counters: AxisCounters) -> None:
        """A setpoint on a follower: counted, and the first one reported."""
        counters.setpoints_ignored_mimic += 1
        if counters.setpoints_ignored_mimic == 1:
            self._diag.report(f"{self._label}setpoints ignored: this axis follows a leader (mimic)")

    def status_reason(self, s: MimicSample | None, engaged: bool, gate_reason: str) -> str:
        """``sys.status`` reason of a follower: its fault, its leader (lagging?), why it stopped, or the gate's."""
        if self.fault:
            return self.fault
        if engaged:
            return f"following leader {self.leader_node_id}" + (" (lagging: beyond own limits)" if s and s.lag else "")
        if s is not None and s.stop_reason:
            return s.stop_reason
        return f"leader {self.state_name}; " + gate_reason

    @property
    def state_name(self) -> str:
        """The leader's state in a word."""
        return _STATE_NAMES.get(self.state, "?") if self.leader_node_id is not None else "unknown"

    def view(self, s: MimicSample, following: bool, ignored_setpoints: int) -> dict[str, Any]:
        """``sys.mimic``: leader, relation, target and error, lag, why following ended, the clock (≤ 255 bytes)."""
        r = self.relation
        doc: dict[str, Any] = {
            "leader": self.leader_node_id,
            "leader_state": self.state_name,
            "following": following,
            "rel": [_r(r.multiplier), _r(r.offset), _r(r.reference)],
            "target": _r(s.target),
            "err": _r(s.error, 3),
            "lag": s.lag,
            "lags": min(s.lag_count, COUNT_MAX),
            "age_ms": _r(1e3 * s.leader_age_s, 3),
            "extrap_ms": _r(1e3 * s.extrapolated_s, 3),
            "comp": self.compensate,
            "sync_ms": _r(1e3 * self._clock.offset_s, 4),
            "stop": s.stop_reason.split(":")[0],
            "stop_lat_ms": _r(1e3 * s.stop_latency_s, 3),
            "ignored_sp": min(ignored_setpoints, COUNT_MAX),
            "sources": min(self.sources, COUNT_MAX),
            "foreign": min(self.foreign_samples, COUNT_MAX),
        }
        if self.fault:
            doc["fault"] = self.fault[:60]
        for key in ("ignored_sp", "extrap_ms", "rel", "stop_lat_ms", "sync_ms"):  # Keep within a register string.
            if len(json.dumps(doc, separators=(",", ":")).encode()) <= REGISTER_STRING_MAX:
                break
            doc.pop(key)
        return doc


def _r(x: float, digits: int = 6) -> float | str:
    return float(f"{x:.{digits}g}") if math.isfinite(x) else str(x)


def _subscriber(node: pycyphal.application.Node, dtype: Any, name: str) -> pycyphal.presentation.Subscriber[Any] | None:
    try:
        return node.make_subscriber(dtype, name)
    except pycyphal.application.PortNotConfiguredError:
        return None
