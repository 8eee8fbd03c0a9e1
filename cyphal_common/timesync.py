"""Cyphal synchronized time (``uavcan.time.Synchronization.1.0``, fixed subject 7168): a master and its slaves.

The **master** publishes once per :data:`PERIOD_S`; each message carries the time at which the *previous* one was
transmitted (the transport's transmission timestamp where it reports one, else the time just before sending).
A **slave** pairs consecutive messages of one master (consecutive transfer-IDs): the second one's timestamp
``T`` and the reception time ``R`` of the first give a sample ``T − R`` of master clock − own clock (early by the
one-way latency, which is the same for every follower of the same bus and cancels between them); the estimate
is the median of the last :data:`WINDOW` samples. Of several masters the one with the lowest node-ID is used,
as the Specification asks, unless one is pinned (``pinned``: only that node is ever adopted, any other is ignored
and counted); a master silent for 3 periods is dropped and the offset falls back to 0.

What a node depending on the time cannot check, it reports (:meth:`TimeSync.take_notes`, counted in
:attr:`TimeSync.master_changes` and :attr:`TimeSync.clock_steps`): another master adopted, a foreign master
ignored (once per node), and an offset sample beyond :data:`STEP_BOUND_S` of both the estimate and the sample
before it (the master's clock stepped, reported once; the median follows it within half the window).

Synchronized time is the system clock (``time.time``) plus :attr:`TimeSync.offset_s`: a node's own clock when it
is the master, when sync is off, or when no master is heard. Nodes on one host share the system clock already.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import pycyphal
import pycyphal.application
import pycyphal.dsdl
import uavcan.time

PERIOD_S = 1.0
"""Publication period of the master [second] (the Specification's MAX_PUBLICATION_PERIOD)."""

TIMEOUT_S = 3.0 * PERIOD_S
"""A master not heard for this long is gone [second] (PUBLISHER_TIMEOUT_PERIOD_MULTIPLIER periods)."""

WINDOW = 8
"""Offset samples the estimate is the median of."""

MODES = ("off", "master", "slave")
"""``off``: own clock; ``master``: publish own clock; ``slave``: adopt the lowest-node-ID master heard."""

STEP_BOUND_S = 0.05
"""An offset sample this far from the estimate is a step of the master's clock (reported) [second]."""

SOURCES_MAX = 64
"""Foreign masters remembered (reported once each)."""

_SUBJECT_ID = 7168
_logger = logging.getLogger(__name__)
_instances: weakref.WeakKeyDictionary[pycyphal.application.Node, TimeSync] = weakref.WeakKeyDictionary()


class TimeSync:
    """One node's synchronized time; :meth:`of` shares one instance per node and ties it to the node's lifetime.

    :param clock: the node's own clock [second] (``time.time``; tests inject a skewed one).
    """

    def __init__(
        self,
        node: pycyphal.application.Node,
        mode: str,
        clock: Callable[[], float] = time.time,
        pinned: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"time sync mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self._node = node
        self._clock = clock
        self._samples: deque[float] = deque(maxlen=WINDOW)
        self._offset_s = 0.0
        self.master_node_id: int | None = None
        """The master followed (slave), or None."""
        self._master_heard_at = -float("inf")  # [second, time.monotonic]
        self._last: tuple[int, int, float] | None = None  # (master, transfer-ID, reception [own clock])
        self._task: asyncio.Task[None] | None = None
        self._sub: pycyphal.presentation.Subscriber[Any] | None = None
        self._session: pycyphal.transport.OutputSession | None = None
        self._tx_s = 0.0  # master: transmission time of the previous message [own clock]
        self.pinned = pinned
        """The only master adopted (None: the lowest node-ID heard)."""
        self.master_changes = 0
        """Masters adopted in place of another one (not the first)."""
        self.clock_steps = 0
        """Offset samples beyond :data:`STEP_BOUND_S` of the estimate."""
        self.foreign_masters = 0
        """Synchronization messages ignored: not from the pinned master."""
        self._foreign: set[int] = set()
        self._notes: list[str] = []

    @staticmethod
    def of(node: pycyphal.application.Node, mode: str, pinned: int | None = None) -> TimeSync:
        """The node's instance (created on the first call, started and closed with the node's lifetime hooks)."""
        inst = _instances.get(node)
        if inst is None:
            inst = _instances[node] = TimeSync(node, mode, pinned=pinned)
            node.add_lifetime_hooks(inst.start, inst.close)
        return inst

    @property
    def offset_s(self) -> float:
        """Synchronized time − own system clock [second]; 0 without a master."""
        if self.master_node_id is not None and time.monotonic() - self._master_heard_at > TIMEOUT_S:
            _logger.info("Time sync: master %s silent; own clock", self.master_node_id)
            self.master_node_id, self._offset_s, self._last = None, 0.0, None
            self._samples.clear()
        return self._offset_s

    def now_s(self) -> float:
        """Synchronized time now [second]."""
        return self._clock() + self.offset_s

    def start(self) -> None:
        """Begin publishing (master) or listening (slave); idempotent."""
        if self._task is not None or self._sub is not None or self.mode == "off":
            return
        if self.mode == "master":
            if self._node.id is None:
                raise pycyphal.application.PortNotConfiguredError("a time sync master needs a node-ID")
            spec = pycyphal.transport.OutputSessionSpecifier(pycyphal.transport.MessageDataSpecifier(_SUBJECT_ID), None)
            meta = pycyphal.transport.PayloadMetadata(pycyphal.dsdl.get_extent_bytes(uavcan.time.Synchronization_1_0))
            self._session = self._node.presentation.transport.get_output_session(spec, meta)
            self._task = asyncio.get_event_loop().create_task(self._publish_task(), name="timesync-master")
        else:
            self._sub = self._node.make_subscriber(uavcan.time.Synchronization_1_0)
            self._sub.receive_in_background(self._on_sync)

    def close(self) -> None:
        """Stop publishing or listening; idempotent."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._sub is not None:
            self._sub.close()
            self._sub = None
        self._session = None  # Owned by the transport, closed with it.

    async def _publish_task(self) -> None:
        """Master: every period, a message carrying the previous one's transmission time [µs, own clock].

        Ends on cancellation or, should the cancellation be lost, once :meth:`close` has let go of it: on
        Python 3.11 ``asyncio.wait_for`` (inside the transport's send) swallows a cancellation that meets the send's
        completion, and a closed master went on publishing (seen under load)."""
        session = self._session
        assert session is not None
        feedback_mono: list[float] = []
        session.enable_feedback(lambda fb: feedback_mono.append(float(fb.first_frame_transmission_timestamp.monotonic)))
        transfer_id = 0
        try:
            while self._task is asyncio.current_task():
                msg = uavcan.time.Synchronization_1_0(previous_transmission_timestamp_microsecond=int(self._tx_s * 1e6))
                feedback_mono.clear()
                ts = pycyphal.transport.Timestamp.now()
                own_s = self._clock()
                transfer = pycyphal.transport.Transfer(
                    ts, pycyphal.transport.Priority.IMMEDIATE, transfer_id, list(pycyphal.dsdl.serialize(msg))
                )
                ok = await session.send(transfer, time.monotonic() + PERIOD_S / 2)
                if ok:
                    transfer_id += 1
                    # The transmission timestamp if the transport reported it by now, else the time before sending.
                    late = feedback_mono[0] - float(ts.monotonic) if feedback_mono else 0.0
                    self._tx_s = own_s + max(0.0, late)
                await asyncio.sleep(PERIOD_S)
        except asyncio.CancelledError:
            pass
        except pycyphal.transport.ResourceClosedError:
            pass

    async def _on_sync(self, msg: uavcan.time.Synchronization_1_0, meta: pycyphal.transport.TransferFrom) -> None:
        """Slave: pair this message with the previous one of the same master (consecutive transfer-IDs)."""
        src = meta.source_node_id
        if src is None or src == self._node.id:
            return
        now_mono = time.monotonic()
        if self.pinned is not None and src != self.pinned:
            self.foreign_masters += 1
            if src not in self._foreign and len(self._foreign) < SOURCES_MAX:
                self._foreign.add(src)
                self._notes.append(f"time sync: master {src} ignored (pinned master: {self.pinned})")
            return
        current = self.master_node_id
        if current is not None and src != current:
            if src > current and now_mono - self._master_heard_at <= TIMEOUT_S:
                return  # A master with a higher node-ID while ours is alive: ignored.
            _logger.info("Time sync: master %s (was %s)", src, current)
            self.master_changes += 1
            self._notes.append(f"time sync: master {src} adopted (was {current})")
            self._samples.clear()
            self._last = None
        self.master_node_id = src
        self._master_heard_at = now_mono
        # The reception time on the own clock: the transport's monotonic stamp mapped through the clock now.
        rx_own = self._clock() - (now_mono - float(meta.timestamp.monotonic))
        prev_tx_us = int(msg.previous_transmission_timestamp_microsecond)
        last = self._last
        if last is not None and last[0] == src and meta.transfer_id == last[1] + 1 and prev_tx_us > 0:
            sample = prev_tx_us * 1e-6 - last[2]
            if self._samples and min(abs(sample - self._offset_s), abs(sample - self._samples[-1])) > STEP_BOUND_S:
                self.clock_steps += 1
                self._notes.append(f"time sync: master {src} clock stepped by {sample - self._offset_s:+.3f} s")
            self._samples.append(sample)
            self._offset_s = statistics.median(self._samples)
        self._last = (src, meta.transfer_id, rx_own)

    def take_notes(self) -> list[str]:
        """What to report since the last call: master changes, clock steps, foreign masters (once each)."""
        notes, self._notes = self._notes, []
        return notes

    def report(self) -> dict[str, Any]:
        """For a JSON register: mode, master node-ID, offset [ms]."""
        offset = self.offset_s
        return {"mode": self.mode, "master": self.master_node_id, "offset_ms": round(offset * 1e3, 3)}
