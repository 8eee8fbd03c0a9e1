"""Bring-up of one CiA 402 drive as a careful master does it, by SDO through canopen (blocking; run in a thread).

NMT pre-operational; identity (0x1018) and supported modes (0x6502), refusing a mode the drive lacks; rated torque
(0x6076) unless set; cycle period (0x1006), the drive's heartbeat (0x1017) and its watch of ours (0x1016), quick
stop on communication loss (0x6007 = 3), the mode (0x6060); then the PDOs mapped here, whatever the vendor's
defaults: RPDO1 controlword + target (CSP: RPDO2 velocity and torque offsets), TPDO1 statusword + position
actual, TPDO2 velocity actual + torque actual, all synchronous (type 1), the others disabled. Any refusal is a
:class:`BringUpError` naming the step, the object and the drive's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _dictionary as od

PDO_NOT_VALID = 1 << 31
"""COB-ID bit 31: the PDO does not exist (disabled)."""


class BringUpError(RuntimeError):
    """The drive cannot be brought up as configured; the message says which step and why."""


class NoAnswerError(BringUpError):
    """Nothing answers at the drive's node-ID (absent, not yet booted, wrong node-ID or bit rate)."""


@dataclass(frozen=True)
class Settings:
    """What the bring-up and the cycle need of one axis's registers."""

    node_id: int
    law: str
    counts_per_unit: float
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


@dataclass
class Identity:
    """What the drive told about itself."""

    device_type: int = 0
    vendor: int = 0
    product: int = 0
    revision: int = 0
    serial: int = 0
    modes: int = 0
    rated_torque: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return {"vendor": f"0x{self.vendor:08X}", "product": f"0x{self.product:08X}",
                "revision": f"0x{self.revision:08X}", "serial": self.serial, "modes": f"0x{self.modes:08X}"}


def _sdo_errors() -> tuple[type[BaseException], ...]:
    import canopen

    return (canopen.SdoCommunicationError, canopen.SdoAbortedError)


def _step(what: str, fn: Any, *args: Any) -> Any:
    """Run one SDO step; a refusal or silence is a :class:`BringUpError` naming ``what``."""
    import canopen

    try:
        return fn(*args)
    except canopen.SdoAbortedError as ex:
        raise BringUpError(f"{what}: the drive refused ({ex})") from ex
    except canopen.SdoCommunicationError as ex:
        raise BringUpError(f"{what}: no answer ({ex})") from ex


def _read(node: Any, index: int, sub: int | None = None) -> int:
    obj = node.sdo[index] if sub is None else node.sdo[index][sub]
    return int(obj.raw)


def _write(node: Any, index: int, value: int, sub: int | None = None) -> None:
    obj = node.sdo[index] if sub is None else node.sdo[index][sub]
    obj.raw = value


def identify(node: Any, s: Settings, iface: str) -> Identity:
    """Pre-operational, identity, supported modes and rated torque.

    :raises BringUpError: no answer (absent drive, wrong node-ID or bit rate), or the mode is not supported.
    """
    import canopen

    node.nmt.state = "PRE-OPERATIONAL"
    ident = Identity()
    try:
        ident.device_type = _read(node, od.DEVICE_TYPE)
    except canopen.SdoCommunicationError as ex:
        raise NoAnswerError(
            f"no answer from CANopen node-ID {s.node_id} on {iface} ({ex}): is the drive powered, on this bus, at "
            "this node-ID (servo.drive.canopen.node_id) and bit rate?"
        ) from ex
    except canopen.SdoAbortedError as ex:
        raise BringUpError(f"device type 0x1000 of node-ID {s.node_id}: refused ({ex})") from ex
    ident.vendor = _step("identity 0x1018:1", _read, node, od.IDENTITY, 1)
    for sub, name in ((2, "product"), (3, "revision"), (4, "serial")):
        try:
            setattr(ident, name, _read(node, od.IDENTITY, sub))
        except _sdo_errors():
            pass  # Optional entries.
    mode = od.MODE_OF_LAW[s.law]
    ident.modes = _step("supported drive modes 0x6502", _read, node, od.SUPPORTED_DRIVE_MODES)
    if not ident.modes & (1 << (mode - 1)):
        have = [n for m, n in od.MODE_NAMES.items() if ident.modes & (1 << (m - 1))]
        raise BringUpError(
            f"the drive does not support {od.MODE_NAMES[mode]} (mode {mode}) for servo.drive.mode = {s.law}: "
            f"0x6502 = 0x{ident.modes:08X} ({', '.join(have) or 'none of CSP/CSV/CST/homing'})"
        )
    ident.rated_torque = s.rated_torque
    if ident.rated_torque <= 0.0:
        try:
            ident.rated_torque = _read(node, od.RATED_TORQUE) / 1000.0  # mN·m or mN
        except _sdo_errors():
            ident.rated_torque = 0.0
        if ident.rated_torque <= 0.0 and s.law != "velocity":
            raise BringUpError(
                "the drive has no motor rated torque (0x6076): set servo.drive.canopen.rated_torque for "
                f"servo.drive.mode = {s.law}"
            )
    return ident


def configure(node: Any, s: Settings) -> None:
    """Cycle period, heartbeats, communication-loss reaction, mode, and the PDO mapping (pre-operational).

    :raises BringUpError: the drive refuses one of them (the message names the object).
    """
    _step("communication cycle period 0x1006", _write, node, od.CYCLE_PERIOD, round(s.period_s * 1e6))
    hb_ms = max(1, round(s.heartbeat_s * 1e3))
    _step("producer heartbeat time 0x1017", _write, node, od.PRODUCER_HEARTBEAT, hb_ms)
    _step("consumer heartbeat time 0x1016:1", _write, node, od.CONSUMER_HEARTBEAT, (s.master_id << 16) | 3 * hb_ms, 1)
    _step("abort connection option 0x6007", _write, node, od.ABORT_CONNECTION_OPTION, 3)
    mode = od.MODE_OF_LAW[s.law]
    _step("modes of operation 0x6060", _write, node, od.MODES_OF_OPERATION, mode)
    target = {od.MODE_CSP: od.TARGET_POSITION, od.MODE_CSV: od.TARGET_VELOCITY, od.MODE_CST: od.TARGET_TORQUE}[mode]
    rpdos: list[list[int]] = [[od.CONTROLWORD, target]]
    if mode == od.MODE_CSP:
        rpdos.append([od.VELOCITY_OFFSET, od.TORQUE_OFFSET])
    tpdos = [[od.STATUSWORD, od.POSITION_ACTUAL], [od.VELOCITY_ACTUAL, od.TORQUE_ACTUAL]]
    _map(node.rpdo, rpdos, 0x200, s.node_id, "RPDO")
    _map(node.tpdo, tpdos, 0x180, s.node_id, "TPDO")


def _map(pdos: Any, wanted: list[list[int]], cob_base: int, node_id: int, kind: str) -> None:
    """PDO n (1..4) carries ``wanted[n-1]`` (synchronous) or is disabled."""
    for n in range(1, 5):
        m = pdos[n]
        m.clear()
        m.cob_id = cob_base + 0x100 * (n - 1) + node_id
        m.trans_type = 1
        m.enabled = n <= len(wanted)
        if not m.enabled:  # Only its COB-ID marked invalid (one SDO write): the drive sends or takes nothing on it.
            _step(f"{kind}{n} disabled", _write, node_of(m), m.com_record.od.index, m.cob_id | PDO_NOT_VALID, 1)
            continue
        for index in wanted[n - 1]:
            m.add_variable(index)
        names = ", ".join(f"0x{i:04X}" for i in wanted[n - 1])
        _step(f"{kind}{n} mapping ({names})", m.save)


def node_of(m: Any) -> Any:
    """The remote node a PDO map belongs to."""
    return m.pdo_node.node
