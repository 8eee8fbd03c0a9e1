"""The web layer: routes and a lifecycle, nothing else (the work is :mod:`._bus`, :mod:`._streams`,
:mod:`._registers`, :mod:`._motion`).

Routes (every ``/api`` and ``/ws`` one behind :mod:`._security`'s checks; GET changes nothing)::

    GET  /                              the page (static/index.html) and /static/… its script, style, uPlot
    GET  /ws                            the WebSocket: the bus view, plot frames, holds, arming (token first)
    GET  /api/nodes/{id}/registers      the node's register table (?contains=…: those names; ?name=…: that one)
    GET  /api/registers?nodes=1,2       the register file of these nodes (export)
    GET  /api/recordings/{name}         a recorded CSV
    POST /api/nodes/{id}/registers      {"name", "value"}: a write, answered with the node's verdict
    POST /api/nodes/{id}/command        {"command": "store" | "restart" | "rearm", "axis"}
    POST /api/registers                 a register file (import), answered per register
    POST /api/record                    {"action": "start", "axes": [...]} or {"action": "stop"}
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from cyphal_common.tasks import cancel_and_wait
from servo_node.scope._trace import write_csv

from . import _registers
from ._bus import Bus, ConsoleError
from ._motion import COMMAND_REARM, LEASE_S, RENEW_S, Motion, execute
from ._security import Guard
from ._streams import Cursor, Streams
from ._values import EncodingError, import_document

STATIC = Path(__file__).parent / "static"
FRAME_S = 1.0 / 40.0
"""How often a plotting page is sent a frame (40 Hz: ≥ 30 frames per second on the page) [second]."""
BUS_VIEW_S = 1.0
"""How often the bus view is sent at the latest (at once after a change, at most every :data:`FRAME_S`) [second]."""
HELLO_S = 5.0
"""A WebSocket that has not given the token this long after it opened is closed [second]."""
PAGE_SILENT_S = 1.0
"""A page whose WebSocket has been silent this long (it pings every 0.25 s) is taken as frozen: what it holds or
armed ends [second]."""
COMMANDS = {"store": 65530, "restart": 65535, "rearm": COMMAND_REARM}
"""``uavcan.node.ExecuteCommand`` codes of the page's buttons (STORE_PERSISTENT_STATES, RESTART, the servo's
re-arm)."""

_logger = logging.getLogger(__name__)
_ids = itertools.count(1)


class Console:
    """The server's state: the bus, the streams, the motion, the checks, the pages connected."""

    def __init__(self, bus: Bus, guard: Guard, allow_motion: bool, record_dir: Path) -> None:
        self.bus = bus
        self.guard = guard
        self.streams = Streams(bus)
        self.pages: dict[str, Page] = {}
        self.motion = Motion(bus, allow_motion, self._to_page)
        self.record_dir = record_dir

    def _to_page(self, owner: str, msg: dict[str, Any]) -> None:
        page = self.pages.get(owner)
        if page is not None:
            page.outbox.put_nowait(msg)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard.middleware], client_max_size=8 * 1024 * 1024)
        app.router.add_get("/", self.index)
        app.router.add_static("/static", STATIC, append_version=False)
        app.router.add_get("/ws", self.websocket)
        app.router.add_get("/api/nodes/{node_id}/registers", self.registers)
        app.router.add_post("/api/nodes/{node_id}/registers", self.write)
        app.router.add_post("/api/nodes/{node_id}/command", self.command)
        app.router.add_get("/api/registers", self.export)
        app.router.add_post("/api/registers", self.import_)
        app.router.add_post("/api/record", self.record)
        app.router.add_get("/api/recordings/{name}", self.recording)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _startup(self, _app: web.Application) -> None:
        await self.bus.start()
        self.streams.start()

    async def _cleanup(self, _app: web.Application) -> None:
        for page in list(self.pages.values()):
            await page.ws.close()
        await self.motion.close()
        await self.streams.close()
        await self.bus.close()

    # ---------------------------------------------------------------- pages

    async def index(self, _request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=None, max_msg_size=1 << 20)
        await ws.prepare(request)
        try:
            first = await ws.receive(timeout=HELLO_S)
        except TimeoutError:
            await ws.close(code=4401, message=b"no token")
            return ws
        hello = _json(first.data) if first.type == WSMsgType.TEXT else {}
        if hello.get("type") != "hello" or not self.guard.token_ok(hello.get("token")):
            await ws.close(code=4401, message=b"no valid console token")
            return ws
        page = Page(self, ws, f"page-{next(_ids)}")
        self.pages[page.id] = page
        try:
            await page.run()
        finally:
            self.pages.pop(page.id, None)
            self.motion.drop_owner(page.id, "the page closed")
            page.plot([], 10.0, 1000)
        return ws

    # ---------------------------------------------------------------- registers and commands

    async def registers(self, request: web.Request) -> web.StreamResponse:
        node_id, name = _node_id(request), request.query.get("name")
        return await _answer(_registers.table(self.bus, node_id, request.query.get("contains", "")) if name is None
                             else _registers.single(self.bus, node_id, name))

    async def write(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        return await _answer(_registers.write(self.bus, _node_id(request), str(body["name"]), body["value"]))

    async def command(self, request: web.Request) -> web.StreamResponse:
        node_id, body = _node_id(request), await request.json()
        name = str(body.get("command", ""))
        if name not in COMMANDS:
            return web.json_response({"error": f"unknown command {name!r}"}, status=400)
        if name == "rearm":
            try:
                self.motion.check()
            except ConsoleError as ex:
                return web.json_response({"error": str(ex)}, status=403)
        parameter = str(body.get("axis", "")) if name == "rearm" else ""
        return await _answer(_status(execute(self.bus, node_id, COMMANDS[name], parameter)))

    async def export(self, request: web.Request) -> web.StreamResponse:
        try:
            ids = [int(x) for x in request.query.get("nodes", "").split(",") if x.strip()]
        except ValueError:
            return web.json_response({"error": "nodes: a comma-separated list of node-IDs"}, status=400)
        if not ids:
            return web.json_response({"error": "no node to export"}, status=400)
        return await _answer(_registers.export(self.bus, ids))

    async def import_(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        remap = {int(k): int(v) for k, v in (body.get("remap") or {}).items()}
        try:
            wanted = import_document(body.get("document"), remap)
        except EncodingError as ex:
            return web.json_response({"error": str(ex)}, status=400)
        return await _answer(_registers.apply(self.bus, wanted))

    async def record(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        try:
            if body.get("action") == "start":
                rec = self.streams.start_recording([str(k) for k in body.get("axes", [])])
                return web.json_response({"recording": list(rec.labels.values())})
            rec = self.streams.stop_recording()
        except ConsoleError as ex:
            return web.json_response({"error": str(ex)}, status=409)
        name = time.strftime("console-%Y%m%d-%H%M%S.csv", time.localtime(rec.started_at))
        self.record_dir.mkdir(parents=True, exist_ok=True)
        rows = write_csv(rec.trace, self.record_dir / name)
        return web.json_response({"file": str(self.record_dir / name), "name": name, "rows": rows,
                                  "samples": rec.trace.samples(), "url": f"/api/recordings/{name}"})

    async def recording(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = self.record_dir / name
        if "/" in name or not name.endswith(".csv") or not path.is_file():
            return web.json_response({"error": "no such recording"}, status=404)
        return web.FileResponse(path, headers={"Content-Disposition": f'attachment; filename="{name}"'})


class Page:
    """One connected page: what it plots, its outbox, its liveness."""

    def __init__(self, console: Console, ws: web.WebSocketResponse, page_id: str) -> None:
        self.console = console
        self.ws = ws
        self.id = page_id
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.cursors: dict[str, Cursor] = {}
        self.bucket_s = 0.01
        self.heard = time.monotonic()

    def plot(self, keys: list[str], window_s: float, width: int) -> None:
        """Plot these axes from now on (nothing: stop)."""
        streams = self.console.streams
        new = [k for k in keys if k not in self.cursors]
        streams.want(new)  # Raises for an unknown axis before anything changes.
        streams.unwant([k for k in self.cursors if k not in keys])
        self.cursors = {k: self.cursors.get(k) or Cursor(next=streams.rings[k].count) for k in keys}
        self.bucket_s = max(1e-4, float(window_s) / max(100, int(width)))

    async def run(self) -> None:
        c = self.console
        self.outbox.put_nowait({"type": "hello", "allow_motion": c.motion.allowed, "self": c.bus.snapshot()["self"],
                                "lease_s": LEASE_S, "renew_s": RENEW_S, "page": self.id})
        writer = asyncio.get_running_loop().create_task(self._write())
        try:
            async for msg in self.ws:
                if msg.type != WSMsgType.TEXT:
                    break
                self.heard = time.monotonic()
                self._handle(_json(msg.data))
        finally:
            await cancel_and_wait([writer])

    def _handle(self, msg: dict[str, Any]) -> None:
        c, kind = self.console, msg.get("type")
        try:
            if kind == "plot":
                self.plot([str(k) for k in msg.get("axes", [])], float(msg.get("window_s", 10)),
                          int(msg.get("width", 1000)))
            elif kind == "hold":
                c.motion.hold(self.id, str(msg.get("kind")), [str(k) for k in msg.get("axes", [])],
                              dict(msg.get("params") or {}))
            elif kind == "release":
                c.motion.release(self.id, [str(k) for k in msg.get("axes", [])])
            elif kind == "arm":
                c.motion.arm(self.id, str(msg.get("axis")), bool(msg.get("engaged")))
        except (ConsoleError, ValueError, TypeError) as ex:
            if kind == "hold":
                c.motion.release(self.id, [str(k) for k in msg.get("axes", [])])
            self.outbox.put_nowait({"type": "error", "about": kind, "axes": msg.get("axes"), "why": str(ex)})

    async def _write(self) -> None:
        """The socket's one writer: queued messages, frames at :data:`FRAME_S`, the bus view when it changed; a
        page silent for :data:`PAGE_SILENT_S` loses what it holds."""
        c = self.console
        shown, shown_at, next_frame = -1, 0.0, time.monotonic()
        while not self.ws.closed:
            try:
                msg = await asyncio.wait_for(self.outbox.get(), max(0.0, next_frame - time.monotonic()))
                await self.ws.send_json(msg)
                continue
            except TimeoutError:
                pass
            now = time.monotonic()
            next_frame = max(next_frame + FRAME_S, now)
            if now - self.heard > PAGE_SILENT_S:
                c.motion.drop_owner(self.id, "the page fell silent")
            if self.cursors:
                await self.ws.send_json(c.streams.frame(self.cursors, self.bucket_s))
            if c.bus.version != shown or now - shown_at > BUS_VIEW_S:
                shown, shown_at = c.bus.version, now
                held = {k: lease.owner == self.id for k, lease in c.motion.leases.items()}
                await self.ws.send_json({"type": "bus", **c.bus.snapshot(), "armed": c.motion.armed(), "held": held,
                                         "recording": c.streams.recording is not None,
                                         "received": c.streams.received})


def _json(data: Any) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _node_id(request: web.Request) -> int:
    try:
        node_id = int(request.match_info["node_id"])
    except ValueError:
        raise web.HTTPBadRequest(text="not a node-ID") from None
    return node_id


async def _status(work: Any) -> dict[str, Any]:
    return {"status": await work}


async def _answer(work: Any) -> web.StreamResponse:
    """The JSON of ``work``'s result, or its refusal (409 with the reason)."""
    try:
        return web.json_response(await work)
    except ConsoleError as ex:
        return web.json_response({"error": str(ex)}, status=409)
