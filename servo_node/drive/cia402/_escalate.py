"""Stop by every channel: when the drive is no longer as we command it, our PDOs may not reach it (another mode,
NMT PRE-OPERATIONAL or STOPPED, an RPDO disabled, another master), so the loop's stop through them may not take
effect. On the drive's worker thread, each step reported as a note:

1. Quick Stop (controlword 0x0002) in our RPDOs and by SDO (after NMT enter pre-operational if the drive is
   STOPPED: no SDO there); then the joint is watched to rest (its TPDO velocity while they come, else 0x606C by SDO)
   for ``timeout`` + |v| / the envelope's acceleration.
2. Still moving: Disable Voltage (0x0000) likewise.
3. NMT start if its heartbeat says PRE-OPERATIONAL or STOPPED, so that our PDOs, which now carry the same
   controlword, reach it again — not after a boot-up: its PDO mapping is then its power-on one, and our frames would
   mean something else to it (a re-arm brings it up again).
4. A joint that still moves after that is reported as uncontrollable: the fault's text says so, never "braking".

The controlword stays what this sent (Quick Stop, or Disable Voltage) until a re-arm.
"""

from __future__ import annotations

import time

from ...errors import ErrorCode
from . import _dictionary as od
from ._context import DriveContext
from ._verify import write
from ._walks import velocity

REST_FRACTION = 0.005
"""The joint is at rest within this fraction of the envelope's velocity (0.05 of 10 units/s)."""
REST_SAMPLES = 3
"""…for this many readings in a row, :data:`POLL_S` apart."""
POLL_S = 0.02


def rest_velocity(c: DriveContext) -> float:
    return max(REST_FRACTION * c.s.velocity_limit, 1.0 / c.scale.velocity)


def wait_rest(c: DriveContext) -> tuple[bool, float | None]:
    """Whether the joint came to rest within ``timeout`` + |v| / a, and its last velocity reading."""
    v = velocity(c)
    bound = c.s.timeout_s + abs(v if v is not None else c.s.velocity_limit) / max(c.s.acceleration_limit, 1e-9)
    deadline = time.monotonic() + bound
    calm = 0
    while not c.closing.is_set():
        v = velocity(c)
        calm = calm + 1 if v is not None and abs(v) <= rest_velocity(c) else 0
        if calm >= REST_SAMPLES:
            return True, v
        if time.monotonic() > deadline:
            return False, v
        time.sleep(POLL_S)
    return False, v


def stop_by_every_channel(c: DriveContext) -> None:
    """The steps of the module docstring, for :attr:`~DriveContext.stop_reason`."""
    reason = c.stop_reason or "asked"
    say = c.notes.step
    node = c.node
    c.walking, c.stopping = True, True
    try:
        c.cw = od.CW_QUICK_STOP  # The cycle's RPDOs carry it from now on, whatever else gets through.
        say(f"{c.name}: stopping by every channel: {reason}")
        nmt = c.nmt
        if nmt == od.NMT_STOPPED:
            node.nmt.state = "PRE-OPERATIONAL"
            nmt = od.NMT_PRE_OPERATIONAL
            say(f"{c.name}: NMT enter pre-operational (it was STOPPED, where SDO is not served)")
        steps = ["Quick Stop (SDO)"]
        why = write(node, od.CONTROLWORD, od.CW_QUICK_STOP)
        say(f"{c.name}: Quick Stop by SDO: {'taken' if why is None else why}")
        at_rest, v = wait_rest(c)
        if not at_rest:
            c.cw = od.CW_DISABLE_VOLTAGE
            steps.append("Disable Voltage (SDO)")
            why = write(node, od.CONTROLWORD, od.CW_DISABLE_VOLTAGE)
            say(f"{c.name}: still moving ({_shown(v)}); Disable Voltage by SDO: {'taken' if why is None else why}")
            at_rest, v = wait_rest(c)
        if nmt in (od.NMT_PRE_OPERATIONAL, od.NMT_STOPPED, od.NMT_BOOT_UP):
            if c.booted:
                say(f"{c.name}: no NMT start: it rebooted, its PDO mapping is its power-on one (a re-arm brings it "
                    "up again)")
            else:
                node.nmt.state = "OPERATIONAL"
                steps.append("NMT start")
                say(f"{c.name}: NMT start: our PDOs (controlword 0x{c.cw:04X}) reach it again")
                if not at_rest:
                    at_rest, v = wait_rest(c)
        if at_rest:
            say(f"{c.name} at rest ({_shown(v)}) after {', '.join(steps)}")
        else:
            text = f"{c.name} uncontrollable: still moving ({_shown(v)}) after {', '.join(steps)}; cause: {reason}"
            c.fault = (ErrorCode.DRIVE_FAULT, text)
            say(text)
    except Exception as ex:  # A bus error: reported, the fault stands.
        say(f"{c.name}: stopping by every channel failed: {ex!r}")
    finally:
        c.walking = False


def _shown(v: float | None) -> str:
    return "velocity unreadable" if v is None else f"{v:+.3g} unit/s"
