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

At rest is not the end: until a re-arm the worker keeps reading the joint (:func:`watch_after_stop`), and a joint
that moves again — a load on a brakeless axis once the motor is off, a reading that was at rest only because the
drive had not yet updated it — gets the steps not yet taken, then "uncontrollable".

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
WATCH_S = 0.1
"""How often a joint stopped at rest is read again until a re-arm [second]."""


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
    say = c.notes.step
    c.walking, c.stopping = True, True
    c.stop_steps, c.moving_again = [], 0
    try:
        c.cw = od.CW_QUICK_STOP  # The cycle's RPDOs carry it from now on, whatever else gets through.
        say(f"{c.name}: stopping by every channel: {c.stop_reason or 'asked'}")
        nmt = c.nmt
        if nmt == od.NMT_STOPPED:
            c.node.nmt.state = "PRE-OPERATIONAL"
            nmt = od.NMT_PRE_OPERATIONAL
            say(f"{c.name}: NMT enter pre-operational (it was STOPPED, where SDO is not served)")
        c.stop_steps.append("Quick Stop (SDO)")
        why = write(c.node, od.CONTROLWORD, od.CW_QUICK_STOP)
        say(f"{c.name}: Quick Stop by SDO: {'taken' if why is None else why}")
        at_rest, v = wait_rest(c)
        if not at_rest:
            at_rest, v = _disable_voltage(c, v)
        if nmt in (od.NMT_PRE_OPERATIONAL, od.NMT_STOPPED, od.NMT_BOOT_UP):
            if c.booted:
                say(f"{c.name}: no NMT start: it rebooted, its PDO mapping is its power-on one (a re-arm brings it "
                    "up again)")
            else:
                c.node.nmt.state = "OPERATIONAL"
                c.stop_steps.append("NMT start")
                say(f"{c.name}: NMT start: our PDOs (controlword 0x{c.cw:04X}) reach it again")
                if not at_rest:
                    at_rest, v = wait_rest(c)
        _verdict(c, at_rest, v)
    except Exception as ex:  # A bus error: reported, the fault stands.
        say(f"{c.name}: stopping by every channel failed: {ex!r}")
    finally:
        c.walking = False


def watch_after_stop(c: DriveContext) -> None:
    """One reading of a joint stopped by every channel and found at rest (the worker, every :data:`WATCH_S`): moving
    again for :data:`REST_SAMPLES` readings in a row, it gets the steps not yet taken, then "uncontrollable"."""
    v = velocity(c)
    c.moving_again = c.moving_again + 1 if v is not None and abs(v) > rest_velocity(c) else 0
    if c.moving_again < REST_SAMPLES:
        return
    c.walking = True
    try:
        c.notes.step(f"{c.name} moves again after the stop ({_shown(v)})")
        at_rest, v = (False, v) if "Disable Voltage (SDO)" in c.stop_steps else _disable_voltage(c, v)
        _verdict(c, at_rest, v)
    except Exception as ex:  # A bus error: reported, the fault stands.
        c.notes.step(f"{c.name}: stopping by every channel failed: {ex!r}")
    finally:
        c.moving_again = 0
        c.walking = False


def watching(c: DriveContext) -> bool:
    """A joint stopped by every channel, at rest by the last verdict: :func:`watch_after_stop` is due."""
    return c.stopping and not c.walking and c.stopped_at_rest and c.nmt != od.NMT_STOPPED and not c.closing.is_set()


def _disable_voltage(c: DriveContext, v: float | None) -> tuple[bool, float | None]:
    c.cw = od.CW_DISABLE_VOLTAGE
    c.stop_steps.append("Disable Voltage (SDO)")
    why = write(c.node, od.CONTROLWORD, od.CW_DISABLE_VOLTAGE)
    c.notes.step(f"{c.name}: still moving ({_shown(v)}); Disable Voltage by SDO: {'taken' if why is None else why}")
    return wait_rest(c)


def _verdict(c: DriveContext, at_rest: bool, v: float | None) -> None:
    steps = ", ".join(c.stop_steps)
    c.stopped_at_rest = at_rest
    if at_rest:
        c.notes.step(f"{c.name} at rest ({_shown(v)}) after {steps}")
    else:
        text = f"{c.name} uncontrollable: still moving ({_shown(v)}) after {steps}; cause: {c.stop_reason or 'asked'}"
        c.fault = (ErrorCode.DRIVE_FAULT, text)
        c.notes.step(text)


def _shown(v: float | None) -> str:
    return "velocity unreadable" if v is None else f"{v:+.3g} unit/s"
