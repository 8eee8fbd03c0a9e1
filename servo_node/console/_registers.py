"""The registers of the nodes as the page tables them: every register of a node with its type, flags and value; a
write that the node validates (a refused one comes back with the node's own reason); export and import of one or
many nodes' registers as a file; store and restart through ``uavcan.node.ExecuteCommand``. Async, no aiohttp.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from cyphal_common.tasks import gather_all

from ._bus import Bus, ConsoleError
from ._values import EncodingError, Wanted, describe, elements, encode, export_document, kind_of

REASON_WAIT_S = 1.5
"""How long a refused write waits for the node's diagnostic that says why [second]."""
PARALLEL_READS = 8
"""Register reads in flight at once per table (a node answers them one by one anyway)."""


async def table(bus: Bus, node_id: int, contains: str = "") -> dict[str, dict[str, Any]]:
    """Every register of ``node_id`` whose name contains ``contains``: name → type, kind, value, mutable,
    persistent (a node lists its names quickly; each value is a request of its own)."""
    names = [n for n in await bus.register_names(node_id) if contains in n]
    limit = asyncio.Semaphore(PARALLEL_READS)

    async def one(name: str) -> tuple[str, dict[str, Any]]:
        async with limit:
            entry = await bus.access(node_id, name)
        return name, describe(entry.value, entry.mutable, entry.persistent)

    return dict(await gather_all(one(n) for n in names))


async def single(bus: Bus, node_id: int, name: str) -> dict[str, dict[str, Any]]:
    """One register of ``node_id`` as :func:`table` shows it (``kind`` None: the node has no such register)."""
    entry = await bus.access(node_id, name)
    return {name: describe(entry.value, entry.mutable, entry.persistent)}


async def write(bus: Bus, node_id: int, name: str, given: Any) -> dict[str, Any]:
    """Write ``given`` (a text, or JSON data) to ``name`` of ``node_id`` as the register's own kind.

    Returns ``{"ok", "register", "reason"}``: ``ok`` when the node holds the value written; else ``reason`` is the
    node's own (its diagnostic that names the register), or what the console saw (the value it kept, read-only, no
    such register, a value that cannot be encoded at all)."""
    current = await bus.access(node_id, name)
    kind = kind_of(current.value)
    if kind is None:
        return {"ok": False, "register": None, "reason": f"node {node_id} has no register {name}"}
    if not current.mutable:
        return {"ok": False, "register": describe(current.value, False, current.persistent),
                "reason": f"{name} is read-only"}
    try:
        value = encode(kind, given)
    except EncodingError as ex:
        return {"ok": False, "register": describe(current.value, True, current.persistent), "reason": str(ex)}
    asked = time.time()
    answer = await bus.access(node_id, name, value)
    shown = describe(answer.value, answer.mutable, answer.persistent)
    if kind_of(answer.value) == kind and elements(answer.value) == elements(value):
        return {"ok": True, "register": shown, "reason": None}
    reason = await bus.diagnostic_after(node_id, asked - 0.5, name, REASON_WAIT_S)
    return {"ok": False, "register": shown,
            "reason": reason or f"node {node_id} kept {name} = {elements(answer.value)} (it gave no reason)"}


async def export(bus: Bus, node_ids: Iterable[int]) -> dict[str, Any]:
    """The register file of these nodes (:func:`servo_node.console._values.export_document`)."""
    ids = sorted(set(node_ids))
    tables = await gather_all(table(bus, n) for n in ids)
    names = {n["node_id"]: n["name"] or "" for n in bus.snapshot()["nodes"]}
    return export_document({n: {"name": names.get(n, ""), "registers": t} for n, t in zip(ids, tables, strict=True)},
                           time.strftime("%Y-%m-%dT%H:%M:%S%z"))


async def apply(bus: Bus, wanted: list[Wanted]) -> list[dict[str, Any]]:
    """Write every register of an imported file (in the file's order, node by node); one result per register:
    ``same`` (the node holds that value already), ``written``, or ``refused`` with the reason."""
    out: list[dict[str, Any]] = []
    for w in wanted:
        item: dict[str, Any] = {"node_id": w.node_id, "name": w.name}
        try:
            current = await bus.access(w.node_id, w.name)
            if kind_of(current.value) == w.kind and elements(current.value) == w.value:
                item["result"] = "same"
            else:
                res = await write(bus, w.node_id, w.name, w.value)
                item["result"] = "written" if res["ok"] else "refused"
                item["reason"] = res["reason"]
        except ConsoleError as ex:
            item["result"], item["reason"] = "refused", str(ex)
        out.append(item)
    return out
