"""What the parts of one axis share: its names, registers, counters, gate and peers, the loop and the drive once
started, and the setpoint in force.

The axis (:mod:`._axis`) builds one :class:`AxisState` and hands it to its setpoint path (:mod:`._setpoints`),
its supervision (:mod:`._supervision`) and its views (:mod:`._views`); they read and write it, nothing else does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cyphal_common.errors import ServoError
from cyphal_common.timesync import TimeSync

from ..arming import ArmingGate
from ..control import ControlLoop, LoopSample
from ..diagnostics import Diagnostics
from ..drive import Drive
from ..registers import AxisNames, AxisRegisters, ServoRegistry
from ..setpoint import Setpoint
from ..staging import Staging
from ._counters import AxisCounters
from ._follower import Follower
from ._intake import SetpointIntake
from ._udral_face import UdralFace


class AxisState:
    """The state the parts of one :class:`~servo_node.axis.Axis` share (one per axis, as long as it lives).

    :param loop_clock: ``"real"`` (``time.monotonic``) or ``"simulated"`` (the loop's simulated time).
    :param now: the axis's time [second] (:meth:`~servo_node.axis.Axis.now`, looked up on the axis at each call,
        so that all parts keep one clock).
    """

    def __init__(
        self,
        names: AxisNames,
        registers: AxisRegisters,
        registry: ServoRegistry,
        counters: AxisCounters,
        diagnostics: Diagnostics,
        loop_clock: str,
        now: Callable[[], float],
        intake: SetpointIntake,
        gate: ArmingGate,
        staging: Staging | None,
        udral: UdralFace,
        timesync: TimeSync,
    ) -> None:
        self.names = names
        self.registers = registers
        self.registry = registry
        self.counters = counters
        self.diag = diagnostics
        self.loop_clock = loop_clock
        self.now = now
        self.intake = intake
        self.gate = gate
        self.staging = staging
        """Setpoints wait for their start (:mod:`servo_node.staging`); None without a start subject."""
        self.udral = udral
        self.timesync = timesync
        self.follower: Follower | None = None
        """A mimic follower's leader input (set by the axis once built); None unless ``mimic_leader`` is configured."""
        self.loop: ControlLoop | None = None
        """The control loop, from the axis's start on."""
        self.drive: Drive | None = None
        """The drive, from the axis's start until its close."""
        self.setpoint: Setpoint | None = None
        """The setpoint last commanded to the loop."""
        self.failed_setpoint: Setpoint | None = None
        """The setpoint that failed (infeasible, numerical failure): it cannot end the error it caused."""
        self.last_sample: LoopSample | None = None
        """The loop's sample of the latest supervision."""
        self.halting = False
        """No setpoint applies any more: the axis stops for good."""
        self.collided = False
        """Another node uses our node-ID."""
        self.closed = False
        self.feedback_due = asyncio.Event()
        """Set when ``feedback`` should go out now (a setpoint applied, a state change)."""

    def started_loop(self) -> ControlLoop:
        """The control loop; a :class:`ServoError` before the axis started."""
        if self.loop is None:
            raise ServoError(f"axis {self.names.axis!r} is not started")
        return self.loop

