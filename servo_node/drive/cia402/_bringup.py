"""Bring-up of one CiA 402 drive as a careful master does it, by SDO through canopen (blocking; run in a thread).

NMT pre-operational; identity (0x1018) and supported modes (0x6502), refusing a mode the drive lacks; rated torque
(0x6076) unless set; cycle period (0x1006), the drive's heartbeat (0x1017) and its watch of ours (0x1016), quick
stop on communication loss (0x6007 = 3), the mode (0x6060); then the PDOs mapped here, whatever the vendor's
defaults: RPDO1 controlword + target (CSP: RPDO2 velocity and torque offsets), TPDO1 statusword + modes of operation
display + position actual, TPDO2 velocity actual + torque actual, all synchronous (type 1), the others disabled (the
statusword and the mode display every cycle are what the master judges the drive by). A drive that refuses
the remapping (fixed PDO mappings) is used with its own mapping where that carries every object the cycle needs
(:func:`drive_mapping`; 0x6061 where it is mapped, else the master reads it by SDO), else the bring-up fails naming
the refusal and the objects missing. Any other refusal is a :class:`BringUpError` naming the step, the object and
the drive's reason. The RPDOs are ours to send: canopen's reception of their COB-IDs is undone (a frame another node
sends there must not become the data of our next RPDO; the drive watches those COB-IDs for other masters instead).
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
    """Which PDO carries each object the cycle writes (RPDOs) and reads (TPDOs)."""

    rpdo: Mapping[int, int]
    """object index → RPDO number (1..4) the cycle writes it in."""
    tpdo: Mapping[int, int]
    """object index → TPDO number (1..4) it arrives in."""
    own: bool = True
    """True: mapped by this master; False: the drive's own mapping (it refused ours)."""

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

        return f"{'' if self.own else 'the drive own mapping: '}{side('RPDO', self.rpdo)}; {side('TPDO', self.tpdo)}"


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
    velocity_limit: float  # The envelope's |v| [unit/s]: a stop by every channel judges rest against it.
    acceleration_limit: float  # The envelope's |a| [unit/s²]: how long a stop by every channel may take.


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


def configure(node: Any, s: Settings) -> PdoLayout:
    """Cycle period, heartbeats, communication-loss reaction, mode, and the PDO mapping (pre-operational); returns
    where the cycle's objects travel.

    :raises BringUpError: the drive refuses one of them (the message names the object), or refuses the remapping
        and its own mapping lacks an object the cycle needs.
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
    tpdos = [[od.STATUSWORD, od.MODES_OF_OPERATION_DISPLAY, od.POSITION_ACTUAL], [od.VELOCITY_ACTUAL, od.TORQUE_ACTUAL]]
    try:
        _map(node.rpdo, rpdos, 0x200, s.node_id, "RPDO")
        _map(node.tpdo, tpdos, 0x180, s.node_id, "TPDO")
        layout = PdoLayout({i: n for n, r in enumerate(rpdos, 1) for i in r},
                           {i: n for n, t in enumerate(tpdos, 1) for i in t})
    except MappingRefusedError as ex:
        needed = [i for t in tpdos for i in t if i != od.MODES_OF_OPERATION_DISPLAY]
        layout = drive_mapping(node, [i for r in rpdos for i in r], needed, str(ex))
    mute_rpdos(node)
    return layout


def mute_rpdos(node: Any) -> None:
    """Undo canopen's reception of our RPDOs' COB-IDs (its ``save``/``read`` subscribe them, and a frame received
    there would replace the data of our next RPDO)."""
    network = node.network
    for n in range(1, 5):
        m = node.rpdo[n]
        if m.on_message in network.subscribers.get(m.cob_id, ()):
            network.unsubscribe(m.cob_id, m.on_message)


def drive_mapping(node: Any, rx_needed: list[int], tx_needed: list[int], refused: str) -> PdoLayout:
    """The drive's own PDO mapping, read by SDO, where it carries every object in ``rx_needed`` (RPDOs) and
    ``tx_needed`` (TPDOs): the PDOs carrying them are enabled and made synchronous (type 1) where the drive lets us
    (a TPDO must be synchronous), the others disabled where it lets us. The other objects mapped in those RPDOs are
    sent with the values the drive has now (0x6060 with the mode, written by the cycle); nothing else changes.

    :raises BringUpError: ``refused`` and what is missing, or an SDO step of this fails.
    """
    layout: dict[str, dict[int, int]] = {}
    for kind, pdos, needed in (("RPDO", node.rpdo, rx_needed), ("TPDO", node.tpdo, tx_needed)):
        entries = {n: _read_mapping(node, pdos[n], f"{kind}{n}") for n in range(1, 5)}
        where: dict[int, int] = {}
        for n, objs in entries.items():
            for index, _sub, _bits in objs:
                optional = od.MODES_OF_OPERATION if kind == "RPDO" else od.MODES_OF_OPERATION_DISPLAY
                if index in needed or index == optional:
                    where.setdefault(index, n)
        missing = [i for i in needed if i not in where]
        if missing:
            have = "; ".join(f"{kind}{n} " + ("+".join(f"0x{i:04X}" for i, _, _ in objs) or "empty")
                             for n, objs in entries.items())
            raise BringUpError(f"its own PDO mapping lacks {', '.join(f'0x{i:04X}' for i in missing)} and it "
                               f"refused ours ({refused}); it has {have}")
        used = set(where.values())
        for n in range(1, 5):
            _use_pdo(node, pdos[n], f"{kind}{n}", n in used, kind == "TPDO")
            if kind == "RPDO" and n in used:
                _fill(node, pdos[n], set(where), f"{kind}{n}")
        layout[kind] = where
    return PdoLayout(layout["RPDO"], layout["TPDO"], own=False)


def _read_mapping(node: Any, m: Any, name: str) -> list[tuple[int, int, int]]:
    """PDO ``m`` as the drive has it (communication and mapping parameters by SDO), mirrored in canopen's map;
    returns its entries (index, subindex, bits). Objects the master's dictionary lacks are added to it, typed by
    their length, so that the entries after them keep their place."""
    from canopen import objectdictionary as odm

    cob = _step(f"{name} COB-ID", _read, node, m.com_record.od.index, 1)
    m.cob_id, m.enabled = cob & 0x1FFFFFFF, not cob & PDO_NOT_VALID
    m.trans_type = _step(f"{name} transmission type", _read, node, m.com_record.od.index, 2)
    index_map = m.map_array.od.index
    count = _step(f"{name} mapping count", _read, node, index_map, 0)
    entries = []
    for sub in range(1, count + 1):
        value = _step(f"{name} mapping entry {sub}", _read, node, index_map, sub)
        entries.append((value >> 16, (value >> 8) & 0xFF, value & 0xFF))
    m.clear()
    for index, sub, bits in entries:
        if index not in node.object_dictionary or (
            not isinstance(node.object_dictionary[index], odm.ODVariable) and sub not in node.object_dictionary[index]
        ):
            dtype = {8: odm.UNSIGNED8, 16: odm.UNSIGNED16, 32: odm.UNSIGNED32, 64: odm.UNSIGNED64}.get(bits)
            if dtype is None:
                raise BringUpError(f"{name} maps 0x{index:04X}:{sub} of {bits} bits, which this master cannot place")
            var = odm.ODVariable(f"0x{index:04X}:{sub}", index, sub)
            var.data_type, var.access_type = dtype, "rw"
            if sub == 0:
                node.object_dictionary.add_object(var)
            else:
                rec = node.object_dictionary[index] if index in node.object_dictionary else odm.ODRecord(
                    f"0x{index:04X}", index)
                rec.add_member(var)
                if index not in node.object_dictionary:
                    node.object_dictionary.add_object(rec)
        m.add_variable(index, sub, bits)
    return entries


def _use_pdo(node: Any, m: Any, name: str, used: bool, transmit: bool) -> None:
    """Enable (synchronous where permitted) or disable PDO ``m``; the drive's refusal of a change it can do without
    is accepted."""
    import canopen

    com = m.com_record.od.index
    if not used:
        if m.enabled:
            try:
                _write(node, com, m.cob_id | PDO_NOT_VALID, 1)
                m.enabled = False
            except canopen.SdoAbortedError:
                pass  # It keeps sending (TPDO) or listening (RPDO) to what nobody uses.
        return
    if m.trans_type != 1:
        try:
            _write(node, com, 1, 2)
            m.trans_type = 1
        except canopen.SdoAbortedError as ex:
            if transmit and not 1 <= m.trans_type <= 240:
                raise BringUpError(f"{name} is not synchronous (transmission type {m.trans_type}) and the drive "
                                   f"refused type 1 ({ex})") from ex
    if not m.enabled:
        _step(f"{name} enable (COB-ID 0x{m.cob_id:X})", _write, node, com, m.cob_id, 1)
        m.enabled = True
    if transmit:
        m.subscribe()


def _fill(node: Any, m: Any, written: set[int], name: str) -> None:
    """The objects of RPDO ``m`` the cycle does not write keep the values the drive has now."""
    for var in m.map:
        if var.index not in written:
            data = _step(f"{name}: 0x{var.index:04X}:{var.subindex} (sent unchanged)", node.sdo.upload, var.index,
                         var.subindex)
            var.data = bytes(data[: (var.length + 7) // 8]).ljust((var.length + 7) // 8, b"\0")


def _map(pdos: Any, wanted: list[list[int]], cob_base: int, node_id: int, kind: str) -> None:
    """PDO n (1..4) carries ``wanted[n-1]`` (synchronous) or is disabled.

    :raises MappingRefusedError: the drive refused a PDO's configuration (its mapping is fixed).
    """
    import canopen

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
        try:
            m.save()
        except canopen.SdoAbortedError as ex:
            raise MappingRefusedError(f"{kind}{n} mapping ({names}): the drive refused ({ex})") from ex
        except canopen.SdoCommunicationError as ex:
            raise BringUpError(f"{kind}{n} mapping ({names}): no answer ({ex})") from ex


def node_of(m: Any) -> Any:
    """The remote node a PDO map belongs to."""
    return m.pdo_node.node
