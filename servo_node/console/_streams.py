"""The live data of the plotted axes: every ``dynamics`` sample kept in a ring per axis, the reference and the
following error from ``sys.motion``, the limits from ``sys.status``; columns for the page, decimated to its width;
and recording into the scope's :class:`~servo_node.scope.Trace` (the same CSV as ``servo-node scope``).

The page's plots share one time base, the nodes' own sample stamps [second, system clock], cut into buckets of the
page's ``window / width``: a frame carries, per axis, the newest sample of each bucket it has not had, as columns
(never one object per sample). The rings are filled at the nodes' rates (up to 1 kHz and more); a page only costs
what it is sent.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cyphal_common.dynamics_tap import DynamicsTap
from cyphal_common.dynamics_tap import Sample as TapSample
from cyphal_common.tasks import cancel_and_wait
from servo_node.scope._trace import Trace

from ._bus import AxisInfo, Bus, ConsoleError

RING = 1 << 16
"""Samples kept per axis (65 s at 1 kHz) [count]."""
REFERENCE_PERIOD_S = 0.1
"""How often each plotted axis's ``sys.motion`` is read for its reference and following error [second]."""
COLUMNS = ("t", "p", "v", "a", "f")


class Ring:
    """The latest :data:`RING` samples of one axis; :attr:`count` numbers them since the start."""

    def __init__(self) -> None:
        self.data = np.zeros((len(COLUMNS), RING))
        self.count = 0

    def add(self, t: float, p: float, v: float, a: float, f: float) -> None:
        """Keep a sample; one not newer than the last kept is dropped (a node whose loop fell behind sends its last
        sample again: no news, and drawn twice it would look late)."""
        if self.count and t <= self.data[0, (self.count - 1) % RING]:
            return
        k = self.count % RING
        d = self.data
        d[0, k], d[1, k], d[2, k], d[3, k], d[4, k] = t, p, v, a, f
        self.count += 1

    def since(self, first: int) -> tuple[int, np.ndarray]:
        """(index of the first sample returned, the samples numbered ``first`` and later still kept)."""
        first = max(first, self.count - RING)
        if first >= self.count:
            return first, self.data[:, :0]
        idx = np.arange(first, self.count) % RING
        return first, self.data[:, idx]


@dataclass
class Cursor:
    """What one page has been sent of one axis."""

    next: int = 0
    bucket: float = -math.inf
    ref_sent: float = 0.0


@dataclass
class Recording:
    """A recording in progress: the axes' labels and the trace."""

    labels: dict[str, str]
    trace: Trace = field(default_factory=Trace)
    started_at: float = field(default_factory=time.time)


class Streams:
    """The ``dynamics`` subscriptions and reference reads of the axes some page plots or a recording holds."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.rings: dict[str, Ring] = {}
        self.reference: dict[str, list[tuple[float, float, float, float]]] = {}
        """Axis key → (t, p_ref, v_ref, following error) samples, oldest first (the latest few hundred)."""
        self._subs: dict[int, Any] = {}
        self._routes: dict[tuple[int, int], str] = {}
        self._wanted: dict[str, int] = {}
        self.recording: Recording | None = None
        self.received = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll_reference(), name="console-reference")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])
        for subject, consumer in self._subs.items():
            self._tap.remove(subject, consumer)
        self._subs.clear()

    # ---------------------------------------------------------------- subscriptions

    @property
    def _tap(self) -> DynamicsTap:
        """The ``dynamics`` tap of the console's transport (shared with a coordinator running in the console)."""
        return DynamicsTap.of(self.bus.node.presentation.transport)

    def want(self, keys: Iterable[str]) -> None:
        """One more user (a page, a recording) of each axis in ``keys``: subscribe to its ``dynamics``."""
        tap = self._tap
        for key in keys:
            axis = self.bus.axis(key)
            if axis.dynamics > 8191:
                raise ConsoleError(f"axis {key} publishes no dynamics (uavcan.pub.{axis.names.port('dynamics')}.id)")
            self._wanted[key] = self._wanted.get(key, 0) + 1
            self.rings.setdefault(key, Ring())
            self._routes[(axis.dynamics, axis.node_id)] = key
            if axis.dynamics not in self._subs:
                consumer = self._on_dynamics(axis.dynamics)
                tap.add(axis.dynamics, consumer)
                self._subs[axis.dynamics] = consumer

    def unwant(self, keys: Iterable[str]) -> None:
        """One user fewer of each axis in ``keys``; a subject nobody needs is closed."""
        for key in keys:
            left = self._wanted.get(key, 0) - 1
            if left > 0:
                self._wanted[key] = left
                continue
            self._wanted.pop(key, None)
            for route, k in list(self._routes.items()):
                if k == key:
                    del self._routes[route]
            used = {subject for subject, _ in self._routes}
            for subject in [s for s in self._subs if s not in used]:
                self._tap.remove(subject, self._subs.pop(subject))

    def _on_dynamics(self, subject: int) -> Any:
        def consume(source: int, sample: TapSample) -> None:
            key = self._routes.get((subject, source))
            if key is None:
                return
            self.received += 1
            self.rings[key].add(*sample)
            rec = self.recording
            if rec is not None and key in rec.labels:
                rec.trace.axis(rec.labels[key]).measured.add(*sample)

        return consume

    # ---------------------------------------------------------------- reference and limits

    async def _poll_reference(self) -> None:
        while True:
            await asyncio.sleep(REFERENCE_PERIOD_S)
            keys = list(self._wanted)
            await asyncio.gather(*(self._reference_of(k) for k in keys), return_exceptions=True)

    async def _reference_of(self, key: str) -> None:
        axis = self.bus.axis(key)
        answer = await self.bus.read_at(axis.node_id, axis.names.register("sys.motion"))
        text, t = answer.value, answer.at_s  # As the scope: its "t" is the loop's clock, and is dropped when long.
        try:
            motion = json.loads(text) if isinstance(text, str) else {}
            ref, meas = motion["ref"], motion["meas"]
            p, v, a = (float(x) for x in ref[:3])
            err = p - float(meas[0])
        except (ValueError, KeyError, TypeError, IndexError):
            return
        series = self.reference.setdefault(key, [])
        if series and t <= series[-1][0]:
            return
        series.append((t, p, v, err))
        del series[:-500]
        rec = self.recording
        if rec is not None and key in rec.labels:
            trace_axis = rec.trace.axis(rec.labels[key])
            trace_axis.reference.add(t, p, v, a)
            lim = self.limits(axis)
            if lim is not None:
                trace_axis.limits.add(t, *lim)

    @staticmethod
    def limits(axis: AxisInfo) -> list[float] | None:
        """[v_min, v_max, a_min, a_max, f_max] in force (``sys.status``; the node's defaults before any)."""
        servo = axis.status.get("servo", {}) if isinstance(axis.status, dict) else {}
        try:
            v, a = servo.get("v_lim", axis.velocity), servo.get("a_lim", axis.acceleration)
            f = float(servo.get("f_lim", 0.0)) or axis.force
            return [float(v[0]), float(v[1]), float(a[0]), float(a[1]), f if f > 0 else axis.force]
        except (TypeError, ValueError, IndexError):
            return None

    # ---------------------------------------------------------------- frames

    def frame(self, cursors: dict[str, Cursor], bucket_s: float) -> dict[str, Any]:
        """What a page with these ``cursors`` has not had yet: per axis the newest sample of each new bucket of
        ``bucket_s`` (columns ``t, p, v, f``), the reference's new samples (``t, p, v, e``) and the limits."""
        axes: dict[str, Any] = {}
        refs: dict[str, Any] = {}
        limits: dict[str, Any] = {}
        for key, cur in cursors.items():
            ring = self.rings.get(key)
            if ring is not None and ring.count > cur.next:
                _, d = ring.since(cur.next)
                cur.next = ring.count
                buckets = np.floor(d[0] / bucket_s)
                last = np.flatnonzero(np.append(buckets[1:] != buckets[:-1], True))  # newest of each bucket
                last = last[buckets[last] >= cur.bucket]
                if len(last):
                    cur.bucket = float(buckets[last[-1]])
                    sel = d[:, last]
                    axes[key] = {"t": sel[0].tolist(), "p": _rounded(sel[1]), "v": _rounded(sel[2]),
                                 "f": _rounded(sel[4])}
            series = self.reference.get(key, [])
            fresh = [s for s in series[-50:] if s[0] > cur.ref_sent]
            if fresh:
                cur.ref_sent = fresh[-1][0]
                refs[key] = {c: [s[i] for s in fresh] for i, c in enumerate(("t", "p", "v", "e"))}
            try:
                lim = self.limits(self.bus.axis(key))
            except ConsoleError:
                lim = None
            if lim is not None:
                limits[key] = lim
        return {"type": "frame", "bucket_s": bucket_s, "sent_at": time.time(), "axes": axes, "ref": refs,
                "lim": limits}

    # ---------------------------------------------------------------- recording

    def start_recording(self, keys: list[str]) -> Recording:
        """Record these axes (their dynamics at full rate, reference, limits) until :meth:`stop_recording`."""
        if self.recording is not None:
            raise ConsoleError("a recording is already running")
        if not keys:
            raise ConsoleError("no axis to record")
        self.want(keys)
        self.recording = Recording({k: _label(self.bus.axis(k)) for k in keys})
        for k in keys:
            axis = self.bus.axis(k)
            self.recording.trace.axis(_label(axis)).unit = axis.unit
        return self.recording

    def stop_recording(self) -> Recording:
        rec = self.recording
        if rec is None:
            raise ConsoleError("no recording is running")
        self.recording = None
        self.unwant(rec.labels)
        return rec


def _label(axis: AxisInfo) -> str:
    return f"node {axis.node_id}" + (f" {axis.name}" if axis.name else "")


def _rounded(x: np.ndarray) -> list[float]:
    """Seven significant digits (a float32's), so a frame's JSON stays short."""
    return [float(f"{v:.7g}") for v in x.tolist()]
