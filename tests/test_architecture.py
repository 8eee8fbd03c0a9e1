"""The import structure stays as ``docs/architecture.md`` draws it, read from the sources' import statements.

Rooms: each top-level module or subpackage of ``servo_node`` is one room, each other package (``sim_plant``,
``sim_plant_node``, ``cyphal_common``) one room. Rules: no import circle between modules; no room imports one
of a higher layer (numerics ← control ← axis ← node ← cli); ``sim_plant`` and the OTG import nothing of pycyphal,
asyncio or canopen; no module much over 450 lines; the rooms stand on at most 8 floors (the longest chain of
imports between rooms). Every import counts, also one made only for type checking or inside a function.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("servo_node", "sim_plant", "sim_plant_node", "cyphal_common")
LAYERS = (
    ("servo_node.otg", "servo_node.setpoint", "servo_node.errors", "servo_node._seqlock", "sim_plant"),
    ("servo_node.control",),
    ("servo_node.axis",),
    ("servo_node.node",),
    ("servo_node.cli",),
)
"""From the bottom up: a room of a layer imports no room of a layer above it."""
NUMERICS = ("sim_plant", "servo_node.otg")
FORBIDDEN_IN_NUMERICS = ("asyncio", "pycyphal", "canopen", "can", "uavcan", "reg", "zubax")
MAX_LINES = 480
"""About 450 (past that a module usually holds two ideas), with a few percent of slack: a module of one idea may
run a little longer rather than be cut in the middle of it."""
MAX_FLOORS = 8


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _imports() -> dict[str, set[str]]:
    """Every module of the packages → the modules of the packages it imports (``from X import name`` counts as
    ``X.name`` where that is a module, else as ``X``)."""
    paths = {_module(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                stem = base[: len(base) - node.level + 1] if node.level else []
                target = ".".join([*stem, *([node.module] if node.module else [])])
                names = [f"{target}.{a.name}" if f"{target}.{a.name}" in paths else target for a in node.names]
            else:
                continue
            out |= {n for n in names if n in paths and n != mod}
        graph[mod] = out
    return graph


def _external(mod: str) -> set[str]:
    """Top-level names of everything ``mod``'s source imports, inside the packages or not."""
    path = ROOT / (mod.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / mod.replace(".", "/") / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def _room(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:2]) if parts[0] == "servo_node" and len(parts) > 1 else parts[0]


def _rooms() -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for mod, deps in _imports().items():
        rooms.setdefault(_room(mod), set()).update(_room(d) for d in deps if _room(d) != _room(mod))
    return rooms


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of ``graph`` (empty if none), by depth-first search."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return [*stack[stack.index(d):], d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[n] = 2
        return []

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return []


def test_no_import_circle_between_modules() -> None:
    assert _cycle(_imports()) == []


def test_no_room_imports_a_higher_layer() -> None:
    layer = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
    upward = [f"{m} → {d}" for m, deps in _imports().items() for d in deps
              if _room(m) in layer and _room(d) in layer and layer[_room(d)] > layer[_room(m)]]
    assert upward == []


def test_numerics_import_no_bus_no_asyncio() -> None:
    offenders = {m: sorted(_external(m) & set(FORBIDDEN_IN_NUMERICS)) for m in _imports() if _room(m) in NUMERICS}
    assert {m: f for m, f in offenders.items() if f} == {}


def test_no_module_past_about_450_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_rooms_stand_on_at_most_eight_floors() -> None:
    rooms = _rooms()
    assert _cycle(rooms) == []
    floors: dict[str, int] = {}

    def floor(r: str) -> int:
        if r not in floors:
            floors[r] = 1 + max((floor(d) for d in rooms.get(r, ())), default=0)
        return floors[r]

    top = max(rooms, key=floor)
    chain = [top]
    while rooms.get(chain[-1]):
        chain.append(max(rooms[chain[-1]], key=floor))
    print(f"{floor(top)} floors: {' → '.join(chain)}")
    assert floor(top) <= MAX_FLOORS, chain
