"""Who the drive is and which mode it streams in: NMT pre-operational, device type 0x1000, identity 0x1018, its
name 0x1008, supported drive modes 0x6502 (read from the drive: its EDS may not say), the rated torque 0x6076.

The mode (:func:`choose_mode`): the cyclic synchronous mode ``servo.drive.mode`` asks for (CSV, CST, CSP); for
``velocity`` or ``position`` without it, CSP, else interpolated position (IP, mode 7: a position each cycle, which
the drive interpolates over the period); else one line naming the drive, 0x6502 and why
(``CANopen drive 5 (Faulhaber, MCBL300...CO): 0x6502 = 0x00000025 offers no streaming mode (CSP, CSV, CST, IP)``).
``torque`` has no stand-in: it needs CST.
"""

from __future__ import annotations

from typing import Any

from . import _dictionary as od
from ._bringup import BringUpError, Identity, NoAnswerError, Settings, optional, read, sdo_errors, step

VENDORS = {0x9A: "Elmo Motion Control", 0xFB: "maxon motor", 0x147: "Faulhaber", 0x1A3: "Technosoft",
           0x26C: "Nanotec"}
"""CiA vendor-IDs (0x1018:01) named in the log and in refusals (those of the drives whose EDS the tests load)."""


def label(ident: Identity) -> str:
    """`` (maker, product)`` for a message, from 0x1018 and 0x1008: ``(Faulhaber, MCBL300...CO)``,
    ``(vendor-ID 0x00000000, product 0x00000000)``."""
    maker = VENDORS.get(ident.vendor) or f"vendor-ID 0x{ident.vendor:08X}"
    product = ident.name.strip() or f"product 0x{ident.product:08X}"
    return f" ({maker}, {product})"


def has(modes: int, mode: int) -> bool:
    return bool(modes & (1 << (mode - 1)))


def choose_mode(law: str, modes: int) -> tuple[int, str | None]:
    """(the mode of operation to stream in, a note when it is not the one ``law`` asks for) from 0x6502.

    :raises BringUpError: none fits (the message says what 0x6502 holds and what to do)."""
    asked = od.MODE_OF_LAW[law]
    if has(modes, asked):
        return asked, None
    offered = [od.MODE_NAMES[m] for m in od.STREAMING_MODES if has(modes, m)]
    if not offered:
        raise BringUpError(f"0x6502 = 0x{modes:08X} offers no streaming mode (CSP, CSV, CST, IP)")
    if law == "torque":
        raise BringUpError(f"0x6502 = 0x{modes:08X} offers no CST for servo.drive.mode = torque (it streams "
                           f"{', '.join(offered)}: set servo.drive.mode = position)")
    mode = od.MODE_CSP if has(modes, od.MODE_CSP) else od.MODE_IP
    return mode, f"0x6502 = 0x{modes:08X} offers no {od.MODE_NAMES[asked]}: streaming {od.MODE_NAMES[mode]}"


def identify(node: Any, s: Settings, iface: str, ident: Identity) -> str | None:
    """Pre-operational, identity, the mode (into ``ident``, filled as far as it got: a refusal names the drive),
    rated torque; returns the note of :func:`choose_mode`.

    :raises NoAnswerError: nothing answers (absent drive, wrong node-ID or bit rate).
    :raises BringUpError: a mandatory object refused, no mode fits, no rated torque for CST."""
    import canopen

    node.nmt.state = "PRE-OPERATIONAL"
    try:
        ident.device_type = int(read(node, od.DEVICE_TYPE))
    except canopen.SdoCommunicationError as ex:
        raise NoAnswerError(
            f"no answer from CANopen node-ID {s.node_id} on {iface} ({ex}): is the drive powered, on this bus, at "
            "this node-ID (servo.drive.canopen.node_id) and bit rate?"
        ) from ex
    except canopen.SdoAbortedError as ex:
        raise BringUpError(f"device type 0x1000 of node-ID {s.node_id}: refused ({ex})") from ex
    ident.vendor = int(step("identity 0x1018:1", read, node, od.IDENTITY, 1))
    ident.extras["identified"] = True
    for sub, name in ((2, "product"), (3, "revision"), (4, "serial")):
        got, value = optional(f"identity 0x1018:{sub}", read, node, od.IDENTITY, sub)
        if got:
            setattr(ident, name, int(value))
    got, name = optional("device name 0x1008", read, node, od.DEVICE_NAME)
    ident.name = name if got and isinstance(name, str) else ""
    got, modes = optional("supported drive modes 0x6502", read, node, od.SUPPORTED_DRIVE_MODES)
    if not got:
        raise BringUpError(f"supported drive modes 0x6502: {modes}: the drive does not say which modes it has")
    ident.modes = int(modes)
    ident.mode, note = choose_mode(s.law, ident.modes)
    ident.rated_torque = s.rated_torque
    if ident.rated_torque <= 0.0:
        try:
            ident.rated_torque = int(read(node, od.RATED_TORQUE)) / 1000.0  # mN·m or mN
        except sdo_errors():
            ident.rated_torque = 0.0
        if ident.rated_torque <= 0.0 and ident.mode == od.MODE_CST:
            raise BringUpError(
                "the drive has no motor rated torque (0x6076): set servo.drive.canopen.rated_torque for "
                f"servo.drive.mode = {s.law}"
            )
    return note
