"""A drive on a bus with delays, on the loop's simulated clock: the network side and the drive, tick by tick.

The loop under test is the real one (``ControlLoop`` with a remote drive's seqlocked arrays); this module plays
what the node's :class:`~servo_node.drive.udral.UdralDrive` and ``sim-plant`` do on a real bus, with the delays
chosen by the test instead of the host's scheduler: every drive period it sends the loop's command (recording the
send in ``rx`` exactly as ``UdralDrive`` does), delivers it to a ``sim_plant`` joint after the command delay
(interpreted by sim-plant's own :func:`~sim_plant_node._plant.interpret`), samples the joint at the drive's
publication rate with a timestamp of the drive's clock, and delivers the sample into ``rx`` after the
measurement delay. Deterministic: delays and jitter come from a seeded generator.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servo_node._seqlock import begin_write, end_write, read_seqlocked
from servo_node.control import ControlLoop, LoopConfig
from servo_node.drive import _remote_link as link
from servo_node.drive._bus import BusDrive
from sim_plant import Joint, JointParams
from sim_plant_node._plant import Mode, interpret

STEP = 1e-3
"""Loop period and joint step [second]."""
DRIVE_JOINT = JointParams(max_velocity=100.0, max_force=100.0)
"""sim-plant's joint with its register defaults."""


class LinkedDrive(BusDrive):
    """The loop's view of a bus drive: only the seqlocked arrays (the network side is :class:`Bus`)."""

    @classmethod
    def create(cls, reg: Any, node: Any, port_prefix: str = "") -> LinkedDrive:
        return cls()


@dataclass
class Bus:
    """The network side, the link and the drive; ``run`` advances everything by whole loop periods."""

    loop: ControlLoop
    joint: Joint
    command_delay: float = 0.003
    measure_delay: float = 0.003
    jitter: float = 0.0
    """Each delivery is late by up to this much more (uniform), in order."""
    drive_period: float = 0.005
    publish_period: float = 0.005
    clock_offset: float = 0.0
    """The drive's clock minus ours [second] (a drive on another host)."""
    seed: int = 1
    position_source: Callable[[float], tuple[float, float]] | None = None
    """If set: what the network side sends instead of the loop's velocity command, a UDRAL position setpoint
    (position, velocity limit) for send time t (to measure drive-side position loops)."""
    local_loop_gain: float = 0.0
    """> 0: the drive runs an interpolating position loop of this gain [1/s] on position setpoints (velocity
    feed-forward from consecutive setpoints over the nominal period) instead of sim-plant's Webots P controller."""
    velocity_scale: float = 1.0
    """The drive runs at this times the velocity it is told (a miscalibrated drive: gear ratio, encoder scale)."""
    enable_delay: float = 0.0
    """The drive takes commands this long after the first enabled one reached it (ODrive's closed loop, CiA 402's
    Operation Enabled; inf: never), ignoring them meanwhile; the network side learns its state one measurement
    delay later and says so in ``rx`` (``RX_TAKING``) as the ODrive and CiA 402 backends do."""
    true_errors: list[float] = field(default_factory=list)
    """|p_ref(t) − p(t)| of every tick with both at the same instant (the ground truth)."""
    positions: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._to_drive: list[tuple[float, int, float, float, bool]] = []
        self._to_loop: list[tuple[float, int, tuple[float, ...]]] = []
        self._n = 0
        self._last_cmd_arrival = -math.inf
        self._last_meas_arrival = -math.inf
        self._next_send = self.loop.now() + 0.0021  # Any phase: neither side knows the other's.
        self._next_publish = self.loop.now() + 0.0007
        self._tx = np.empty(link.N_TX)
        self._local: tuple[float, float, float] | None = None  # (arrival, position, feed-forward velocity)
        self._enabled_at = math.inf  # When the drive takes commands (enable_delay after the first enabled one).

    def _late(self, base: float, last: float) -> float:
        return max(base + self._rng.uniform(0.0, self.jitter), last)

    def run(self, seconds: float) -> None:
        rx = self.loop.drive.arrays.rx
        for _ in range(round(seconds / STEP)):
            t = self.loop.now()
            if t >= self._next_send - 1e-12:  # The node's publisher: send what the loop commands now.
                self._next_send += self.drive_period
                read_seqlocked(self.loop.drive.arrays.tx, self._tx)
                on = self._tx[link.TX_ENABLE] != 0.0
                v, f = float(self._tx[link.TX_V]), float(self._tx[link.TX_F])
                p = math.nan
                if self.position_source is not None:
                    p, v = self.position_source(t)
                # The state the drive reported (a drive that enables at once is taken as taking, as UDRAL's).
                taking = not on or self.enable_delay == 0.0 or t - self.measure_delay >= self._enabled_at
                begin_write(rx)
                rx[link.RX_TAKING] = 1.0 if taking else 0.0
                if on and taking:
                    rx[link.RX_SENT_T], rx[link.RX_SENT_V], rx[link.RX_SENT_F] = t, v, f
                    rx[link.RX_SENT_NEXT] = self._next_send
                    rx[link.RX_SENT_COUNT] += 1.0
                end_write(rx)
                at = self._last_cmd_arrival = self._late(t + self.command_delay, self._last_cmd_arrival)
                self._n += 1
                heapq.heappush(self._to_drive, (at, self._n, p, v, f, on))
            while self._to_drive and self._to_drive[0][0] <= t + 1e-12:  # sim-plant applies what arrived.
                _, _, p, v, f, on = heapq.heappop(self._to_drive)
                self._apply(t, p, v, f, on)
            if self._local is not None:  # The drive's own interpolating position loop, at its step rate.
                t_arr, p_k, v_ff = self._local
                target = p_k + v_ff * (t - t_arr)
                self.joint.set_velocity(v_ff + self.local_loop_gain * (target - self.joint.position))
            if t >= self._next_publish - 1e-12:  # sim-plant publishes its dynamics, stamped with its clock.
                self._next_publish += self.publish_period
                j = self.joint
                sample = (t + self.clock_offset, j.position, j.velocity, j.acceleration, self._force())
                at = self._last_meas_arrival = self._late(t + self.measure_delay, self._last_meas_arrival)
                self._n += 1
                heapq.heappush(self._to_loop, (at, self._n, sample))
            while self._to_loop and self._to_loop[0][0] <= t + 1e-12:  # The node receives it.
                at, _, (stamp, p, v, a, f) = heapq.heappop(self._to_loop)
                begin_write(rx)
                rx[link.RX_P], rx[link.RX_V], rx[link.RX_A], rx[link.RX_F] = p, v, a, f
                rx[link.RX_T], rx[link.RX_STAMP] = at, stamp
                rx[link.RX_COUNT] += 1.0
                end_write(rx)
            self.joint.step(STEP)
            self.loop.advance(STEP)
            s = self.loop.sample()
            if s.engaged:
                self.true_errors.append(abs(s.ref_position - self.joint.position))
            self.positions.append(self.joint.position)

    _mode = Mode.PASSIVE
    _force_cmd = 0.0

    def _apply(self, t: float, p: float, v: float, f: float, on: bool) -> None:
        j, prm = self.joint, self.joint.params
        if not on:
            j.set_force(0.0)
            self._mode = Mode.PASSIVE
            self._enabled_at = math.inf
            return
        if math.isinf(self._enabled_at):
            self._enabled_at = t + self.enable_delay  # Asked to enable now; inf + 0 stays never.
        if t < self._enabled_at:
            return  # Not enabled yet: what it is told is ignored.
        if self.local_loop_gain > 0.0 and math.isfinite(p):
            prev = self._local
            v_ff = (p - prev[1]) / self.drive_period if prev is not None else 0.0
            self._local = (t, p, v_ff)
            j.set_motor_force(prm.max_force)
            j.set_position(math.inf)
            self._mode = Mode.VELOCITY
            return
        c = interpret(p, v * self.velocity_scale, f, prm.max_velocity, prm.max_force)
        if c is None:
            return
        j.set_motor_force(c.motor_force)
        if c.mode is Mode.FORCE:
            j.set_force(c.force)
            self._force_cmd = c.force
        else:
            j.set_position(c.target_position)
            j.set_velocity(c.velocity)
        self._mode = c.mode

    def _force(self) -> float:
        if self._mode is Mode.FORCE:
            return self._force_cmd
        return self.joint.motor_force_feedback if self._mode is not Mode.PASSIVE else 0.0


def make_bus(config: LoopConfig, joint: JointParams | None = None, **link_params: float) -> Bus:
    """A started loop on the simulated clock commanding a joint over a :class:`Bus` with the given delays."""
    loop = ControlLoop(config, LinkedDrive(), clock="simulated")
    loop.start()
    return Bus(loop, Joint(joint or DRIVE_JOINT), **link_params)  # type: ignore[arg-type]
