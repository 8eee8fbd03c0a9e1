"""Which setpoint interface commands an axis when more than one is configured: one at a time.

An axis takes setpoints through its Telega subject (``setpoint_servo``) and the UDRAL servo ports
(``servo.setpoint``, ``servo.group_setpoint``). Two of them fed at once would thrash the joint between their
targets, each new setpoint re-planning the motion. So the interface whose setpoint the axis took last keeps the axis
while its setpoints keep coming, each within the deadman timeout of the one before; a valid setpoint from another
interface meanwhile is refused with a reason that names both. Once the holder has been silent for the deadman
timeout (its last setpoint expired: the joint stops), the next interface to send a setpoint takes the axis.

Plain data, no I/O: :mod:`._setpoints` asks :meth:`InterfaceArbiter.admit` for every setpoint it would apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TELEGA = "setpoint_servo"
UDRAL = "servo.setpoint"
UDRAL_GROUP = "servo.group_setpoint"


@dataclass
class InterfaceArbiter:
    """The setpoint interface holding an axis (see the module docstring).

    :param hold_s: how long the holder keeps the axis after its last setpoint [second]: the deadman timeout.
    """

    hold_s: float
    holder: str = ""
    """The interface that commands the axis (empty: none yet)."""
    last_s: float = -math.inf
    """Reception time of the holder's last setpoint [second, the axis's clock]."""
    refused: str = ""
    """The interface whose setpoints are being refused (empty: no conflict now)."""

    def admit(self, interface: str, received_at_s: float) -> str | None:
        """None if a setpoint of ``interface`` received at ``received_at_s`` may command the axis (it then holds
        it), else why not."""
        if self.holder and interface != self.holder and received_at_s - self.last_s <= self.hold_s:
            self.refused = interface
            return (f"setpoint on {interface} refused: {self.holder} commands this axis (two setpoint interfaces "
                    f"at once; {interface} takes over once {self.holder} is silent for {self.hold_s:g} s)")
        if interface != self.holder:
            self.holder, self.last_s, self.refused = interface, received_at_s, ""
        else:
            self.last_s = max(self.last_s, received_at_s)
        return None
