"""The axes' ``dynamics`` as a coordinator hears them: each axis's latest state, and recordings of a move.

Each sample is kept with the node's own stamp (the instant it describes, on the nodes' synchronized clock), never
this process's reception time, so a coordinator that falls behind its sockets records the motion late but as it
was. The samples come from the transport's :class:`~cyphal_common.dynamics_tap.DynamicsTap` (below pycyphal's
presentation layer, one ``struct`` call each; shared with the console when the coordinator runs in it): recording
three nodes at 500 Hz through the generated deserializer cost this process enough CPU, on a loaded host, that its
own setpoint repetitions came late and the nodes' deadman stopped them. Importing this module needs no compiled DSDL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from cyphal_common.dynamics_tap import DynamicsTap
from cyphal_common.dynamics_tap import Sample as TapSample

from ._axes import Axis, CoordError
from ._result import Recorder

RECORDING_WAIT_S = 2.0
"""After a move, how long a coordinator waits for samples still on their way (a node publishes those its event
loop was late with; this process may be behind its sockets) before it judges what it has [second]."""

State = tuple[float, float, float, float]
"""(stamp [second], position, velocity, acceleration) of one sample."""


class Listener:
    """Every axis's ``dynamics`` from the transport's tap: the latest sample of each, and the recordings while
    :attr:`recorders` is set (one :class:`~._result.Recorder` per axis). Only the axis's own node is heard on its
    subject."""

    def __init__(self, transport: Any, axes: Sequence[Axis]) -> None:
        self._transport = transport
        self.axes = list(axes)
        self._consumers: list[tuple[int, Any]] = []
        self.latest: list[State | None] = [None] * len(axes)
        self.recorders: list[Recorder] | None = None
        self._fresh = asyncio.Event()

    def start(self) -> None:
        """Subscribe (idempotent); the latest samples start afresh."""
        if self._consumers:
            return
        self.latest = [None] * len(self.axes)
        tap = DynamicsTap.of(self._transport)
        for i, ax in enumerate(self.axes):
            consumer = self._consumer(i, ax.node_id)
            tap.add(ax.dynamics, consumer)
            self._consumers.append((ax.dynamics, consumer))

    def stop(self) -> None:
        """End the subscriptions (the latest samples stay)."""
        tap = DynamicsTap.of(self._transport)
        for subject, consumer in self._consumers:
            tap.remove(subject, consumer)
        self._consumers.clear()

    def record(self) -> list[Recorder]:
        """Start a recording of every axis, each from its latest sample (its state before what is recorded)."""
        self.recorders = [Recorder() for _ in self.axes]
        for rec, sample in zip(self.recorders, self.latest, strict=True):
            if sample is not None:
                rec.add(*sample)
        return self.recorders

    def take(self) -> list[Recorder] | None:
        """End the recording; returns it (None: none was running)."""
        recs, self.recorders = self.recorders, None
        return recs

    def _consumer(self, i: int, node_id: int) -> Any:
        def consume(source: int, sample: TapSample) -> None:
            if source == node_id:
                self._take(i, sample[:4])

        return consume

    def _take(self, i: int, sample: State) -> None:
        self.latest[i] = sample
        if self.recorders is not None:
            self.recorders[i].add(*sample)
        self._fresh.set()

    async def states(self, timeout: float = 3.0) -> list[State]:
        """The latest sample of every axis, waiting up to ``timeout`` for the first of each."""
        self.start()
        deadline = time.monotonic() + timeout
        while any(s is None for s in self.latest):
            self._fresh.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                silent = [ax.label + f" (subject {ax.dynamics})" for ax, s in zip(self.axes, self.latest, strict=True)
                          if s is None]
                raise CoordError(f"no dynamics from {', '.join(silent)}: is servo.dynamics_rate set, the "
                                 f"dynamics port configured, and its drive reporting (a node publishes measurements "
                                 f"only)?")
            try:
                await asyncio.wait_for(self._fresh.wait(), left)
            except TimeoutError:
                pass
        return [s for s in self.latest if s is not None]

    async def await_samples(self, stamp_to: float, timeout_s: float = RECORDING_WAIT_S) -> None:
        """Until every axis's recording reaches ``stamp_to`` (the samples' own clock), or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (self.recorders is not None and time.monotonic() < deadline
               and any(r.last_stamp() < stamp_to for r in self.recorders)):
            await asyncio.sleep(0.02)
