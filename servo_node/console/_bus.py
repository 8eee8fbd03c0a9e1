"""The console's node on the Cyphal bus: which nodes are there, which are servos, their axes and their state.

One pycyphal node, built from the same ``UAVCAN__*`` registers as every other command
(:func:`cyphal_common.transport.make_transport`: UDP, CAN, udpmc); anonymous without a node-ID, when it only
listens (heartbeats, port lists, dynamics). pycyphal's ``NodeTracker`` keeps the heartbeats and ``GetInfo``; the
``uavcan.node.port.List`` and ``uavcan.diagnostic.Record`` of every node are kept beside them. A node that has the
``servo.axes`` register is a servo: its axes (``servo_node.registers.parse_axes``), their ports and limits are read
once per start of the node (:mod:`cyphal_common.register_reads`), and each axis's ``sys.status`` is polled.
No aiohttp here: the web layer reads :meth:`Bus.snapshot`.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cyphal_common.register_reads import READ_TIMEOUTS_S, Answer, Entry, access_register, read_register
from cyphal_common.tasks import cancel_and_wait, gather_all
from servo_node.registers import AxisNames, parse_axes

NODE_NAME = "io.github.cyphal_servo.console"
STATUS_PERIOD_S = 0.5
"""How often each servo axis's ``sys.status`` is read [second]."""
DIAGNOSTICS_KEPT = 200
LIST_AHEAD = 16
"""Register list requests in flight at once (a node of a hundred registers is listed in a few round trips)."""
UNSET_PORT = 65535

_logger = logging.getLogger(__name__)


class ConsoleError(RuntimeError):
    """The console cannot do what was asked (no transport, no node-ID for it, no such node or axis)."""


@dataclass
class AxisInfo:
    """One servo axis as the console knows it: its node, name (``""``: the unprefixed single axis), ports and the
    node's own limits."""

    node_id: int
    name: str
    setpoint: int = UNSET_PORT
    readiness: int = UNSET_PORT
    dynamics: int = UNSET_PORT
    deadman_s: float = 0.5
    velocity: tuple[float, float] = (-10.0, 10.0)
    acceleration: tuple[float, float] = (-50.0, 50.0)
    jerk: float = 500.0
    force: float = 100.0
    unit: str = "rad"
    status: dict[str, Any] = field(default_factory=dict)
    status_at: float = 0.0

    @property
    def key(self) -> str:
        """``"21"`` or ``"21.left"``: how the page names the axis."""
        return f"{self.node_id}.{self.name}" if self.name else str(self.node_id)

    @property
    def names(self) -> AxisNames:
        return AxisNames(self.name)

    def view(self) -> dict[str, Any]:
        return {"key": self.key, "node_id": self.node_id, "name": self.name, "setpoint": _port(self.setpoint),
                "readiness": _port(self.readiness), "dynamics": _port(self.dynamics), "deadman_s": self.deadman_s,
                "velocity": list(self.velocity), "acceleration": list(self.acceleration), "jerk": self.jerk,
                "force": self.force, "unit": self.unit, "status": self.status}


def _port(v: int) -> int | None:
    return v if v <= 8191 else None


def _subjects(ids: Any) -> list[int] | str:
    """A ``uavcan.node.port.SubjectIDList``: the subject-IDs, or ``"all"``."""
    if ids.sparse_list is not None:
        return sorted(int(s.value) for s in ids.sparse_list)
    if ids.mask is not None:
        return [i for i, b in enumerate(ids.mask) if b]
    return "all"


class Bus:
    """The console's node and what it knows of the others. :meth:`start` joins, :meth:`close` leaves (idempotent).

    :param environment: the ``UAVCAN__*`` registers (transport, node-ID); default ``os.environ``.
    """

    def __init__(self, environment: Mapping[str, str] | None = None) -> None:
        self._env = dict(os.environ if environment is None else environment)
        self.node: Any = None
        self._tracker: Any = None
        self._clients: dict[int, Any] = {}
        self._ports: dict[int, dict[str, Any]] = {}
        self.diagnostics: collections.deque[dict[str, Any]] = collections.deque(maxlen=DIAGNOSTICS_KEPT)
        self._diagnostic_seen = asyncio.Event()
        self.servos: dict[int, list[AxisInfo]] = {}
        """Node-ID → its axes, for every node known to be a servo."""
        self.not_servos: set[int] = set()
        self.offline: dict[int, tuple[Any, Any]] = {}
        """Node-ID → its last heartbeat and GetInfo, for every servo whose heartbeats stopped (shown as offline)."""
        self._discovery: dict[int, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.version = 0
        """Counts changes of what :meth:`snapshot` shows (the page's node list), for the web layer to push."""

    @property
    def anonymous(self) -> bool:
        return self.node is None or self.node.id is None

    async def start(self) -> None:
        if self.node is not None:
            return
        import pycyphal.application
        import uavcan.diagnostic
        import uavcan.node
        import uavcan.node.port
        from pycyphal.application.node_tracker import NodeTracker

        from cyphal_common.transport import make_transport

        registry = pycyphal.application.make_registry(None, self._env)
        transport = make_transport(registry)
        if transport is None:
            raise ConsoleError("no transport configured: set UAVCAN__UDP__IFACE or UAVCAN__CAN__IFACE")
        info = pycyphal.application.NodeInfo(name=NODE_NAME, software_version=uavcan.node.Version_1_0(0, 1))
        self.node = pycyphal.application.make_node(info, registry, transport=transport)
        self._tracker = NodeTracker(self.node)
        self._tracker.add_update_handler(self._on_node)
        ports = self.node.make_subscriber(uavcan.node.port.List_1_0)
        ports.receive_in_background(self._on_port_list)
        diag = self.node.make_subscriber(uavcan.diagnostic.Record_1_1)
        diag.receive_in_background(self._on_diagnostic)
        self.node.start()
        self._tasks.append(asyncio.get_running_loop().create_task(self._poll_status(), name="console-status"))

    async def close(self) -> None:
        tasks = [*self._tasks, *self._discovery.values()]
        self._tasks.clear()
        self._discovery.clear()
        await cancel_and_wait(tasks)
        if self.node is not None:
            self.node.close()
            self.node = None
            self._clients.clear()

    # ---------------------------------------------------------------- what arrives

    def _on_node(self, node_id: int, old: Any, new: Any) -> None:
        """A node appeared, restarted or fell silent (pycyphal's ``NodeTracker``). A servo that falls silent keeps
        its axes as offline: a busy host can hold heartbeats up past the offline timeout, and its axes, plots and
        rows then go on when it is heard again; a lower uptime than its last (a restart) discovers it anew."""
        self.version += 1
        if new is None and old is not None and node_id in self.servos:
            self.offline[node_id] = (old.heartbeat, old.info)
            return
        last = self.offline.pop(node_id, None)
        if new is not None and old is None and last is not None and new.heartbeat.uptime >= last[0].uptime:
            return  # Back, the same run of the node: what was read of it holds.
        restarted = new is not None and (old is None or (new.info is None and old.info is not None))
        if new is None or restarted:
            self.servos.pop(node_id, None)
            self.not_servos.discard(node_id)
            task = self._discovery.pop(node_id, None)
            if task is not None:
                task.cancel()
        if new is not None and restarted and not self.anonymous and node_id not in self._discovery:
            self._discovery[node_id] = asyncio.get_running_loop().create_task(self._discover(node_id))

    async def _on_port_list(self, msg: Any, meta: Any) -> None:
        if meta.source_node_id is None:
            return
        view = {"publishers": _subjects(msg.publishers), "subscribers": _subjects(msg.subscribers),
                "servers": [i for i, b in enumerate(msg.servers.mask) if b]}
        if self._ports.get(meta.source_node_id) != view:
            self._ports[meta.source_node_id] = view
            self.version += 1

    async def _on_diagnostic(self, msg: Any, meta: Any) -> None:
        text = bytes(msg.text.tobytes()).decode(errors="replace")
        self.diagnostics.append({"node_id": meta.source_node_id, "t": time.time(), "severity": int(msg.severity.value),
                                 "text": text, "seq": self.version})
        self.version += 1
        self._diagnostic_seen.set()

    async def diagnostic_after(self, node_id: int, since: float, contains: str, timeout_s: float) -> str | None:
        """The text of the first diagnostic from ``node_id`` received after ``since`` (system time) that contains
        ``contains``, waiting up to ``timeout_s``; None if none came."""
        deadline = time.monotonic() + timeout_s
        while True:
            for d in reversed(self.diagnostics):
                if d["t"] < since:
                    break
                if d["node_id"] == node_id and contains in d["text"]:
                    return str(d["text"])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._diagnostic_seen.clear()
            try:
                await asyncio.wait_for(self._diagnostic_seen.wait(), left)
            except TimeoutError:
                pass

    # ---------------------------------------------------------------- register access

    def client(self, node_id: int) -> Any:
        """The ``uavcan.register.Access`` client of ``node_id`` (one per node, made at first use)."""
        import uavcan.register

        from cyphal_common.transport import continue_after_restart

        if self.anonymous:
            raise ConsoleError("the console is anonymous (no UAVCAN__NODE__ID): registers need a node-ID")
        if node_id not in self._clients:
            client = self.node.presentation.make_client_with_fixed_service_id(uavcan.register.Access_1_0, node_id)
            continue_after_restart(client)
            self._clients[node_id] = client
        return self._clients[node_id]

    async def access(self, node_id: int, name: str, value: Any = None) -> Entry:
        """Read (or write ``value``) ``name`` of ``node_id``; raises :class:`ConsoleError` if unanswered."""
        entry = await access_register(self.client(node_id), name, value)
        if entry is None:
            raise ConsoleError(f"node {node_id} did not answer an access of {name} within {sum(READ_TIMEOUTS_S):g} s")
        return entry

    async def read(self, node_id: int, name: str) -> str | list[float] | None:
        """A register's value (a string, numbers; None: no such register); raises :class:`ConsoleError` if
        unanswered."""
        return (await self.read_at(node_id, name)).value

    async def read_at(self, node_id: int, name: str) -> Answer:
        """A register's value and when it was read (the middle of the answered round trip, system clock)."""
        answer = await read_register(self.client(node_id), name)
        if answer is None:
            raise ConsoleError(f"node {node_id} did not answer a read of {name} within {sum(READ_TIMEOUTS_S):g} s")
        return answer

    async def register_names(self, node_id: int) -> list[str]:
        """Every register name of ``node_id`` (``uavcan.register.List``, :data:`LIST_AHEAD` indices asked at once
        until one answers with no name)."""
        import uavcan.register

        from cyphal_common.transport import continue_after_restart

        client = self.node.presentation.make_client_with_fixed_service_id(uavcan.register.List_1_0, node_id)
        continue_after_restart(client)  # A second listing within 2 s is not taken for a repeat of the first.

        async def name_at(index: int) -> str:
            for timeout in READ_TIMEOUTS_S:
                client.response_timeout = timeout
                res = await client.call(uavcan.register.List_1_0.Request(index=index))
                if res is not None:
                    return bytes(res[0].name.name.tobytes()).decode(errors="replace")
            raise ConsoleError(f"node {node_id} did not answer a register list request")

        names: list[str] = []
        try:
            while True:
                batch = await gather_all(name_at(len(names) + k) for k in range(LIST_AHEAD))
                for name in batch:
                    if not name:
                        return names
                    names.append(name)
        finally:
            client.close()

    # ---------------------------------------------------------------- servos

    async def _discover(self, node_id: int) -> None:
        """Whether ``node_id`` is a servo, and if so its axes with their ports and limits."""
        try:
            axes_text = await self.read(node_id, "servo.axes")
            if not isinstance(axes_text, str):
                self.not_servos.add(node_id)
                return
            axes = [AxisInfo(node_id, n.axis) for n in parse_axes(axes_text)]
            await gather_all(self._read_axis(a) for a in axes)
            self.servos[node_id] = axes
        except (ConsoleError, ValueError) as ex:
            _logger.warning("node %d: %s", node_id, ex)
        finally:
            self._discovery.pop(node_id, None)
            self.version += 1

    async def _read_axis(self, axis: AxisInfo) -> None:
        n, r, p = axis.node_id, axis.names.register, axis.names.port

        async def port(kind: str, name: str) -> int:
            v = await self.read(n, f"uavcan.{kind}.{p(name)}.id")
            return int(v[0]) if isinstance(v, list) and v else UNSET_PORT

        axis.setpoint, axis.readiness, axis.dynamics = await gather_all(
            [port("sub", "setpoint_servo"), port("sub", "readiness"), port("pub", "dynamics")])
        vel, acc, jerk, deadman, force, kind = await gather_all(self.read(n, r(x)) for x in (
            "servo.profile.velocity", "servo.profile.acceleration", "servo.profile.jerk", "servo.deadman_timeout",
            "servo.torque_limit", "servo.drive.kind"))
        if isinstance(vel, list) and isinstance(acc, list) and len(vel) == len(acc) == 2:
            axis.velocity, axis.acceleration = (vel[0], vel[1]), (acc[0], acc[1])
        axis.jerk = jerk[0] if isinstance(jerk, list) and jerk else axis.jerk
        axis.deadman_s = deadman[0] if isinstance(deadman, list) and deadman else axis.deadman_s
        axis.force = force[0] if isinstance(force, list) and force else axis.force
        axis.unit = "m" if kind == "linear" else "rad"

    def axis(self, key: str) -> AxisInfo:
        """The servo axis the page calls ``key``; raises :class:`ConsoleError` if unknown."""
        for axes in self.servos.values():
            for a in axes:
                if a.key == key:
                    return a
        raise ConsoleError(f"no servo axis {key!r} on the bus")

    def axes(self) -> list[AxisInfo]:
        return [a for _, axes in sorted(self.servos.items()) for a in axes]

    async def _poll_status(self) -> None:
        while True:
            await asyncio.sleep(STATUS_PERIOD_S)
            # An offline servo's reads would only time out, and hold up every other axis's next status.
            await asyncio.gather(*(self._status(a) for a in self.axes() if a.node_id not in self.offline),
                                 return_exceptions=True)

    async def _status(self, axis: AxisInfo) -> None:
        text = await self.read(axis.node_id, axis.names.register("sys.status"))
        try:
            status = json.loads(text) if isinstance(text, str) else {}
        except ValueError:
            status = {"unreadable": text}
        axis.status_at = time.time()
        if status != axis.status:
            axis.status = status
            self.version += 1

    # ---------------------------------------------------------------- the page's view

    def _node_view(self, node_id: int, hb: Any, info: Any) -> dict[str, Any]:
        return {
            "node_id": node_id, "health": int(hb.health.value), "mode": int(hb.mode.value),
            "uptime": int(hb.uptime), "vssc": int(hb.vendor_specific_status_code),
            "name": bytes(info.name.tobytes()).decode(errors="replace") if info else None,
            "version": f"{info.software_version.major}.{info.software_version.minor}" if info else None,
            "vcs": f"{int(info.software_vcs_revision_id):016x}" if info else None,
            "ports": self._ports.get(node_id),
            "servo": node_id in self.servos if node_id in self.servos or node_id in self.not_servos else None,
            "axes": [a.view() for a in self.servos.get(node_id, [])],
            "offline": False,
        }

    def snapshot(self) -> dict[str, Any]:
        """Every node seen, its health, mode, uptime, vendor status, name, version, ports, and its servo axes."""
        nodes = []
        for node_id, entry in sorted((self._tracker.registry if self._tracker else {}).items()):
            hb, info = entry.heartbeat, entry.info
            nodes.append(self._node_view(node_id, hb, info))
        for node_id, (hb, info) in self.offline.items():
            nodes.append({**self._node_view(node_id, hb, info), "offline": True})
        nodes.sort(key=lambda n: int(n["node_id"]))
        return {"self": None if self.anonymous else int(self.node.id), "nodes": nodes,
                "diagnostics": list(self.diagnostics)[-50:]}
