"""Register values as the page shows and edits them, and the register file a page exports and imports.

A ``uavcan.register.Value.1.0`` is shown as its type (``real32[2]``, ``string``) and plain JSON (a list of numbers or
booleans, or a text). A user's edit is parsed into a value of the register's own kind, whatever the element count:
the node validates it (and refuses another count with its reason), so only what cannot be encoded at all (not a
number, an integer out of its type's range) is refused here. The generated DSDL types are imported where used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("string", "unstructured", "bit", "integer64", "integer32", "integer16", "integer8",
         "natural64", "natural32", "natural16", "natural8", "real64", "real32", "real16")
"""The value kinds of ``uavcan.register.Value.1.0`` (``empty`` aside: no such register)."""

_INT_BITS = {"integer64": 64, "integer32": 32, "integer16": 16, "integer8": 8,
             "natural64": 64, "natural32": 32, "natural16": 16, "natural8": 8}

FILE_FORMAT = "cyphal-servo console registers"
FILE_VERSION = 1


class EncodingError(ValueError):
    """A user's text cannot be encoded as the register's kind (the reason says why)."""


def kind_of(value: Any) -> str | None:
    """The kind of a ``uavcan.register.Value.1.0`` (None: empty, no such register)."""
    for kind in KINDS:
        if getattr(value, kind) is not None:
            return kind
    return None


def elements(value: Any) -> str | list[Any]:
    """The value as plain JSON data: a text (string; unstructured as hex), or a list of numbers or booleans."""
    kind = kind_of(value)
    if kind is None:
        return []
    inner = getattr(value, kind).value
    if kind == "string":
        return bytes(inner.tobytes()).decode(errors="replace")
    if kind == "unstructured":
        return bytes(inner.tobytes()).hex()
    if kind == "bit":
        return [bool(x) for x in inner]
    if kind in _INT_BITS:
        return [int(x) for x in inner]
    return [_shortest(float(x), kind) for x in inner]


def _shortest(x: float, kind: str) -> float:
    """The shortest decimal that reads back as the same ``kind`` value (0.1, not 0.10000000149 for a real32)."""
    import numpy as np

    if not math.isfinite(x) or kind == "real64":
        return x
    return float(str(np.float32(x) if kind == "real32" else np.float16(x)))


def type_name(value: Any) -> str:
    """``real32[2]``, ``natural16``, ``string``, ``bit[3]``; ``empty`` for no register."""
    kind = kind_of(value)
    if kind is None:
        return "empty"
    if kind in ("string", "unstructured"):
        return kind
    n = len(getattr(value, kind).value)
    return kind if n == 1 else f"{kind}[{n}]"


def describe(value: Any, mutable: bool, persistent: bool) -> dict[str, Any]:
    """What the page shows of one register."""
    return {"type": type_name(value), "kind": kind_of(value), "value": elements(value),
            "mutable": mutable, "persistent": persistent}


def _numbers(text: str | list[Any] | float | bool) -> list[Any]:
    if isinstance(text, list):
        return text
    if isinstance(text, bool | int | float):
        return [text]
    body = text.strip()
    if body.startswith("["):
        try:
            data = json.loads(body)
        except ValueError:
            raise EncodingError(f"{text!r} is not a list of numbers") from None
        return data if isinstance(data, list) else [data]
    return [p for p in re.split(r"[\s,;]+", body) if p]


def _bit(x: Any) -> bool:
    if isinstance(x, bool):
        return x
    s = str(x).strip().lower()
    if s in ("1", "true", "on", "yes"):
        return True
    if s in ("0", "false", "off", "no"):
        return False
    raise EncodingError(f"{x!r} is not a bit (true/false, 1/0)")


def _integer(x: Any, kind: str) -> int:
    try:
        n = int(x) if not isinstance(x, str) else int(x.strip(), 0)
    except (TypeError, ValueError):
        raise EncodingError(f"{x!r} is not an integer") from None
    if isinstance(x, float) and x != n:
        raise EncodingError(f"{x!r} is not an integer")
    bits = _INT_BITS[kind]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind.startswith("integer") else (0, (1 << bits) - 1)
    if not lo <= n <= hi:
        raise EncodingError(f"{n} is outside the range of {kind} ({lo}..{hi})")
    return n


def _real(x: Any) -> float:
    try:
        return float(x)  # "nan" and "inf" too: whether they are allowed is the node's to say.
    except (TypeError, ValueError):
        raise EncodingError(f"{x!r} is not a number") from None


def encode(kind: str, given: str | list[Any] | float | bool) -> Any:
    """A ``uavcan.register.Value.1.0`` of ``kind`` holding ``given`` (a text, or JSON data as :func:`elements`
    gives); raises :class:`EncodingError` if it cannot be encoded as that kind."""
    import uavcan.primitive
    import uavcan.primitive.array as arrays
    import uavcan.register

    if kind not in KINDS:
        raise EncodingError(f"unknown register kind {kind!r}")
    if kind == "string":
        text = given if isinstance(given, str) else json.dumps(given)
        if len(text.encode()) > 255:
            raise EncodingError("a string register holds at most 255 bytes")
        return uavcan.register.Value_1_0(string=uavcan.primitive.String_1_0(text))
    if kind == "unstructured":
        try:
            data = bytes.fromhex(str(given))
        except ValueError:
            raise EncodingError(f"{given!r} is not hexadecimal bytes") from None
        return uavcan.register.Value_1_0(unstructured=uavcan.primitive.Unstructured_1_0(data))
    items = _numbers(given)
    if not items:
        raise EncodingError("no value given")
    if kind == "bit":
        values: list[Any] = [_bit(x) for x in items]
    elif kind in _INT_BITS:
        values = [_integer(x, kind) for x in items]
    else:
        values = [_real(x) for x in items]
    cls = getattr(arrays, kind.capitalize() + "_1_0")
    try:
        return uavcan.register.Value_1_0(**{kind: cls(values)})
    except ValueError as ex:  # More elements than the type holds (e.g. 65 real32).
        raise EncodingError(f"{len(values)} values do not fit a {kind} register: {ex}") from None


@dataclass(frozen=True)
class Wanted:
    """One register value of an imported file: to be written to ``node_id``'s ``name``."""

    node_id: int
    name: str
    kind: str
    value: str | list[Any]


def export_document(nodes: Mapping[int, Mapping[str, Any]], written_at: str) -> dict[str, Any]:
    """The register file of ``nodes`` (node-ID → {"name": GetInfo name, "registers": {name: :func:`describe`}})."""
    return {"format": FILE_FORMAT, "version": FILE_VERSION, "written": written_at,
            "nodes": {str(n): {"name": d.get("name", ""), "registers": dict(d.get("registers", {}))}
                      for n, d in sorted(nodes.items())}}


def import_document(doc: Any, remap: Mapping[int, int] | None = None) -> list[Wanted]:
    """The writes a register file asks for: every mutable register of every node in it (``remap``: node-ID in the
    file → node-ID to write); raises :class:`EncodingError` for a file that is not one."""
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise EncodingError(f"not a register file of this console (its \"format\" must be {FILE_FORMAT!r})")
    if doc.get("version") != FILE_VERSION:
        raise EncodingError(f"register file version {doc.get('version')!r}: this console reads version {FILE_VERSION}")
    out: list[Wanted] = []
    nodes = doc.get("nodes")
    if not isinstance(nodes, dict):
        raise EncodingError("the register file has no \"nodes\"")
    for key, node in nodes.items():
        try:
            node_id = int(key)
        except ValueError:
            raise EncodingError(f"node {key!r} is not a node-ID") from None
        registers = node.get("registers") if isinstance(node, dict) else None
        if not isinstance(registers, dict):
            raise EncodingError(f"node {key}: no \"registers\"")
        for name, reg in registers.items():
            if not isinstance(reg, dict) or reg.get("kind") not in KINDS or "value" not in reg:
                raise EncodingError(f"node {key}: register {name!r} has no kind and value")
            if reg.get("mutable", False):
                out.append(Wanted((remap or {}).get(node_id, node_id), str(name), str(reg["kind"]), reg["value"]))
    return out
