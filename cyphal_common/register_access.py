"""The ``uavcan.register.Access`` server: pycyphal's semantics, plus a count of the writes it would drop silently.

pycyphal's own server ignores a write to an unknown or read-only register without a trace (the service definition
allows ignoring it; it does not forbid telling anyone). Ours answers exactly as pycyphal's does and refuses those
writes through :meth:`ValidatingRegistry.refuse`, so every refused write is counted and reported, whatever layer
refused it. Conversion and validation failures are counted by the registry itself.
"""

from __future__ import annotations

import pycyphal.application
import pycyphal.presentation
from pycyphal.application.register import ValueConversionError, ValueProxyWithFlags
from uavcan.register import Access_1 as Access

from .registers import ValidatingRegistry

_NAME_SHOWN = 64
"""Characters of a refused unknown name put in the report (a hostile name may be 255 bytes of anything)."""


def serve_register_access(node: pycyphal.application.Node, registry: ValidatingRegistry) -> None:
    """Serve ``uavcan.register.Access`` of ``node`` from ``registry`` once the node starts (replacing pycyphal's)."""

    async def handle(request: Access.Request, _meta: pycyphal.presentation.ServiceRequestMetadata) -> Access.Response:
        return access(registry, request)

    # pycyphal's RegisterServer starts its handler in an earlier start hook; serving again replaces it.
    node.add_lifetime_hooks(lambda: node.get_server(Access).serve_in_background(handle), None)


def access(registry: ValidatingRegistry, request: Access.Request) -> Access.Response:
    """One Access request: write if asked and permitted (refusals counted), then read back."""
    name = request.name.name.tobytes().decode("utf8", "replace")
    v = _lookup(registry, name)
    if not request.value.empty:
        if v is None:
            registry.refuse(_shown(name), "no such register")
        elif not v.mutable:
            registry.refuse(name, "read-only")
        else:
            try:
                v.assign(request.value)
                registry[name] = v
            except ValueConversionError:
                pass  # The registry counted and reported it (its proxy and its __setitem__); the old value stays.
            v = _lookup(registry, name)
    if v is None:
        return Access.Response()  # No such register: an empty value, as the service definition prescribes.
    return Access.Response(mutable=v.mutable, persistent=v.persistent, value=v.value)


def _lookup(registry: ValidatingRegistry, name: str) -> ValueProxyWithFlags | None:
    try:
        return registry[name]
    except KeyError:
        return None


def _shown(name: str) -> str:
    printable = "".join(c if c.isprintable() else "?" for c in name)
    return printable if len(printable) <= _NAME_SHOWN else printable[:_NAME_SHOWN] + "…"
