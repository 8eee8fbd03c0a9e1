"""The servos a coordinator moves: node-ID, setpoint and dynamics subjects, from the command line or a TOML file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path


class CoordError(RuntimeError):
    """A move cannot be made: an axis is silent, a register is missing, the input is inconsistent."""


@dataclass(frozen=True)
class Axis:
    """One servo: its node-ID, the subject-ID of its ``setpoint_servo`` and of its ``dynamics``."""

    node_id: int
    setpoint: int
    dynamics: int
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or f"node {self.node_id}"


def parse_axis(text: str) -> Axis:
    """``NODE_ID:SETPOINT_SUBJECT:DYNAMICS_SUBJECT`` → :class:`Axis`."""
    parts = text.split(":")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"axis {text!r} is not NODE_ID:SETPOINT_SUBJECT:DYNAMICS_SUBJECT")
    n, s, d = (int(p) for p in parts)
    return Axis(n, s, d)


def load_axes(path: str | Path) -> list[Axis]:
    """Axes from a TOML file: ``[[axis]]`` tables with ``name``, ``node_id``, ``setpoint``, ``dynamics``."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    try:
        return [Axis(int(a["node_id"]), int(a["setpoint"]), int(a["dynamics"]), str(a.get("name", "")))
                for a in doc["axis"]]
    except (KeyError, TypeError, ValueError) as ex:
        raise ValueError(f"{path}: every [[axis]] needs node_id, setpoint and dynamics ({ex})") from ex
