"""A drive's own PDO mapping, for a drive that refuses ours: read it by SDO into canopen's maps, and use the PDOs
that carry what the cycle needs as they are (:func:`._mapping.drive_mapping` decides which)."""

from __future__ import annotations

from typing import Any

from ._bringup import PDO_NOT_VALID, BringUpError
from ._bringup import read as _read
from ._bringup import step as _step
from ._bringup import write as _write


def read_mapping(node: Any, m: Any, name: str) -> list[tuple[int, int, int]]:
    """PDO ``m`` as the drive has it (communication and mapping parameters by SDO), mirrored in canopen's map;
    returns its entries (index, subindex, bits). Objects the master's dictionary lacks are added to it, typed by
    their length, so that the entries after them keep their place."""
    from canopen import objectdictionary as odm

    cob = int(_step(f"{name} COB-ID", _read, node, m.com_record.od.index, 1))
    m.cob_id, m.enabled = cob & 0x1FFFFFFF, not cob & PDO_NOT_VALID
    m.trans_type = int(_step(f"{name} transmission type", _read, node, m.com_record.od.index, 2))
    index_map = m.map_array.od.index
    count = int(_step(f"{name} mapping count", _read, node, index_map, 0))
    entries = []
    for sub in range(1, count + 1):
        value = int(_step(f"{name} mapping entry {sub}", _read, node, index_map, sub))
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


def use_pdo(node: Any, m: Any, name: str, used: bool, transmit: bool) -> None:
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


def fill(node: Any, m: Any, written: set[int], name: str) -> None:
    """The objects of RPDO ``m`` the cycle does not write keep the values the drive has now."""
    for var in m.map:
        if var.index not in written:
            data = _step(f"{name}: 0x{var.index:04X}:{var.subindex} (sent unchanged)", node.sdo.upload, var.index,
                         var.subindex)
            var.data = bytes(data[: (var.length + 7) // 8]).ljust((var.length + 7) // 8, b"\0")


