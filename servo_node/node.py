"""The node shell: one pycyphal node at a time over one registry, hosting one or more :class:`~servo_node.axis.Axis`.

The shell owns the lifecycle (start, RESTART, close), ``uavcan.node.ExecuteCommand`` (RESTART, FACTORY_RESET,
STORE_PERSISTENT_STATES), diagnostics and the heartbeat's health; everything about motion is the axes'.

- ``close()`` is a safe stop: every axis brings its joint to rest and gives its drive STANDBY, then the tasks are
  cancelled and awaited, the node closes, and the registry closes last.
- RESTART answers first, then makes the same safe stop, then re-creates the node (new port-IDs take effect).
  When the node-ID is unchanged, the new node continues the old one's transfer-IDs, so receivers do not drop
  our messages for their transfer-ID timeout.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from types import TracebackType
from typing import Any

import pycyphal
import pycyphal.application
import uavcan.node
from pycyphal.application import register
from pycyphal.application.heartbeat_publisher import Health, Mode

from cyphal_common.collector import freeze_start_up_objects
from cyphal_common.errors import ConfigurationError, ServoError
from cyphal_common.node_mode import go_operational
from cyphal_common.register_access import serve_register_access
from cyphal_common.registers import natural8, string
from cyphal_common.tasks import cancel_and_wait

from .axis import SUPERVISE_PERIOD_S, Axis, AxisCounters
from .collision import CollisionMonitor
from .control import ControlLoop, ControlThread
from .diagnostics import DEFAULT_SEVERITY, SEVERITY_REGISTER, Diagnostics, Severity, sole_path
from .registers import AxisNames, ServoRegistry, parse_axes

NODE_NAME = "io.github.cyphal_servo.servo_node"
"""Reverse-domain node name reported by uavcan.node.GetInfo."""
DESCRIPTION_MAX = 255
"""A ``string`` register holds at most 255 bytes (``uavcan.primitive.String.1.0``): a long list of axes is cut."""
ANONYMOUS = 0xFFFF
"""``uavcan.node.id`` unset: the node asks a plug-and-play allocator for its ID."""
ALLOCATION_POLL_S = 0.1


def vcs_revision() -> int:
    """GetInfo's software VCS revision: the first 64 bits of the checkout's git commit (0 where the package does not
    run from a git checkout, e.g. an installed wheel). The hardware version is ``servo.hardware_version``'s."""
    import subprocess

    here = Path(__file__).resolve().parent
    if not (here.parent / ".git").exists():
        return 0
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return int(out.stdout.strip()[:16], 16) if out.returncode == 0 else 0
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def _description(axes: Sequence[AxisNames]) -> str:
    """The default ``uavcan.node.description``: what this node is, as a bus tool lists it."""
    if len(axes) == 1 and not axes[0].axis:
        return "cyphal-servo: a servo drive controller (one axis)"
    text = f"cyphal-servo: a servo drive controller ({len(axes)} axes: {', '.join(a.axis for a in axes)})"
    if len(text.encode()) <= DESCRIPTION_MAX:
        return text
    return text.encode()[:DESCRIPTION_MAX - 4].decode(errors="ignore").rsplit(", ", 1)[0] + ", …)"

SUPERVISION_SLACK_S = SUPERVISE_PERIOD_S / 2
"""An axis due this much after a wake-up of the supervision task is served in it (the axes share the wake-ups:
started at different instants, each on its own 10 ms schedule, 8 axes woke the task 700 times a second)."""
SUPERVISION_IDLE_S = 1.0
"""The longest the supervision task sleeps when no axis is due sooner (no axis runs a loop) [second]."""
RESPONSE_GRACE_S = 0.05
"""Time for the response to a RESTART to leave before the node goes away [second]."""

COMMAND_REARM = 0x7E00
"""Vendor ``uavcan.node.ExecuteCommand``: reset the drive fault of the axis named by the parameter (empty: every
axis) and bring its drive up again (CiA 402: the whole bring-up); the axis then waits for a setpoint. The only way
out of a drive fault (error 11). SUCCESS only once the drive is ready under our control (CiA 402: SWITCHED ON in the
mode set, NMT OPERATIONAL by its heartbeat); FAILURE if it is not within :data:`REARM_ANSWER_S`; BAD_STATE if no
axis has a drive to re-arm."""
REARM_ANSWER_S = 10.0
"""The longest a re-arm's answer waits for the drives [second] (a bring-up is some tens of SDO exchanges)."""
COMMAND_HOME = 0x7E01
"""Vendor ``uavcan.node.ExecuteCommand``: home the drive of the named axis (empty: every axis) — CiA 402 homing
mode 6 with ``servo.drive.canopen.homing_method``/``home_offset`` — only while the axis does not move; never at
start-up by itself. BAD_STATE if no drive could home now."""

_Request = uavcan.node.ExecuteCommand_1.Request
_Response = uavcan.node.ExecuteCommand_1.Response

_logger = logging.getLogger(__name__)


class ServoNode:
    """A servo controller node: ``await run()`` (or ``async with``); :meth:`request_close` or :meth:`close` ends it.

    :param registry_file: register file; created if missing; None keeps registers in memory.
    :param environment: register overrides (``UAVCAN__*``, ``SERVO__*``, ``SIM__*``); default ``os.environ``.
    :param loop_clock: ``"real"`` runs each control loop against the monotonic clock in its own thread;
        ``"simulated"`` leaves the loops to be stepped through :meth:`Axis.advance` (deterministic tests).
    """

    def __init__(
        self,
        registry_file: str | Path | None,
        environment: Mapping[str, str] | None = None,
        loop_clock: str = "real",
    ) -> None:
        self.diagnostics = Diagnostics()
        in_file = registry_file is not None and str(registry_file).strip() not in ("", ":memory:")
        created = in_file and not Path(str(registry_file)).exists()
        self.registry = ServoRegistry(registry_file, environment, on_refused=self._on_refused_write)
        self._report_register_file(registry_file if in_file else None, created)
        self.loop_clock = loop_clock
        self.restarts = 0
        """How many times the node was re-created (RESTART, FACTORY_RESET)."""
        self.ready = asyncio.Event()
        """Set while a node is up and operational (cleared while restarting and after close)."""
        self._counters: dict[str, AxisCounters] = {}
        self._started_at_s = time.monotonic()
        self._node: pycyphal.application.Node | None = None
        self._axes: list[Axis] = []
        self._control_thread: ControlThread | None = None
        self._supervision: asyncio.Task[None] | None = None
        self._lifecycle = asyncio.Lock()
        self._command_due = asyncio.Event()
        self._pending_command: int | None = None
        self._commands: asyncio.Task[None] | None = None
        self._close_requested = asyncio.Event()
        self._failure: Exception | None = None
        self._started = False
        self._closed = False
        self._transfer_ids: tuple[int | None, dict[Any, Any]] | None = None
        self._collision: CollisionMonitor | None = None

    # ---------------------------------------------------------------- public API

    @property
    def node(self) -> pycyphal.application.Node:
        """The current pycyphal node (changes on RESTART)."""
        if self._node is None:
            raise ServoError("the servo node is not running")
        return self._node

    @property
    def axes(self) -> list[Axis]:
        """The axes of the current node (re-created on RESTART)."""
        return list(self._axes)

    def axis(self, name: str = "") -> Axis:
        """The axis named ``name`` (``""``: the single axis)."""
        for a in self._axes:
            if a.names.axis == name:
                return a
        raise KeyError(f"no axis {name!r}")

    @property
    def control_thread(self) -> ControlThread | None:
        """The one real-time thread that ticks every axis's loop (None before start, or on the simulated clock)."""
        t = self._control_thread
        return t if t is not None and t.loops else None

    @property
    def loop(self) -> ControlLoop:
        """The first axis's control loop (re-created on RESTART)."""
        if not self._axes:
            raise ServoError("the servo node is not running")
        return self._axes[0].loop

    async def start(self) -> None:
        """Build the node and its axes, go OPERATIONAL and start serving RESTART; idempotent."""
        async with self._lifecycle:
            if not self._started and not self._closed:
                self._started = True
                await self._build()
                self._commands = asyncio.create_task(self._serve_commands(), name="node-commands")

    async def run(self) -> None:
        """Start if needed, serve until :meth:`request_close` (or :meth:`close`), then close with a safe stop.

        Cancelling the task closes at once (no safe stop): that is the forced way out.
        :raises Exception: what made a RESTART fail to bring the node back (after closing).
        """
        try:
            await self.start()
            await self._close_requested.wait()
        except asyncio.CancelledError:
            await self.close(safe=False)
            raise
        finally:
            await self.close()
        if self._failure is not None:
            raise self._failure

    def request_close(self) -> None:
        """Ask :meth:`run` to close with a safe stop and return (callable from a signal handler); idempotent."""
        self._close_requested.set()

    async def close(self, safe: bool = True) -> None:
        """Safe stop (unless ``safe`` is False), close the axes and the node, then the registry; idempotent."""
        self.request_close()
        async with self._lifecycle:  # Waits for a RESTART in progress to finish.
            if self._closed:
                return
            self._closed = True
            commands, self._commands = self._commands, None
            if commands is not None:
                await cancel_and_wait([commands])
            if safe:
                await self._safe_stop("the node is closing")
            await self._teardown()
            self.registry.shutdown()
            _logger.info("Servo node closed")

    async def __aenter__(self) -> ServoNode:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ---------------------------------------------------------------- lifecycle internals

    async def _build(self) -> None:
        reg = self.registry
        reg.declare()
        axis_names = parse_axes(reg.text("servo.axes"))
        reg.setdefault(SEVERITY_REGISTER, natural8(int(DEFAULT_SEVERITY)))
        reg.setdefault("uavcan.node.description", string(_description(axis_names)))
        node_id = int(reg.setdefault("uavcan.node.id", register.Value(natural16=register.Natural16([ANONYMOUS]))))
        if not 0 <= node_id < ANONYMOUS:
            await self._allocate_node_id()
        handlers = list(logging.root.handlers)
        node = pycyphal.application.make_node(
            pycyphal.application.NodeInfo(
                name=NODE_NAME,
                software_vcs_revision_id=vcs_revision(),
                software_version=uavcan.node.Version_1_0(*map(int, version("cyphal-servo").split(".")[:2])),
                hardware_version=uavcan.node.Version_1_0(*map(int, reg.reals("servo.hardware_version"))),
            ),
            reg,
            transport=_make_transport(reg),
        )
        sole_path(handlers)  # Diagnostics publishes each report once: pycyphal's log handler would repeat it.
        self._node = node
        serve_register_access(node, reg)  # Writes to unknown or read-only registers are counted too.
        self._continue_transfer_ids(node)
        node.heartbeat_publisher.mode = Mode.INITIALIZATION
        self._collision = CollisionMonitor(reg, node, self._on_collision)
        self._collision.start()  # Tags our heartbeats: register before the health hook reads them.
        node.heartbeat_publisher.add_pre_heartbeat_handler(self._update_health)
        self._control_thread = ControlThread()  # One real-time thread ticks every axis of this node.
        self.diagnostics.attach(node)
        node.get_server(uavcan.node.ExecuteCommand_1).serve_in_background(self._on_execute_command)
        self._axes = [
            Axis(
                node,
                reg,
                names,
                self.diagnostics,
                self._counters.setdefault(names.axis, AxisCounters()),
                self.loop_clock,
                restarts=lambda: self.restarts,
                started_at_s=self._started_at_s,
                control_thread=self._control_thread,
            )
            for names in axis_names
        ]
        node.start()
        await asyncio.sleep(0.01)  # Let the first (INITIALIZATION) heartbeat out before the kernels load.
        with self._control_thread.batch():  # Every axis's loop starts ticking at once: one thread replacement.
            for a in self._axes:
                await a.start()
        self._supervision = asyncio.create_task(self._supervise_axes(list(self._axes)), name="supervise-axes")
        # Everything alive now (modules, kernels, the node) out of the cyclic collector's reach: a full collection
        # then scans only what came since, not 170,000 objects (105 ms holding the GIL: setpoints unread meanwhile).
        freeze_start_up_objects()  # Before OPERATIONAL: its one full collection holds nothing up that is due.
        await go_operational(node)
        self.ready.set()
        _logger.info("Node %s up with %d axis(es): %s", node.id, len(self._axes), node)

    @staticmethod
    async def _supervise_axes(axes: list[Axis]) -> None:
        """Child task: the periodic supervision and publications of every axis, in one pass per wake-up (one task
        for the node, not one per axis: a wake-up of the event loop costs more than an axis's pass)."""
        try:
            while True:
                now = time.monotonic()
                due = now + SUPERVISION_IDLE_S
                for a in axes:
                    if a.supervised:
                        due = min(due, await a.supervise_due(now, SUPERVISION_SLACK_S))
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        except (asyncio.CancelledError, pycyphal.transport.ResourceClosedError):
            pass

    async def _allocate_node_id(self) -> None:
        """No ``uavcan.node.id``: ask the bus's plug-and-play allocator for one (anonymously, by this node's unique-ID,
        until one is granted) and keep it in the register (persisted: the same ID after a restart)."""
        from pycyphal.application.plug_and_play import Allocatee

        reg = self.registry
        unique_id = bytes(reg.setdefault("uavcan.node.unique_id", register.Value(
            unstructured=register.Unstructured(random.getrandbits(128).to_bytes(16, "little")))))
        transport = _make_transport(reg)
        allocatee = Allocatee(transport, unique_id)
        _logger.warning("No uavcan.node.id: asking the bus's plug-and-play allocator for one (unique-ID %s)",
                        unique_id.hex())
        try:
            while (node_id := allocatee.get_result()) is None:
                await asyncio.sleep(ALLOCATION_POLL_S)
        finally:
            allocatee.close()
            transport.close()
        reg["uavcan.node.id"] = register.Value(natural16=register.Natural16([node_id]))
        self.diagnostics.report(f"node-ID {node_id} allocated by the bus's plug-and-play allocator", Severity.NOTICE)

    def _continue_transfer_ids(self, node: pycyphal.application.Node) -> None:
        """Same node-ID as before a RESTART: carry the output transfer-ID counters over (before any publisher)."""
        if self._transfer_ids is not None and node.id is not None and self._transfer_ids[0] == node.id:
            node.presentation.output_transfer_id_map.update(self._transfer_ids[1])

    async def _serve_commands(self) -> None:
        """Child task: RESTART and FACTORY_RESET, after their response has left."""
        try:
            while True:
                await self._command_due.wait()
                self._command_due.clear()
                command, self._pending_command = self._pending_command, None
                if command is not None and not self._close_requested.is_set():
                    await self._restart(factory_reset=command == _Request.COMMAND_FACTORY_RESET)
        except asyncio.CancelledError:
            pass
        except Exception as ex:  # The node could not come back (e.g. a port register now unusable): end run().
            _logger.exception("RESTART failed; closing")
            self._failure = ex
            self.request_close()

    async def _restart(self, factory_reset: bool) -> None:
        async with self._lifecycle:
            if self._closed:
                return
            await asyncio.sleep(RESPONSE_GRACE_S)
            await self._safe_stop("restarting")
            await self._teardown()
            if factory_reset:
                self.registry.factory_reset()
            self.restarts += 1
            _logger.info("Restarting the node%s", " after a factory reset" if factory_reset else "")
            await self._build()

    async def _safe_stop(self, reason: str) -> None:
        await asyncio.gather(*(a.safe_stop(reason) for a in self._axes))

    async def _teardown(self) -> None:
        """Axes (tasks cancelled and awaited), diagnostics, then the node; the registry stays open."""
        self.ready.clear()
        supervision, self._supervision = self._supervision, None
        if supervision is not None:
            await cancel_and_wait([supervision])
        axes, self._axes = self._axes, []
        for a in axes:
            await a.close()
        if self._control_thread is not None:
            self._control_thread.close()
            self._control_thread = None
        await self.diagnostics.detach()
        if self._collision is not None:
            self._collision.close()
            self._collision = None
        node, self._node = self._node, None
        if node is not None:
            self._transfer_ids = (node.id, dict(node.presentation.output_transfer_id_map))
            node.close()  # Keeps the registry open (ServoRegistry.close is a no-op).
            for _ in range(3):  # Let the ports' cancelled background tasks finish before the registry may close.
                await asyncio.sleep(0)

    # ---------------------------------------------------------------- services and health

    async def _on_execute_command(
        self, request: uavcan.node.ExecuteCommand_1.Request, _meta: pycyphal.presentation.ServiceRequestMetadata
    ) -> uavcan.node.ExecuteCommand_1.Response:
        cmd = request.command
        if cmd in (_Request.COMMAND_RESTART, _Request.COMMAND_FACTORY_RESET):
            self._pending_command = int(cmd)  # Acted on by the commands task after this response has left.
            self._command_due.set()
        elif cmd == _Request.COMMAND_STORE_PERSISTENT_STATES:
            pass  # Every register write is committed to the register file at once.
        elif cmd == COMMAND_REARM:
            name = request.parameter.tobytes().decode(errors="replace").strip()
            return await self._rearm([a for a in self._axes if not name or a.names.axis == name])
        elif cmd == COMMAND_HOME:
            name = request.parameter.tobytes().decode(errors="replace").strip()
            if not any([a.home() for a in self._axes if not name or a.names.axis == name]):
                return _Response(status=_Response.STATUS_BAD_STATE)
        else:
            return _Response(status=_Response.STATUS_BAD_COMMAND)
        return _Response(status=_Response.STATUS_SUCCESS)

    async def _rearm(self, axes: list[Axis]) -> uavcan.node.ExecuteCommand_1.Response:
        """SUCCESS once every named axis's drive is ready again under our control; FAILURE if one is not within
        :data:`REARM_ANSWER_S` (its reason in ``sys.status`` and the diagnostics); BAD_STATE if none has a drive to
        re-arm."""
        futures = [f for f in (a.rearm() for a in axes) if f is not None]
        if not futures:
            return _Response(status=_Response.STATUS_BAD_STATE)
        try:
            ready = await asyncio.wait_for(asyncio.gather(*map(asyncio.wrap_future, futures)), REARM_ANSWER_S)
        except TimeoutError:
            return _Response(status=_Response.STATUS_FAILURE, output=b"not ready in time")
        if not all(ready):
            return _Response(status=_Response.STATUS_FAILURE, output=b"not ready: see sys.status")
        return _Response(status=_Response.STATUS_SUCCESS)

    def _update_health(self) -> None:
        """Right before each heartbeat: the worst health of the axes; WARNING (Cyphal's most severe health) while
        another node uses our node-ID."""
        if self._node is not None:
            health = max((a.health() for a in self._axes), default=Health.NOMINAL)
            if self._collision is not None and self._collision.update():
                health = Health.WARNING
            self._node.heartbeat_publisher.health = health

    def _on_collision(self, collided: bool) -> None:
        """Another node sends heartbeats with our node-ID (or stopped doing so): no axis actuates meanwhile."""
        node_id = self._node.id if self._node is not None else None
        if collided:
            self.diagnostics.report(f"node-ID collision: another node sends heartbeats as node {node_id}; stopped")
        else:
            self.diagnostics.report(f"node-ID collision over: no foreign heartbeat as node {node_id} for a while")
        for a in self._axes:
            a.set_collision(collided)

    def _report_register_file(self, path: str | Path | None, created: bool) -> None:
        """Say which register file the node opened (on the bus once it is up, and in the log): the one place that
        tells two nodes started over one file apart from a node that was given another. A new file is a warning
        in the log: the node starts with defaults and the environment, none of a user's stored values."""
        if path is None:
            self.diagnostics.report("registers in memory only (no register file)", Severity.NOTICE)
            return
        where = str(Path(path).resolve())
        if created:
            _logger.warning("Register file %s did not exist: created it (defaults and the environment)", where)
        self.diagnostics.report(f"register file {where} ({'created' if created else 'opened'})", Severity.NOTICE)

    def _on_refused_write(self, name: str, reason: str) -> None:
        self.diagnostics.report(f"register write refused: {name} {reason}")


def _make_transport(reg: register.Registry) -> pycyphal.transport.Transport:
    from cyphal_common.transport import make_transport

    transport = make_transport(reg)
    if transport is None:
        raise ConfigurationError(
            "no transport configured: set uavcan.udp.iface, uavcan.can.iface or uavcan.serial.iface"
        )
    return transport
