"""The PDOs of one drive, mapped by SDO as far as the drive lets: what a cycle writes and reads, and what it reads by
SDO instead.

What the cycle needs (:func:`wanted`): RPDOs the controlword and the mode's target (CSV 0x60FF, CST 0x6071, CSP
0x607A with its offsets 0x60B1/0x60B2 where they map, IP the interpolation data record 0x60C1:01); TPDOs the
statusword and position actual, then the mode display 0x6061, velocity actual 0x606C and torque actual 0x6077 (CSV
and CST need the velocity in a TPDO, CST the torque too: the servo closes their loops).

:func:`pack` fills the drive's PDOs 1-4 in order, one entry at a time, learning each PDO's limits from the drive's
answers: a mapping full at fewer entries than CiA 301's eight (abort 0x06090011 on the next sub-index), an object
it cannot map (0x06040041: tried in no other PDO), 64 bits per PDO (counted here). PDOs the drive lacks are
skipped; a COB-ID it does not let us write is used as it is. What no TPDO carries is read by SDO on the worker
(:attr:`._bringup.PdoLayout.polled`); a needed object no PDO carries is a :class:`._bringup.BringUpError` naming
it and the drive's answer. A drive that refuses the remapping itself (its mapping parameters read-only) is used with
its own mapping (:func:`drive_mapping`) where that carries what is needed. The RPDOs are ours to send: canopen's
reception of their COB-IDs is undone (:func:`mute_rpdos`).
"""

from __future__ import annotations

from typing import Any

from . import _dictionary as od
from ._bringup import PDO_NOT_VALID, BringUpError, MappingRefusedError, PdoLayout, optional, read, step, write

Entry = tuple[int, int, int]
"""(index, sub-index, bits)."""

BITS = {od.CONTROLWORD: 16, od.TARGET_VELOCITY: 32, od.TARGET_TORQUE: 16, od.TARGET_POSITION: 32,
        od.VELOCITY_OFFSET: 32, od.TORQUE_OFFSET: 16, od.IP_DATA: 32, od.STATUSWORD: 16,
        od.MODES_OF_OPERATION_DISPLAY: 8, od.POSITION_ACTUAL: 32, od.VELOCITY_ACTUAL: 32, od.TORQUE_ACTUAL: 16}
PDO_BITS = 64
NOT_HERE = (od.ABORT_NOT_MAPPABLE, 0x06040043, 0x06090030, od.ABORT_NO_OBJECT)
"""Aborts of a mapping entry that mean "not this object" (cannot be mapped, incompatible, out of range, none)."""


def entry(index: int) -> Entry:
    return index, 1 if index == od.IP_DATA else 0, BITS[index]


def wanted(mode: int) -> tuple[list[tuple[Entry, bool]], list[tuple[Entry, bool]]]:
    """(RPDO entries, TPDO entries) in packing order, each with whether the cycle cannot do without it."""
    target = {od.MODE_CSP: od.TARGET_POSITION, od.MODE_CSV: od.TARGET_VELOCITY, od.MODE_CST: od.TARGET_TORQUE,
              od.MODE_IP: od.IP_DATA}[mode]
    rx = [(entry(od.CONTROLWORD), True), (entry(target), True)]
    if mode == od.MODE_CSP:
        rx += [(entry(od.VELOCITY_OFFSET), False), (entry(od.TORQUE_OFFSET), False)]
    tx = [(entry(od.STATUSWORD), True), (entry(od.POSITION_ACTUAL), True),
          (entry(od.MODES_OF_OPERATION_DISPLAY), False),
          (entry(od.VELOCITY_ACTUAL), mode in (od.MODE_CSV, od.MODE_CST)),
          (entry(od.TORQUE_ACTUAL), mode == od.MODE_CST)]
    return rx, tx


def configure(node: Any, mode: int, node_id: int) -> PdoLayout:
    """Map the PDOs (see the module docstring); the drive's own mapping where it refuses ours.

    :raises BringUpError: a needed object no PDO can carry, or an SDO step fails."""
    rx, tx = wanted(mode)
    try:
        rpdo, _ = pack(node, node.rpdo, rx, 0x200, node_id, "RPDO")
        tpdo, polled = pack(node, node.tpdo, tx, 0x180, node_id, "TPDO")
        layout = PdoLayout(rpdo, tpdo, polled=tuple(i for i in polled if i != od.MODES_OF_OPERATION_DISPLAY))
    except MappingRefusedError as ex:
        layout = drive_mapping(node, rx, tx, str(ex))
    mute_rpdos(node)
    return layout


def _exists(node: Any, m: Any, name: str) -> int | None:
    """The PDO's COB-ID entry as the drive has it (None: the drive has no such PDO)."""
    got, value = optional(f"{name} COB-ID", read, node, m.com_record.od.index, 1)
    return int(value) if got else None


def pack(node: Any, pdos: Any, entries: list[tuple[Entry, bool]], cob_base: int, node_id: int,
         kind: str) -> tuple[dict[int, int], list[int]]:
    """Fill PDOs 1-4 with ``entries`` in order as far as the drive takes them; (object → PDO number, the objects
    left over that are not needed).

    :raises MappingRefusedError: the drive refuses to change a mapping at all.
    :raises BringUpError: a needed object is left over (the message names it and why)."""
    import canopen

    queue = list(entries)
    why_not: dict[int, str] = {}
    where: dict[int, int] = {}
    for n in range(1, 5):
        m, name = pdos[n], f"{kind}{n}"
        cob = _exists(node, m, name)
        m.clear()
        m.enabled = False
        if cob is None:
            continue
        com, mapping = m.com_record.od.index, m.map_array.od.index
        m.cob_id = cob & 0x1FFFFFFF if cob & 0x7FF else cob_base + 0x100 * (n - 1) + node_id
        disabled, _ = optional(f"{name} disable", write, node, com, m.cob_id | PDO_NOT_VALID, 1)
        try:
            write(node, mapping, 0, 0)
        except canopen.SdoAbortedError as ex:
            raise MappingRefusedError(f"{name} mapping: the drive refused ({ex})") from ex
        except canopen.SdoCommunicationError as ex:
            raise BringUpError(f"{name} mapping: no answer ({ex})") from ex
        placed: list[Entry] = []
        bits = 0
        for item in list(queue):
            (index, sub, length), _needed = item
            if bits + length > PDO_BITS:
                continue
            try:
                write(node, mapping, (index << 16) | (sub << 8) | length, len(placed) + 1)
            except canopen.SdoAbortedError as ex:
                if ex.code == od.ABORT_NO_SUBINDEX:
                    why_not.setdefault(index, f"{kind}s full")
                    break  # This PDO holds no more entries.
                if ex.code in NOT_HERE:
                    why_not[index] = f"the drive cannot map it ({ex})"
                    queue.remove(item)
                    continue
                raise MappingRefusedError(f"{name} mapping entry 0x{index:04X}: the drive refused ({ex})") from ex
            placed.append(item[0])
            bits += length
            queue.remove(item)
        if placed:
            step(f"{name} mapped objects", write, node, mapping, len(placed), 0)
            _synchronous(node, m, name, kind == "TPDO")
            step(f"{name} enable (COB-ID 0x{m.cob_id:X})", write, node, com, m.cob_id, 1)
            m.enabled = True
            for index, sub, length in placed:
                m.add_variable(index, sub, length)
                where[index] = n
            if kind == "TPDO":
                m.subscribe()
        elif not disabled:
            m.enabled = not cob & PDO_NOT_VALID  # It goes on as it was: nobody uses it.
    missing = [(i, why_not.get(i, f"no {kind} left")) for (i, _, _), needed in entries if needed and i not in where]
    if missing:
        raise BringUpError("; ".join(f"0x{i:04X} cannot be mapped into a {kind} ({why})" for i, why in missing))
    return where, [i for (i, _, _), _ in entries if i not in where]


def _synchronous(node: Any, m: Any, name: str, transmit: bool) -> None:
    """Transmission type 1 (every SYNC); a TPDO the drive will not make synchronous cannot serve the cycle."""
    com = m.com_record.od.index
    done, why = optional(f"{name} transmission type", write, node, com, 1, 2)
    if done:
        m.trans_type = 1
        return
    got, trans = optional(f"{name} transmission type", read, node, com, 2)
    m.trans_type = int(trans) if got else None
    if transmit and not (got and 1 <= int(trans) <= 240):
        raise BringUpError(f"{name} is not synchronous (transmission type {trans}) and the drive refused type 1 "
                           f"({why})")


def mute_rpdos(node: Any) -> None:
    """Undo canopen's reception of our RPDOs' COB-IDs (its ``save``/``read`` subscribe them, and a frame received
    there would replace the data of our next RPDO)."""
    network = node.network
    for n in range(1, 5):
        m = node.rpdo[n]
        if m.on_message in network.subscribers.get(m.cob_id, ()):
            network.unsubscribe(m.cob_id, m.on_message)


def drive_mapping(node: Any, rx: list[tuple[Entry, bool]], tx: list[tuple[Entry, bool]], refused: str) -> PdoLayout:
    """The drive's own PDO mapping, read by SDO, where it carries every needed object of ``rx`` (RPDOs) and ``tx``
    (TPDOs): the PDOs carrying them are enabled and made synchronous (type 1) where the drive lets us (a TPDO must
    be synchronous), the others disabled where it lets us. The other objects mapped in those RPDOs are sent with
    the values the drive has now (0x6060 with the mode, written by the cycle); nothing else changes. Optional TPDO
    objects it lacks are read by SDO.

    :raises BringUpError: ``refused`` and what is missing, or an SDO step of this fails.
    """
    from ._remap import fill, read_mapping, use_pdo

    layout: dict[str, dict[int, int]] = {}
    polled: list[int] = []
    for kind, pdos, items in (("RPDO", node.rpdo, rx), ("TPDO", node.tpdo, tx)):
        entries = {}
        for n in range(1, 5):
            if _exists(node, pdos[n], f"{kind}{n}") is not None:
                entries[n] = read_mapping(node, pdos[n], f"{kind}{n}")
        extra = od.MODES_OF_OPERATION if kind == "RPDO" else od.MODES_OF_OPERATION_DISPLAY
        wanted_here = {i for (i, _, _), _ in items} | {extra}
        where: dict[int, int] = {}
        for n, objs in entries.items():
            for index, _sub, _bits in objs:
                if index in wanted_here:
                    where.setdefault(index, n)
        missing = [i for (i, _, _), needed in items if needed and i not in where]
        if missing:
            have = "; ".join(f"{kind}{n} " + ("+".join(f"0x{i:04X}" for i, _, _ in objs) or "empty")
                             for n, objs in entries.items())
            raise BringUpError(f"its own PDO mapping lacks {', '.join(f'0x{i:04X}' for i in missing)} and it "
                               f"refused ours ({refused}); it has {have}")
        if kind == "TPDO":
            polled = [i for (i, _, _), _ in items if i not in where and i != od.MODES_OF_OPERATION_DISPLAY]
        used = set(where.values())
        for n in entries:
            use_pdo(node, pdos[n], f"{kind}{n}", n in used, kind == "TPDO")
            if kind == "RPDO" and n in used:
                fill(node, pdos[n], set(where), f"{kind}{n}")
        layout[kind] = where
    return PdoLayout(layout["RPDO"], layout["TPDO"], own=False, polled=tuple(polled))
