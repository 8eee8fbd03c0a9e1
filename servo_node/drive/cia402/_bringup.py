"""Bring-up of one CiA 402 drive as a careful master does it, by SDO through canopen (blocking; run in a thread):
what it decides and the SDO steps it is made of.

The steps, each in its module: identity, supported modes 0x6502 read from the drive and the streaming mode chosen
from them (:mod:`._identify`: the one ``servo.drive.mode`` asks for, else CSP, else interpolated position, else a
refusal naming the drive and 0x6502); the units (:mod:`._scaling`: the register, else 0x60A8/0x60A9, else the
factor group); the communication objects it has (:mod:`._comm`: cycle period, heartbeats or node guarding, the
reaction to a lost master, the interpolation period); the mode 0x6060; the PDOs mapped as far as the drive lets
(:mod:`._mapping`). Nothing optional is assumed to exist: an absent object is skipped and said; a refusal of what
the servo cannot do without is a :class:`BringUpError` naming the step, the object and the drive's reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _dictionary as od

PDO_NOT_VALID = 1 << 31
"""COB-ID bit 31: the PDO does not exist (disabled)."""


class BringUpError(RuntimeError):
    """The drive cannot be brought up as configured; the message says which step and why."""


class NoAnswerError(BringUpError):
    """Nothing answers at the drive's node-ID (absent, not yet booted, wrong node-ID or bit rate)."""


class MappingRefusedError(BringUpError):
    """The drive refused to have a PDO remapped (an SDO abort writing its communication or mapping parameter)."""


@dataclass(frozen=True)
class PdoLayout:
    """Which PDO carries each object the cycle writes (RPDOs) and reads (TPDOs), and what it reads by SDO."""

    rpdo: Mapping[int, int]
    """object index → RPDO number (1..4) the cycle writes it in."""
    tpdo: Mapping[int, int]
    """object index → TPDO number (1..4) it arrives in."""
    own: bool = True
    """True: mapped by this master; False: the drive's own mapping (it refused ours)."""
    polled: tuple[int, ...] = ()
    """Objects no TPDO carries that the worker reads by SDO (velocity, torque actual), at a lower rate."""

    @property
    def rpdos(self) -> tuple[int, ...]:
        """The RPDOs to send each cycle, the one with the controlword last (it enables what the others set)."""
        return tuple(sorted(set(self.rpdo.values()), key=lambda n: (n == self.rpdo[od.CONTROLWORD], -n)))

    @property
    def first_tpdo(self) -> int:
        return min(self.tpdo.values())

    @property
    def last_tpdo(self) -> int:
        """The TPDO that completes a cycle's measurement (a drive sends its synchronous TPDOs in number order)."""
        return max(self.tpdo.values())

    def view(self) -> str:
        def side(kind: str, where: Mapping[int, int]) -> str:
            return " ".join(f"{kind}{n}:" + "+".join(f"0x{i:04X}" for i, k in where.items() if k == n)
                            for n in sorted(set(where.values())))

        polled = f"; by SDO {'+'.join(f'0x{i:04X}' for i in self.polled)}" if self.polled else ""
        return (f"{'' if self.own else 'the drive own mapping: '}{side('RPDO', self.rpdo)}; "
                f"{side('TPDO', self.tpdo)}{polled}")


@dataclass(frozen=True)
class Settings:
    """What the bring-up and the cycle need of one axis's registers."""

    node_id: int
    law: str
    counts_per_unit: float  # 0: from the drive (:mod:`._scaling`)
    rated_torque: float  # 0: read 0x6076
    period_s: float
    heartbeat_s: float
    master_id: int
    timeout_s: float
    homing_method: int
    home_offset: float
    inertia: float
    compensation: bool
    lost_after_s: float  # The drive is lost when its heartbeat is silent this long (or 3 periods, if longer).
    velocity_limit: float  # The envelope's |v| [unit/s]: a stop by every channel judges rest against it.
    acceleration_limit: float  # The envelope's |a| [unit/s²]: how long a stop by every channel may take.
    boot_timeout_s: float = 10.0  # How long a silent drive is waited for (its boot) before it is an error.
    sdo_timeout_s: float = 1.0
    sdo_retries: int = 0
    homing_speed: float = 0.0  # [unit/s]; 0: the drive's own 0x6099
    homing_timeout_s: float = 30.0


@dataclass(frozen=True)
class Scale:
    """What one count of the drive's position and velocity objects is in the servo's units."""

    position: float
    """0x6064/0x607A counts per unit (rad or m)."""
    velocity: float
    """0x606C/0x60FF counts per unit/s."""
    source: str
    """Where it came from, for the log and the notes."""

    @property
    def tag(self) -> str:
        """Its source in a word, for ``sys.drive``: ``register``, ``0x60A8``, ``factor group``, ``default``."""
        for start, tag in (("servo.", "register"), ("0x60A8", "0x60A8"), ("the factor group", "factor group")):
            if self.source.startswith(start):
                return tag
        return "default"


@dataclass
class Identity:
    """What the drive told about itself, and the mode chosen from it."""

    device_type: int = 0
    vendor: int = 0
    product: int = 0
    revision: int = 0
    serial: int = 0
    name: str = ""
    modes: int = 0
    mode: int = 0
    """The streaming mode of operation chosen (8, 9, 10 or 7)."""
    rated_torque: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return {"vendor": f"0x{self.vendor:08X}", "product": f"0x{self.product:08X}",
                "revision": f"0x{self.revision:08X}", "serial": self.serial, "modes": f"0x{self.modes:08X}"}


def sdo_errors() -> tuple[type[BaseException], ...]:
    import canopen

    return (canopen.SdoCommunicationError, canopen.SdoAbortedError)


def step(what: str, fn: Any, *args: Any) -> Any:
    """Run one SDO step; a refusal or silence is a :class:`BringUpError` naming ``what``."""
    import canopen

    try:
        return fn(*args)
    except canopen.SdoAbortedError as ex:
        raise BringUpError(f"{what}: the drive refused ({ex})") from ex
    except canopen.SdoCommunicationError as ex:
        raise BringUpError(f"{what}: no answer ({ex})") from ex


def read(node: Any, index: int, sub: int | None = None) -> Any:
    obj = node.sdo[index] if sub is None else node.sdo[index][sub]
    return obj.raw


def write(node: Any, index: int, value: int, sub: int | None = None) -> None:
    obj = node.sdo[index] if sub is None else node.sdo[index][sub]
    obj.raw = value


def optional(what: str, fn: Any, *args: Any) -> tuple[bool, Any]:
    """Run one SDO step on an object the drive may lack: (True, its result), or (False, why not) where the drive
    has no such object or refuses it.

    :raises BringUpError: no answer (a drive that stopped answering is no absent object)."""
    import canopen

    try:
        return True, fn(*args)
    except canopen.SdoAbortedError as ex:
        return False, "absent" if ex.code in od.ABSENT else f"refused ({ex})"
    except canopen.SdoCommunicationError as ex:
        raise BringUpError(f"{what}: no answer ({ex})") from ex
