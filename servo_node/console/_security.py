"""Who may use the console: the checks every request passes before a route sees it.

- **Host**: a request must name this server (its bound address or a loopback name with its port) in ``Host``: a
  web page on another site that makes its own name resolve to 127.0.0.1 (DNS rebinding) names its own host, and is
  refused.
- **Token**: a secret made at each start (printed with the URL, as ``#token=…``: a fragment, never sent in a request
  line or logged) must come with every API request (header :data:`TOKEN_HEADER`) and as the first message of a
  WebSocket: another local user or program cannot act without reading this process's output.
- **Origin**: every state-changing request (every method but GET and HEAD) and every WebSocket handshake must come
  from this server's own page (``Origin``): a page of another site cannot make a browser that holds the token's
  page act for it.
- GET and HEAD change nothing, by construction of the route table (:mod:`._app`); motion comes only over the
  WebSocket, after its token.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

TOKEN_HEADER = "X-Console-Token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
PROTECTED_PREFIXES = ("/api/", "/ws")
"""Paths that need the token; the page and its static files do not (they hold no secret and change nothing)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    """A fresh secret of 192 bits, URL-safe."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` reaches this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Guard:
    """The checks of one server: its token and the names under which it may be addressed."""

    def __init__(self, token: str, host: str, port: int, extra_hosts: Iterable[str] = ()) -> None:
        self.token = token
        self._names = {host, *extra_hosts}
        if is_loopback(host):
            self._names |= {"127.0.0.1", "localhost", "::1"}
        self.hosts: frozenset[str] = frozenset()
        """Every ``Host`` header accepted (name:port)."""
        self.origins: frozenset[str] = frozenset()
        """Every ``Origin`` accepted: this server's own pages."""
        self.bind(port)

    def bind(self, port: int) -> None:
        """The port the server listens on (known only once it listens, when started on port 0)."""
        self.port = port
        self.hosts = frozenset(_authority(h, port) for h in self._names)
        self.origins = frozenset(f"http://{a}" for a in self.hosts)

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def host_ok(self, request: web.Request) -> bool:
        return request.headers.get("Host", "") in self.hosts

    def origin_ok(self, request: web.Request) -> bool:
        return request.headers.get("Origin", "") in self.origins

    def refusal(self, request: web.Request) -> str | None:
        """Why ``request`` is refused before its route (None: it may pass). The WebSocket's token is its first
        message, checked by the socket's handler."""
        if not self.host_ok(request):
            return f"Host {request.headers.get('Host', '')!r} is not this console"
        websocket = request.path == "/ws"
        if (websocket or request.method not in SAFE_METHODS) and not self.origin_ok(request):
            return f"Origin {request.headers.get('Origin', '(none)')!r} is not this console's page"
        if not websocket and request.path.startswith(PROTECTED_PREFIXES) \
                and not self.token_ok(request.headers.get(TOKEN_HEADER)):
            return "no valid console token"
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse with 403 and the reason (421 for a wrong host), else pass to the route."""
        why = self.refusal(request)
        if why is not None:
            status = 421 if not self.host_ok(request) else 403
            return web.json_response({"error": why}, status=status)
        return await handler(request)
