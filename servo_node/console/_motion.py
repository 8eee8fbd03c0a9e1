"""Motion from the console, only while a person holds a control on the page, and only if the console was started
with ``--allow-motion``.

Every motion is a **lease** a page holds on one axis (or several, for a coordinated move): the page renews it while
the user holds the control (every :data:`RENEW_S` on the page), and the console publishes the axis's setpoints only
while the lease is fresh. The lease ends — and the publishing with it, at once — when the user lets go (``release``),
when the page's WebSocket closes (a closed tab, a lost connection), or when no renewal came for :data:`LEASE_S` (a
frozen page). Nothing is sent to stop the axis: the servo's own deadman (``servo.deadman_timeout`` after the last
setpoint's reception) stops it to rest, as it would stop any publisher that died.

- *jog*: a velocity, as a Telega setpoint in velocity mode (target ±inf), within the node's own limits;
- *goto*: a target position with the node's default limits;
- *coord*: several axes moved together by :class:`servo_node.coord._session.Coordinator` through the console's
  node (its synchronisation, burst and hold), cancelled when the lease ends;
- *arm*: ``readiness`` ENGAGED on an axis that has the port, published while the page that armed it is connected;
- *rearm*: the vendor ``ExecuteCommand`` 0x7E00 (reset a drive fault) for the axis.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cyphal_common.tasks import cancel_and_wait

from ._bus import AxisInfo, Bus, ConsoleError

LEASE_S = 0.6
"""A hold not renewed for this long has ended (the page froze, or its messages stopped) [second]. A browser on a
busy host misses its 50 ms renewals for a few hundred milliseconds (0.3 s once ended a held jog in CI); a page that
closes or loses its connection ends its holds at once, whatever this is."""
RENEW_S = 0.05
"""How often the page renews a hold while the user holds the control [second]."""
FEED_MAX_S = 0.1
"""The longest interval between two setpoints of a held axis (a quarter of its deadman when shorter) [second]."""
READINESS_S = 0.1
"""How often an armed axis's readiness is published (at most a quarter of its deadman) [second]."""
COMMAND_REARM = 0x7E00
"""The servo's vendor command that resets a drive fault (``servo_node.node.COMMAND_REARM``)."""

_logger = logging.getLogger(__name__)


@dataclass
class Lease:
    """One held motion: whose (a page's id), on which axes, renewed when, and the task that publishes it."""

    owner: str
    keys: tuple[str, ...]
    kind: str
    params: dict[str, Any]
    renewed: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    result: dict[str, Any] | None = None


class Motion:
    """The console's motion: leases (:meth:`hold`, :meth:`release`, :meth:`drop_owner`), arming and re-arming.

    :param on_event: called with a message for the page of a lease's owner (the lease ended, a move's result).
    """

    def __init__(self, bus: Bus, allowed: bool, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.bus = bus
        self.allowed = allowed
        self._on_event = on_event or (lambda _owner, _msg: None)
        self.leases: dict[str, Lease] = {}
        """Axis key → the lease that holds it."""
        self._pubs: dict[int, Any] = {}
        self._readiness: dict[str, tuple[str, asyncio.Task[None]]] = {}
        self.published = 0
        """Setpoints published since the start (every kind of lease but coord)."""

    def check(self) -> None:
        if not self.allowed:
            raise ConsoleError("motion is off: start the console with --allow-motion to move servos from the page")
        if self.bus.anonymous:
            raise ConsoleError("the console is anonymous (no UAVCAN__NODE__ID): it cannot command servos")

    # ---------------------------------------------------------------- leases

    def hold(self, owner: str, kind: str, keys: list[str], params: dict[str, Any]) -> Lease:
        """Start or renew ``owner``'s hold of ``kind`` on the axes ``keys``; raises :class:`ConsoleError` when
        motion is off, an axis is unknown or has no setpoint port, another page holds one of them, or the
        parameters are unusable."""
        self.check()
        if not keys:
            raise ConsoleError("no axis to move")
        current = self.leases.get(keys[0])
        if current is not None and current.owner == owner and current.kind == kind and current.keys == tuple(keys) \
                and (kind != "coord" or current.params == params):
            current.renewed = time.monotonic()
            if kind != "coord":
                current.params = params  # A jog's speed may change while held.
            return current
        for key in keys:
            other = self.leases.get(key)
            if other is not None and other.owner != owner:
                raise ConsoleError(f"axis {key} is held by another page")
        axes = [self.bus.axis(k) for k in keys]
        for axis in axes:
            if axis.setpoint > 8191:
                raise ConsoleError(f"axis {axis.key} has no setpoint port (uavcan.sub."
                                   f"{axis.names.port('setpoint_servo')}.id)")
        self._validate(kind, axes, params)
        for key in keys:
            old = self.leases.get(key)
            if old is not None:
                self._end(old, "replaced")
        lease = Lease(owner, tuple(keys), kind, params)
        for key in keys:
            self.leases[key] = lease
        work = self._coord(lease, axes) if kind == "coord" else self._feed(lease, axes[0])
        lease.task = asyncio.get_running_loop().create_task(work, name=f"console-{kind}-{','.join(keys)}")
        return lease

    @staticmethod
    def _validate(kind: str, axes: list[AxisInfo], params: dict[str, Any]) -> None:
        if kind == "jog":
            v = float(params.get("velocity", math.nan))
            lo, hi = axes[0].velocity
            if not (math.isfinite(v) and lo <= v <= hi and v != 0.0):
                raise ConsoleError(f"jog velocity {v}: must be non-zero within the node's limits [{lo}, {hi}]")
        elif kind == "goto":
            if not math.isfinite(float(params.get("target", math.nan))):
                raise ConsoleError("move-to needs a finite target position")
        elif kind == "coord":
            targets = params.get("targets", [])
            if len(targets) != len(axes) or not all(math.isfinite(float(x)) for x in targets):
                raise ConsoleError("a coordinated move needs one finite target per axis")
            if str(params.get("sync", "phase")) not in ("phase", "time", "none"):
                raise ConsoleError(f"sync {params.get('sync')!r}: phase, time or none")
        else:
            raise ConsoleError(f"unknown motion {kind!r}")

    def release(self, owner: str, keys: list[str]) -> None:
        """``owner`` let go of the axes ``keys``: their publishing stops now."""
        for key in keys:
            lease = self.leases.get(key)
            if lease is not None and lease.owner == owner:
                self._end(lease, "released")

    def drop_owner(self, owner: str, why: str) -> None:
        """Everything ``owner`` holds or armed ends now (its socket closed, its heartbeats stopped)."""
        for lease in {id(x): x for x in self.leases.values() if x.owner == owner}.values():
            self._end(lease, why)
        for key, (who, _task) in list(self._readiness.items()):
            if who == owner:
                self._disarm(key)

    def _end(self, lease: Lease, why: str) -> None:
        for key in lease.keys:
            if self.leases.get(key) is lease:
                del self.leases[key]
        if lease.task is not None and not lease.task.done():
            lease.task.cancel()
        self._on_event(lease.owner, {"type": "motion", "keys": list(lease.keys), "state": "ended", "why": why})

    def _fresh(self, lease: Lease) -> bool:
        return all(self.leases.get(k) is lease for k in lease.keys) and time.monotonic() - lease.renewed < LEASE_S

    def _publisher(self, axis: AxisInfo) -> Any:
        import pycyphal.transport
        import zubax.telega

        from cyphal_common.transport import continue_after_restart

        if axis.setpoint not in self._pubs:
            pub = self.bus.node.make_publisher(zubax.telega.ServoCommand_1_0, axis.setpoint)
            pub.priority = pycyphal.transport.Priority.HIGH
            continue_after_restart(pub)
            self._pubs[axis.setpoint] = pub
        return self._pubs[axis.setpoint]

    async def _feed(self, lease: Lease, axis: AxisInfo) -> None:
        """Publish the held setpoint every quarter deadman (at most :data:`FEED_MAX_S`) while the lease is fresh."""
        import zubax.physics.dynamics
        import zubax.physics.kinematics
        import zubax.telega

        pub = self._publisher(axis)
        period = min(FEED_MAX_S, axis.deadman_s / 4.0)
        why = "not renewed"
        try:
            while self._fresh(lease):
                if lease.kind == "jog":  # Velocity mode: the target at infinity in the velocity's direction.
                    v = float(lease.params["velocity"])
                    kin = zubax.physics.kinematics.DoF2nd_1_0(position=math.copysign(math.inf, v), velocity=v)
                else:
                    kin = zubax.physics.kinematics.DoF2nd_1_0(position=float(lease.params["target"]), velocity=0.0)
                target = zubax.physics.dynamics.DoF2nd_1_0(kinematics=kin, force=0.0)
                await pub.publish(zubax.telega.ServoCommand_1_0(target=target))
                self.published += 1
                await asyncio.sleep(min(period, max(0.001, lease.renewed + LEASE_S - time.monotonic())))
        except Exception as ex:  # The hold ends with its reason, never silently.
            _logger.exception("%s of %s", lease.kind, axis.key)
            why = f"failed: {ex}"
        finally:
            if any(self.leases.get(k) is lease for k in lease.keys):
                self._end(lease, why)

    async def _coord(self, lease: Lease, axes: list[AxisInfo]) -> None:
        """A coordinated move by the coordinator through the console's node; the lease watchdog cancels it."""
        from servo_node.coord._axes import Axis, CoordError
        from servo_node.coord._session import Coordinator

        coord_axes = [Axis(a.node_id, a.setpoint, a.dynamics, a.key) for a in axes]
        watchdog = asyncio.get_running_loop().create_task(self._watch(lease))
        try:
            async with Coordinator(coord_axes, node=self.bus.node) as coord:
                def on_result(result: Any) -> None:
                    lease.result = {"type": "motion", "keys": list(lease.keys), "state": "arrived",
                                    "table": result.table()}
                    self._on_event(lease.owner, lease.result)

                await coord.move([float(x) for x in lease.params["targets"]], str(lease.params.get("sync", "phase")),
                                 None, on_result=on_result)
        except Exception as ex:  # The coordinator's refusal (CoordError) or failure: the page is told why.
            if not isinstance(ex, CoordError):
                _logger.exception("coordinated move of %s", lease.keys)
            self._on_event(lease.owner, {"type": "motion", "keys": list(lease.keys), "state": "refused",
                                         "why": str(ex)})
        finally:
            await cancel_and_wait([watchdog])
            if any(self.leases.get(k) is lease for k in lease.keys):
                self._end(lease, "ended")

    async def _watch(self, lease: Lease) -> None:
        while self._fresh(lease):
            await asyncio.sleep(RENEW_S)
        if lease.task is not None:
            lease.task.cancel()

    # ---------------------------------------------------------------- readiness and commands

    def arm(self, owner: str, key: str, engaged: bool) -> None:
        """Publish ``readiness`` ENGAGED on the axis while ``owner`` is connected (``engaged``), or stop and say
        STANDBY."""
        self.check()
        axis = self.bus.axis(key)
        if axis.readiness > 8191:
            raise ConsoleError(f"axis {key} has no readiness port: it needs no arming")
        if not engaged:
            self._disarm(key)
            asyncio.get_running_loop().create_task(self._say_standby(axis))
            return
        held = self._readiness.get(key)
        if held is not None and held[0] != owner:
            raise ConsoleError(f"axis {key} is armed by another page")
        if held is None:
            task = asyncio.get_running_loop().create_task(self._ready(axis), name=f"console-ready-{key}")
            self._readiness[key] = (owner, task)

    def armed(self) -> list[str]:
        return sorted(self._readiness)

    def _disarm(self, key: str) -> None:
        held = self._readiness.pop(key, None)
        if held is not None:
            held[1].cancel()

    def _readiness_pub(self, axis: AxisInfo) -> Any:
        import zubax.service

        return self.bus.node.make_publisher(zubax.service.Readiness_1_0, axis.readiness)

    async def _ready(self, axis: AxisInfo) -> None:
        import zubax.service

        pub = self._readiness_pub(axis)
        try:
            while True:
                await pub.publish(zubax.service.Readiness_1_0(zubax.service.Readiness_1_0.ENGAGED))
                await asyncio.sleep(min(READINESS_S, axis.deadman_s / 4.0))
        finally:
            pub.close()

    async def _say_standby(self, axis: AxisInfo) -> None:
        import zubax.service

        pub = self._readiness_pub(axis)
        try:
            await pub.publish(zubax.service.Readiness_1_0(zubax.service.Readiness_1_0.STANDBY))
        finally:
            pub.close()

    async def close(self) -> None:
        """End every lease and arming, then close the publishers; idempotent."""
        tasks = [t for t in (x.task for x in self.leases.values()) if t is not None]
        tasks += [t for _, t in self._readiness.values()]
        self.leases.clear()
        self._readiness.clear()
        await cancel_and_wait(tasks)
        for pub in self._pubs.values():
            pub.close()
        self._pubs.clear()


async def execute(bus: Bus, node_id: int, command: int, parameter: str = "") -> str:
    """Send ``uavcan.node.ExecuteCommand`` ``command`` to ``node_id``; the status name it answered with."""
    import uavcan.node

    client = bus.node.make_client(uavcan.node.ExecuteCommand_1, node_id)
    client.response_timeout = 2.0
    try:
        res = await client.call(uavcan.node.ExecuteCommand_1.Request(command=command, parameter=parameter))
    finally:
        client.close()
    if res is None:
        raise ConsoleError(f"node {node_id} did not answer the command")
    names = {v: k.removeprefix("STATUS_") for k, v in vars(uavcan.node.ExecuteCommand_1.Response).items()
             if k.startswith("STATUS_")}
    return names.get(int(res[0].status), str(res[0].status))
