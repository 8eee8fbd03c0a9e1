"""The communication objects a drive has, set as far as it has them: nothing optional is assumed to exist.

* 0x1006 communication cycle period := the servo's drive period; absent (most drives without cyclic modes): said,
  the drive follows the SYNC anyway.
* 0x60C2 interpolation time period := the same period in IP (value × 10^index s; a drive without it takes 0x1006).
* Each side watching the other: the drive's heartbeat 0x1017 (the servo hears it) and its watch of ours
  0x1016:01 (3 periods). A drive without 0x1016 cannot consume our heartbeat: where it has 0x100C/0x100D it is
  node-guarded instead (CiA 301: heartbeat off, 0x1017 := 0; the servo sends a guard request every period, the
  drive answers each with its NMT state, and takes 3 periods without one as a lost master — life guarding); with
  neither, the drive cannot watch us, which ``sys.drive`` (``watch``) and a diagnostic say.
* 0x6007 abort connection option := 3 (quick stop when it loses us); absent: its reaction is its own, said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from . import _dictionary as od
from ._bringup import Settings, optional, write

GUARD_FACTOR = 3
"""Life time factor 0x100D: the drive takes this many guard times without a request as a lost master."""


@dataclass
class Comm:
    """What the bring-up set on the drive's communication objects (the read-back checks exactly these)."""

    watch: str = "heartbeat"
    """How the drive watches us: ``heartbeat`` (0x1016), ``guarding`` (0x100C/0x100D), ``none``."""
    heartbeat: bool = True
    """The drive produces its heartbeat at our period (0x1017 set)."""
    hears: bool = True
    """The servo hears the drive's NMT state (its heartbeat, or its answers to guarding)."""
    period: int = 0
    """0x1006 as set [µs] (0: not set)."""
    ip_period: tuple[int, int] | None = None
    """0x60C2:01/02 as set."""
    abort_option: bool = False
    """0x6007 = 3 set."""
    mode_readable: bool = True
    """0x6060 reads back (a drive may make it write-only: 0x6061 then says the mode)."""
    notes: list[str] = field(default_factory=list)
    """What the drive lacks, to say once (warnings)."""


def ip_period(period_s: float) -> tuple[int, int]:
    """0x60C2 (value, index) for a period [s]: the largest power of ten that keeps the value an integer ≤ 255."""
    for index in (-3, -4, -5, -2, -1):
        value = period_s / 10.0**index
        if 1 <= round(value) <= 255 and math.isclose(round(value), value, rel_tol=1e-6):
            return round(value), index
    return max(1, min(255, round(period_s * 1e3))), -3


def configure(node: Any, s: Settings, mode: int) -> Comm:
    """Set what the drive has (see the module docstring).

    :raises BringUpError: the drive stops answering (what it lacks or refuses is skipped and said)."""
    c = Comm()
    hb_ms = max(1, round(s.heartbeat_s * 1e3))
    period_us = round(s.period_s * 1e6)
    done, why = optional("communication cycle period 0x1006", write, node, od.CYCLE_PERIOD, period_us)
    if done:
        c.period = period_us
    elif why != "absent":
        c.notes.append(f"its communication cycle period 0x1006 is not set ({why})")
    if mode == od.MODE_IP:
        value, index = ip_period(s.period_s)
        done_v, why = optional("interpolation time period 0x60C2:01", write, node, od.IP_PERIOD, value, 1)
        done_i, _ = optional("interpolation time period 0x60C2:02", write, node, od.IP_PERIOD, index, 2)
        if done_v and done_i:
            c.ip_period = (value, index)
        elif not c.period:
            c.notes.append(f"neither 0x60C2 nor 0x1006 set ({why}): its interpolation period is its own")
        optional("interpolation sub-mode 0x60C0", write, node, od.IP_SUB_MODE, 0)  # Linear, where selectable.
    done, why = optional("producer heartbeat time 0x1017", write, node, od.PRODUCER_HEARTBEAT, hb_ms)
    c.heartbeat = done
    consumer = (s.master_id << 16) | 3 * hb_ms
    watched, why_not = optional("consumer heartbeat time 0x1016:1", write, node, od.CONSUMER_HEARTBEAT, consumer, 1)
    if not watched:
        _guarding(node, hb_ms, c, why_not)
    if not c.heartbeat and c.watch != "guarding":
        c.hears = False
        c.notes.append(f"its heartbeat 0x1017 is not set ({why}): only its PDOs say it is alive")
    done, why = optional("abort connection option 0x6007", write, node, od.ABORT_CONNECTION_OPTION, 3)
    c.abort_option = done
    if not done:
        c.notes.append(f"its reaction to a lost master 0x6007 is its own ({why})")
    return c


def _guarding(node: Any, hb_ms: int, c: Comm, why_not: str) -> None:
    """No heartbeat consumer: node guarding if the drive has it (its heartbeat off first), else no watch at all."""
    heartbeat = c.heartbeat
    if heartbeat:
        off, _ = optional("producer heartbeat time 0x1017", write, node, od.PRODUCER_HEARTBEAT, 0)
        if not off:
            c.watch = "none"
            c.notes.append(f"it cannot watch this master: no heartbeat consumer 0x1016:01 ({why_not}), and its "
                           "heartbeat cannot be turned off for node guarding")
            return
    guard, why = optional("guard time 0x100C", write, node, od.GUARD_TIME, hb_ms)
    life, why_life = optional("life time factor 0x100D", write, node, od.LIFE_TIME_FACTOR, GUARD_FACTOR)
    if guard and life:
        c.watch, c.heartbeat = "guarding", False
        c.notes.append(f"no heartbeat consumer 0x1016:01 ({why_not}): node guarding every {hb_ms} ms, life time "
                       f"factor {GUARD_FACTOR}")
        return
    if heartbeat:
        optional("producer heartbeat time 0x1017", write, node, od.PRODUCER_HEARTBEAT, hb_ms)  # Back on.
    c.watch = "none"
    c.notes.append(f"it cannot watch this master: no heartbeat consumer 0x1016:01 ({why_not}) and no node guarding "
                   f"(0x100C {'set' if guard else why}, 0x100D {'set' if life else why_life}): a dead servo leaves "
                   "the drive to its own supervision")
