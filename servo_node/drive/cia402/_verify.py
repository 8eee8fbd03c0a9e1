"""Verify, don't assume: the drive judged by what it says against what we commanded.

Every cycle (:func:`cycle_verdict`, on the cycle thread, O(1)): the state its statusword shows (it must stay
OPERATION ENABLED while we enable it) and its modes of operation display 0x6061 (mapped in TPDO1: it must show the
mode we set). Every heartbeat (:func:`heartbeat_verdict`, on the receive thread): its NMT state must be OPERATIONAL;
a boot-up means it was reset (its PDO mapping is the power-on one). What no TPDO carries is read back by SDO
(:class:`ReadBack`, on the drive's worker): one object at a time, the whole round every :data:`READBACK_PERIOD_S` —
the communication objects our commands and its supervision depend on, as far as the bring-up set them (each RPDO's
COB-ID, transmission type and mapping, each TPDO's COB-ID, its heartbeat 0x1017, its watch of ours 0x1016:1 or its
guarding 0x100C/0x100D, its reaction 0x6007, the cycle period 0x1006, the interpolation period 0x60C2, the mode
0x6060 where it reads back, and 0x6061 when no TPDO carries it). A stranger's SDO write that
disables an RPDO (0x1400:01 bit 31) leaves no trace in any TPDO: the read-back is what finds it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _dictionary as od
from ._bringup import PDO_NOT_VALID
from ._comm import GUARD_FACTOR

if TYPE_CHECKING:
    from ._context import DriveContext

READBACK_PERIOD_S = 0.25
"""One round of the read-back [second] (12 SDO reads in CSV and CST, 17 in CSP: about 50-70 per second)."""

COB_ID_MASK = 0x1FFFFFFF
"""The COB-ID bits of a PDO communication parameter's sub-index 1 (bit 30, RTR, is not judged)."""


def cycle_verdict(c: DriveContext) -> str | None:
    """What is wrong with the drive by its last TPDO, against what we command (None: nothing); the cycle thread."""
    if not c.up or c.walking or c.stopping:
        return None
    mode = c.mode_display
    if mode is not None and c.layout is not None and od.MODES_OF_OPERATION_DISPLAY in c.layout.tpdo \
            and mode != c.mode_cmd:
        return f"{c.name} left {od.mode_name(c.mode_cmd)}: 0x6061 = {mode}"
    state = c.state()
    if c.cw & ~od.CW_IP_ENABLE == od.CW_ENABLE:
        if state == "OPERATION ENABLED":
            c.enabled_by_us = True
        elif c.enabled_by_us and state not in ("FAULT", "FAULT REACTION ACTIVE", "QUICK STOP ACTIVE"):
            return f"{c.name} left OPERATION ENABLED: {state} (statusword 0x{c.statusword:04X})"
    else:
        c.enabled_by_us = False
    return None


def heartbeat_verdict(c: DriveContext, state: int) -> str | None:
    """What a heartbeat's NMT state says is wrong once the drive is up (None: OPERATIONAL); the receive thread."""
    if not c.up or state == od.NMT_OPERATIONAL:
        return None
    if state == od.NMT_BOOT_UP:
        return f"{c.name} rebooted (boot-up): its communication parameters are its power-on ones"
    return f"{c.name} is {od.nmt_name(state)} (heartbeat)"


@dataclass(frozen=True)
class Check:
    """One object to read back and the value it must hold."""

    index: int
    sub: int
    expected: int
    what: str
    mask: int = 0xFFFFFFFF
    hexadecimal: bool = True
    commands: bool = False
    """Our commands depend on it (an RPDO, the mode): a mismatch asks the stop by every channel; else (its
    heartbeat, its watch of ours, its reaction, a TPDO) the loop's own stop through our PDOs, which still work."""

    @property
    def where(self) -> str:
        return f"0x{self.index:04X}:{self.sub:02X}" if self.index < 0x2000 and self.index not in (
            od.PRODUCER_HEARTBEAT, od.CYCLE_PERIOD) else f"0x{self.index:04X}"

    def verdict(self, value: int, name: str) -> str | None:
        """The mismatch in words (None: as expected)."""
        if value & self.mask == self.expected and not (self.mask == COB_ID_MASK and value & PDO_NOT_VALID):
            return None
        shown = f"0x{value:08X}" if self.hexadecimal else str(value)
        want = f"0x{self.expected:X}" if self.hexadecimal else str(self.expected)
        off = " (disabled)" if self.mask == COB_ID_MASK and value & PDO_NOT_VALID else ""
        return f"{name}: {self.what} {self.where} = {shown}{off}, we set {want}"


def plan(c: DriveContext) -> list[Check]:
    """The objects a round reads back, from what the bring-up configured (our mapping or the drive's own)."""
    s, node, lay = c.s, c.node, c.layout
    assert lay is not None
    checks: list[Check] = []
    for n in lay.rpdos:
        m = node.rpdo[n]
        com, mapping = od.RPDO_COMM + n - 1, od.RPDO_MAP + n - 1
        checks += [Check(com, 1, m.cob_id & COB_ID_MASK, f"RPDO{n} COB-ID", COB_ID_MASK, commands=True),
                   Check(com, 2, int(m.trans_type), f"RPDO{n} transmission type", 0xFF, False, True),
                   Check(mapping, 0, len(m.map), f"RPDO{n} mapped objects", 0xFF, False, True)]
        checks += [Check(mapping, k, (v.index << 16) | (v.subindex << 8) | v.length, f"RPDO{n} mapping",
                         commands=True) for k, v in enumerate(m.map, 1)]
    for n in sorted(set(lay.tpdo.values())):
        checks.append(Check(od.TPDO_COMM + n - 1, 1, node.tpdo[n].cob_id & COB_ID_MASK, f"TPDO{n} COB-ID",
                            COB_ID_MASK))
    hb_ms = max(1, round(s.heartbeat_s * 1e3))
    comm = c.comm
    if comm.heartbeat:
        checks.append(Check(od.PRODUCER_HEARTBEAT, 0, hb_ms, "its heartbeat time", 0xFFFF, False))
    if comm.watch == "heartbeat":
        checks.append(Check(od.CONSUMER_HEARTBEAT, 1, (s.master_id << 16) | 3 * hb_ms, "its watch of our heartbeat"))
    elif comm.watch == "guarding":
        checks += [Check(od.PRODUCER_HEARTBEAT, 0, 0, "its heartbeat time (off: guarded)", 0xFFFF, False),
                   Check(od.GUARD_TIME, 0, hb_ms, "its guard time", 0xFFFF, False),
                   Check(od.LIFE_TIME_FACTOR, 0, GUARD_FACTOR, "its life time factor", 0xFF, False)]
    if comm.abort_option:
        checks.append(Check(od.ABORT_CONNECTION_OPTION, 0, 3, "its reaction to a lost master", 0xFFFF, False))
    if comm.period:
        checks.append(Check(od.CYCLE_PERIOD, 0, comm.period, "its cycle period [µs]", 0xFFFFFFFF, False))
    if comm.ip_period is not None:
        checks += [Check(od.IP_PERIOD, 1, comm.ip_period[0], "its interpolation period", 0xFF, False, True),
                   Check(od.IP_PERIOD, 2, comm.ip_period[1] & 0xFF, "its interpolation period index", 0xFF, False,
                         True)]
    if comm.mode_readable:
        checks.append(Check(od.MODES_OF_OPERATION, 0, c.mode_cmd & 0xFF, "its mode", 0xFF, False, True))
    if od.MODES_OF_OPERATION_DISPLAY not in lay.tpdo:
        checks.append(Check(od.MODES_OF_OPERATION_DISPLAY, 0, c.mode_cmd & 0xFF, "its mode display", 0xFF, False,
                            True))
    return checks


class ReadBack:
    """The round of reads (the worker): :meth:`step` reads the next object and judges it."""

    def __init__(self) -> None:
        self.checks: list[Check] = []
        self._next = 0
        self.rounds = 0
        self.failed = 0
        self.next_at = 0.0

    def reset(self, checks: list[Check]) -> None:
        self.checks, self._next = checks, 0
        self.next_at = time.monotonic()

    @property
    def interval_s(self) -> float:
        return READBACK_PERIOD_S / max(1, len(self.checks))

    def step(self, c: DriveContext) -> tuple[str, Check] | None:
        """Read the next object; its mismatch in words and the check (None: as expected, or unreadable now)."""
        self.next_at = max(self.next_at + self.interval_s, time.monotonic() - READBACK_PERIOD_S)
        if not self.checks:
            return None
        check = self.checks[self._next]
        self._next += 1
        if self._next == len(self.checks):
            self._next, self.rounds = 0, self.rounds + 1
        value = read(c.node, check.index, check.sub)
        if value is None:
            self.failed += 1
            return None
        verdict = check.verdict(value, c.name)
        return None if verdict is None else (verdict, check)

    def find(self, index: int) -> Check | None:
        return next((ch for ch in self.checks if ch.index == index), None)


def read(node: Any, index: int, sub: int = 0) -> int | None:
    """An object by SDO as an integer (None: no answer, a refusal, or an answer to another client)."""
    import canopen

    try:
        obj = node.sdo[index]
        return int((obj if isinstance(obj, canopen.sdo.base.SdoVariable) else obj[sub]).raw)
    except (canopen.SdoCommunicationError, canopen.SdoAbortedError, KeyError, ValueError):
        return None


def write(node: Any, index: int, value: int, attempts: int = 3) -> str | None:
    """An object by SDO (asked again when another client's transfer answered); None, or why it was not taken."""
    import canopen

    why = "not asked"
    for _ in range(attempts):
        try:
            node.sdo[index].raw = value
            return None
        except KeyError:
            return f"0x{index:04X} is not in the master's dictionary"
        except canopen.SdoAbortedError as ex:
            return f"refused ({ex})"
        except canopen.SdoCommunicationError as ex:
            why = f"no answer ({ex})"
    return why
