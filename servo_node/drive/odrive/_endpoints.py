"""The bring-up's exchanges with the ODrive: its version, and its watchdog through the firmware's endpoints.

CAN Simple reaches any configuration value through RxSdo/TxSdo by endpoint ID; the IDs are those of the firmware's
``flat_endpoints.json`` (one per firmware version and board, published with each release), so a wrong file would
write a number into some other setting. Hence the check first: the drive's Get_Version must name the file's
firmware and hardware, else nothing is written. Then ``axis0.config.watchdog_timeout`` and ``enable_watchdog`` are
written and read back (firmware 0.6.11 confirms writes, 0.6.10 does not: a read-back works with both).
"""

from __future__ import annotations

import json
import math
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cyphal_common import odrive as cs

WATCHDOG_TIMEOUT = "axis0.config.watchdog_timeout"
ENABLE_WATCHDOG = "axis0.config.enable_watchdog"

Send = Callable[[int, bytes, bool], None]
"""(command, payload, RTR) to the drive."""
Await = Callable[[int, float], bytes | None]
"""(command, timeout [s]) → the payload of the next answer of that command, None if none came in time."""


class BringUpError(RuntimeError):
    """The drive did not answer, or answered what the servo cannot use (the message says which)."""


class Endpoints:
    """A ``flat_endpoints.json``: firmware and hardware versions and the endpoints by path."""

    def __init__(self, path: str) -> None:
        """:raises BringUpError: the file cannot be read or lacks the watchdog's endpoints."""
        try:
            data: dict[str, Any] = json.loads(Path(path).read_text())
            self.fw = str(data["fw_version"]).partition("-")[0]
            self.hw = str(data["hw_version"])
            self.table: dict[str, dict[str, Any]] = dict(data["endpoints"])
        except (OSError, ValueError, KeyError, TypeError) as ex:
            raise BringUpError(f"servo.drive.odrive.endpoints {path!r} unusable: {ex!r}") from ex
        for name, kind in ((WATCHDOG_TIMEOUT, "float"), (ENABLE_WATCHDOG, "bool")):
            entry = self.table.get(name)
            if entry is None or entry.get("type") != kind:
                raise BringUpError(f"servo.drive.odrive.endpoints {path!r} has no {kind} endpoint {name}")
        self.path = path

    def id_and_format(self, name: str) -> tuple[int, str]:
        entry = self.table[name]
        return int(entry["id"]), cs.SDO_FORMATS[str(entry["type"])]


def version(send: Send, answer: Await, timeout: float) -> tuple[str, str] | None:
    """(firmware, hardware) from Get_Version: an RTR first, then an empty data frame (ODrive's own examples use
    either); None if neither is answered within ``timeout``."""
    for rtr in (True, False):
        send(cs.GET_VERSION, b"", rtr)
        data = answer(cs.GET_VERSION, timeout / 2)
        if data is not None:
            try:
                return cs.unpack_version(data)
            except ValueError:
                continue
    return None


def configure_watchdog(eps: Endpoints, found: tuple[str, str] | None, timeout_s: float, send: Send,
                       answer: Await, wait_s: float) -> None:
    """Check the version, then write the watchdog (timeout first, then enable) and read both back.

    :raises BringUpError: a version that is not the file's, no answer, or a value read back that differs.
    """
    if found is None:
        raise BringUpError(f"no answer to Get_Version: the endpoints of {eps.path} (firmware {eps.fw}) cannot be "
                           "checked against the drive, so none is written")
    fw, hw = found
    if (fw, hw) != (eps.fw, eps.hw):
        raise BringUpError(f"the drive runs firmware {fw} on hardware {hw}, {eps.path} is for firmware {eps.fw} on "
                           f"hardware {eps.hw}: its endpoint IDs would write other settings, none is written")
    for name, value in ((WATCHDOG_TIMEOUT, timeout_s), (ENABLE_WATCHDOG, True)):
        endpoint, fmt = eps.id_and_format(name)
        send(cs.RX_SDO, cs.pack_sdo(cs.SDO_WRITE, endpoint, fmt, value), False)
        time.sleep(0.05)  # A confirmation (0.6.11) answers the write, not the read below: let it pass.
        while answer(cs.TX_SDO, 0.0) is not None:
            pass
        got = read(eps, name, send, answer, wait_s)
        same = math.isclose(got, float(struct.unpack("<f", struct.pack("<f", value))[0]), rel_tol=1e-6) \
            if fmt == "f" else bool(got) == bool(value)
        if not same:
            raise BringUpError(f"{name} reads back {got!r} after writing {value!r}")


def read(eps: Endpoints, name: str, send: Send, answer: Await, wait_s: float) -> Any:
    """One endpoint's value by RxSdo read. :raises BringUpError: no answer within ``wait_s``."""
    endpoint, fmt = eps.id_and_format(name)
    send(cs.RX_SDO, cs.pack_sdo(cs.SDO_READ, endpoint), False)
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0.0:
        data = answer(cs.TX_SDO, left)
        if data is None:
            break
        _, got_id, raw = cs.unpack_sdo(data)
        if got_id == endpoint:
            return struct.unpack_from("<" + fmt, raw)[0]
    raise BringUpError(f"no answer to the read of {name} (endpoint {endpoint}) within {wait_s:g} s")
