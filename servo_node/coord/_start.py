"""How a coordinator's moves start: on one start message on the subject every axis shares, or at each setpoint's
reception; chosen from the request and the axes' ``uavcan.sub.motion_start.id`` registers."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from cyphal_common.tasks import gather_all

from ._axes import Axis, CoordError


class Coordinator(Protocol):
    """What the start's choice needs of a coordinator: its axes and a register read."""

    axes: list[Axis]

    async def read_register(self, i: int, name: str) -> Any: ...

START_AUTO = "auto"
"""The coordinator's default start: one start message on the subject every axis shares, else reception."""

MAX_SUBJECT_ID = 8191
"""The largest subject-ID; a port register above it is unset (65535)."""


async def start_subjects(coord: Coordinator) -> list[int | None]:
    """Each axis's ``uavcan.sub.motion_start.id`` (None: unset or unreadable)."""

    async def port_id(i: int) -> int | None:
        try:
            v = list(await coord.read_register(i, "uavcan.sub.motion_start.id"))
        except CoordError:
            return None
        return int(v[0]) if v and int(v[0]) <= MAX_SUBJECT_ID else None

    return await gather_all(port_id(i) for i in range(len(coord.axes)))


async def choose_start(coord: Coordinator, request: int | str | None) -> tuple[int | None, str, bool]:
    """(the start subject or None, the path taken and why, whether every axis is known to subscribe to it) for
    ``request``: a subject given, :data:`START_AUTO` (the one every axis has, if they share one), or None
    (reception)."""
    if request is None:
        return None, "each axis on its setpoint's reception (start message off)", False
    if isinstance(request, int):
        return request, f"one start message on subject {request} (given)", False
    ids = await start_subjects(coord)
    unset = [ax.label for ax, v in zip(coord.axes, ids, strict=True) if v is None]
    if not unset and len(set(ids)) == 1:
        return ids[0], f"one start message on subject {ids[0]} (every axis's uavcan.sub.motion_start.id)", True
    why = (f"no motion_start subject on {', '.join(unset)}" if unset
           else f"the axes' motion_start subjects differ ({', '.join(map(str, ids))})")
    return None, f"each axis on its setpoint's reception: {why}", False


async def check_start_subject(coord: Coordinator, subject: int) -> None:
    """Every node must subscribe to ``subject`` (else it would start at its setpoint's reception, or never).

    :raises CoordError: one does not.
    """
    ids = await start_subjects(coord)
    wrong = [f"{ax.label} ({'none' if v is None else v})" for ax, v in zip(coord.axes, ids, strict=True)
             if v != subject]
    if wrong:
        raise CoordError(f"not subscribed to the start subject {subject} (uavcan.sub.motion_start.id): "
                         f"{', '.join(wrong)}")


class StartMessages:
    """A coordinator's start messages (``uavcan.time.SynchronizedTimestamp.1.0`` on ``pub``, naming instants in the
    synchronized time ``now`` reads): the session's first goes out twice, the last is repeated while young."""

    def __init__(self, pub: Any, now: Callable[[], float]) -> None:
        self.pub = pub
        self._now = now
        self._first = True
        self._msg: Any = None
        self.at_s = math.nan
        """The instant the last start named [second]."""

    async def publish(self, at_s: float) -> None:
        """One start naming ``at_s``: every staged setpoint starts then. The session's first goes out twice: on
        CAN a restarted coordinator's first transfer can be taken for its former self's last (see ``_burst``)."""
        import uavcan.time

        self.at_s = at_s
        self._msg = uavcan.time.SynchronizedTimestamp_1_0(microsecond=round(at_s * 1e6))
        for _ in range(2 if self._first else 1):
            await self.pub.publish(self._msg)
        self._first = False

    async def repeat(self, window_s: float) -> None:
        """The last start again, unless its instant is more than ``window_s`` past: a node that lost it, or lost
        the setpoint it starts (a repetition staged that since), starts then, late by the loss instead of never;
        a node that obeyed it ignores the copy (:mod:`servo_node.staging`). Sent after the setpoints' repetition."""
        if self._msg is not None and self._now() - self.at_s <= window_s:
            await self.pub.publish(self._msg)
