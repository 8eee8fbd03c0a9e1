"""The console's server as a client other than its page sees it (real ``servo-node console`` and ``servo-node run``
processes, requests over its real socket): nothing passes without the token, from another origin or under another
host name; motion is refused without ``--allow-motion``; a page that holds a jog and then falls silent loses its
hold, and the servo's own deadman stops the axis at rest; binding beyond loopback warns.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from tests.console.rig import Console, start_console, start_servos
from tests.procs import Processes, RegisterClient, base_env, wait_for


def _request(console: Console, path: str, method: str = "GET", body: Any = None, token: bool = True,
             origin: str | None = "self", host: str | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(console.base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("X-Console-Token", console.token)
    if origin is not None:
        req.add_header("Origin", console.base if origin == "self" else origin)
    if host is not None:
        req.add_header("Host", host)
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, json.loads(res.read() or b"{}") if "json" in res.headers.get("Content-Type", "") else {}
    except urllib.error.HTTPError as ex:
        text = ex.read()
        return ex.code, json.loads(text) if text.startswith(b"{") else {"text": text.decode(errors="replace")}


async def _socket(console: Console, origin: str | None = None) -> tuple[aiohttp.ClientSession, Any]:
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(console.base.replace("http", "ws") + "/ws", origin=origin or console.base)
    return session, ws


async def _next(ws: Any, kind: str, timeout: float = 30.0) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            msg = json.loads((await ws.receive()).data)
            if msg.get("type") == kind:
                return dict(msg)


def test_nothing_passes_without_token_origin_or_host(tmp_path: Path) -> None:
    with Processes() as group:
        console = start_console(group, tmp_path)
        write = {"name": "servo.profile.jerk", "value": "1"}
        assert _request(console, "/", token=False, origin=None)[0] == 200  # The page itself holds no secret.
        status, body = _request(console, "/api/registers?nodes=21", token=False)
        assert status == 403 and "token" in body["error"]
        status, body = _request(console, "/api/nodes/21/registers", "POST", write, origin=None)
        assert status == 403 and "Origin" in body["error"]
        status, body = _request(console, "/api/nodes/21/registers", "POST", write, origin="http://example.com")
        assert status == 403 and "Origin" in body["error"]
        port = console.base.rsplit(":", 1)[1]
        status, body = _request(console, "/api/registers?nodes=21", host=f"rebound.example:{port}")
        assert status == 421 and "Host" in body["error"]
        assert _request(console, "/api/record")[0] == 405  # Starting a recording is a POST; a GET does nothing.

        async def sockets() -> None:
            session = aiohttp.ClientSession()
            try:
                try:
                    await session.ws_connect(console.base.replace("http", "ws") + "/ws", origin="http://example.com")
                    raise AssertionError("a WebSocket from another origin was accepted")
                except aiohttp.WSServerHandshakeError as ex:
                    assert ex.status == 403
            finally:
                await session.close()
            session, ws = await _socket(console)
            try:
                await ws.send_json({"type": "hello", "token": "guessed"})
                msg = await ws.receive()
                assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED) and ws.close_code == 4401
            finally:
                await session.close()

        asyncio.run(sockets())


def test_motion_is_refused_without_allow_motion(tmp_path: Path) -> None:
    with Processes() as group:
        start_servos(group, tmp_path)
        console = start_console(group, tmp_path)
        reader = RegisterClient(base_env(), 21, client_node_id=96)
        try:
            async def hold() -> dict[str, Any]:
                session, ws = await _socket(console)
                try:
                    await ws.send_json({"type": "hello", "token": console.token})
                    await _next(ws, "hello")
                    wait = _next(ws, "error")
                    await ws.send_json({"type": "hold", "kind": "jog", "axes": ["21"], "params": {"velocity": 1}})
                    return await wait
                finally:
                    await session.close()

            error = asyncio.run(hold())
            assert "--allow-motion" in error["why"]
            status, body = _request(console, "/api/nodes/21/command", "POST", {"command": "rearm"})
            assert status == 403 and "--allow-motion" in body["error"]
            assert reader.json("sys.counters")["accepted"] == 0
        finally:
            reader.close()


def test_a_silent_page_loses_its_hold_and_the_deadman_stops_the_axis(tmp_path: Path) -> None:
    """The page holds a jog, then sends nothing more with its socket open (a frozen page): the console stops
    publishing, and the node's own deadman brings the axis to rest (its sys.status says expired)."""
    with Processes() as group:
        start_servos(group, tmp_path)
        console = start_console(group, tmp_path, "--allow-motion")
        reader = RegisterClient(base_env(), 21, client_node_id=96)
        try:
            async def scenario() -> dict[str, Any]:
                session, ws = await _socket(console)
                try:
                    await ws.send_json({"type": "hello", "token": console.token})
                    await _next(ws, "hello")
                    await _servos_listed(ws)
                    hold = {"type": "hold", "kind": "jog", "axes": ["21"], "params": {"velocity": 2.0}}
                    for _ in range(200):  # Held (renewed every 50 ms) until the node says it moves, at most 10 s.
                        await ws.send_json(hold)
                        await asyncio.sleep(0.05)
                        if (await asyncio.to_thread(reader.json, "sys.status"))["servo"]["state"] == "engaged":
                            break
                    ended = await _next(ws, "motion")  # No message from the page from here on.
                    await asyncio.to_thread(wait_for, lambda: _at_rest_expired(reader), 30, 0.2, "the deadman stop")
                    return ended
                finally:
                    await session.close()

            ended = asyncio.run(scenario())
            assert ended["state"] == "ended" and ended["why"] == "not renewed"
            status = reader.json("sys.status")
            assert status["servo"]["state"] == "expired"
            accepted = reader.json("sys.counters")["accepted"]
            motion = reader.json("sys.motion")
            assert accepted > 0 and motion["meas"][0] > 0.0  # It moved forward, then stopped.
            wait_for(lambda: _at_rest_expired(reader), 5, what="still at rest")
            assert reader.json("sys.counters")["accepted"] == accepted  # Nothing was published since.
        finally:
            reader.close()


async def _servos_listed(ws: Any) -> None:
    """Until the bus view lists both servos' axes (the console has read their ports and limits)."""
    while {a["key"] for n in (await _next(ws, "bus", timeout=120))["nodes"] for a in n["axes"]} != {"21", "22"}:
        pass


def _at_rest_expired(reader: RegisterClient) -> bool:
    status, motion = reader.json("sys.status"), reader.json("sys.motion")
    return bool(status["servo"]["state"] == "expired" and motion["meas"][1] == 0.0 and not motion.get("engaged"))


def test_a_servo_silent_past_the_offline_timeout_stays_listed_and_is_plotted_when_back(tmp_path: Path) -> None:
    """A servo whose heartbeats stop for longer than Cyphal's offline timeout (3 s; here its process is stopped, as a
    busy host can hold it up) stays on the page as offline with its axis; once heard again it is online with the
    same axis, without being discovered anew, and a page plots it at once."""
    with Processes() as group:
        servos = start_servos(group, tmp_path)
        console = start_console(group, tmp_path)

        async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            session, ws = await _socket(console)
            try:
                await ws.send_json({"type": "hello", "token": console.token})
                await _next(ws, "hello")
                await _servos_listed(ws)
                servos[22].send_signal(signal.SIGSTOP)
                try:
                    async with asyncio.timeout(60):  # The offline timeout is 3 s.
                        while not (silent := _node(await _next(ws, "bus"), 22)).get("offline"):
                            pass
                finally:
                    servos[22].send_signal(signal.SIGCONT)
                async with asyncio.timeout(60):
                    while (back := _node(await _next(ws, "bus"), 22)).get("offline", True):
                        pass
                await ws.send_json({"type": "plot", "axes": ["22"], "window_s": 10, "width": 1000})
                while not (frame := await _next(ws, "frame"))["axes"].get("22"):
                    pass
                return silent, back, frame
            finally:
                await session.close()

        silent, back, frame = asyncio.run(scenario())
        assert [a["key"] for a in silent["axes"]] == ["22"] and silent["name"], silent
        assert [a["key"] for a in back["axes"]] == ["22"] and back["uptime"] >= silent["uptime"], back
        assert frame["axes"]["22"]["p"], frame
        log = (tmp_path / "console.log").read_text()
        assert "node 22" not in log, log  # No discovery warning (nor anything else) about it.


def _node(bus: dict[str, Any], node_id: int) -> dict[str, Any]:
    """The bus view's entry of ``node_id`` (empty if it is not listed)."""
    return next((n for n in bus["nodes"] if n["node_id"] == node_id), {})


def test_binding_beyond_loopback_warns(tmp_path: Path) -> None:
    with Processes() as group:
        start_console(group, tmp_path, "--host", "0.0.0.0")
        log = (tmp_path / "console.log").read_text()
    assert "WARNING: serving on 0.0.0.0" in log, log


def test_a_held_coordinated_move_arrives_and_is_recorded_as_the_scope_records(tmp_path: Path) -> None:
    """Both axes held together (the coordinator's move through the console's node) arrive at their targets; the
    page gets the coordinator's result table; the recording of both is the scope's CSV."""
    from servo_node.scope import read_csv

    with Processes() as group:
        start_servos(group, tmp_path)
        console = start_console(group, tmp_path, "--allow-motion")
        readers = {n: RegisterClient(base_env(), n, client_node_id=c) for n, c in ((21, 96), (22, 97))}
        try:
            async def scenario() -> dict[str, Any]:
                session, ws = await _socket(console)
                try:
                    await ws.send_json({"type": "hello", "token": console.token})
                    await _next(ws, "hello")
                    await _servos_listed(ws)
                    status, body = await asyncio.to_thread(_request, console, "/api/record", "POST",
                                                           {"action": "start", "axes": ["21", "22"]})
                    assert status == 200 and body["recording"] == ["node 21", "node 22"], body
                    hold = {"type": "hold", "kind": "coord", "axes": ["21", "22"],
                            "params": {"targets": [0.5, -0.25], "sync": "phase"}}

                    async def renew() -> None:
                        while True:
                            await ws.send_json(hold)
                            await asyncio.sleep(0.05)

                    renewing = asyncio.create_task(renew())
                    try:
                        return await _next(ws, "motion", timeout=60)
                    finally:
                        renewing.cancel()
                        await ws.send_json({"type": "release", "axes": ["21", "22"]})
                finally:
                    await session.close()

            arrived = asyncio.run(scenario())
            assert arrived["state"] == "arrived", arrived
            assert "21" in arrived["table"] and "22" in arrived["table"]  # the coordinator's table, per axis
            for node_id, target in ((21, 0.5), (22, -0.25)):
                wait_for(lambda r=readers[node_id]: _at_rest_expired(r), 30, what=f"node {node_id} at rest")
                assert abs(readers[node_id].json("sys.motion")["meas"][0] - target) < 1e-3
            status, body = _request(console, "/api/record", "POST", {"action": "stop"})
            assert status == 200 and body["rows"] > 0, body
        finally:
            for r in readers.values():
                r.close()
    trace = read_csv(body["file"])
    for label, target in (("node 21", 0.5), ("node 22", -0.25)):
        measured = trace.axes[label].measured
        assert len(measured) > 50 and abs(measured.columns["position"][-1] - target) < 1e-3
        assert len(trace.axes[label].reference) > 0
