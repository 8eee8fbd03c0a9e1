"""The walks of one CiA 402 drive, on its worker thread (SDO and NMT are blocking): bring-up, re-arm, recovery
after a silence, homing, stand-down, and reading a fault's code.

A bring-up is the whole of it every time, the first, each re-arm and each recovery after a silence alike: listen for
another master first (nothing is sent while one is heard), identify and choose the mode (:mod:`._identify`), the
units (:mod:`._scaling`), the communication objects the drive has (:mod:`._comm`), the mode, the PDO mapping
(:mod:`._mapping`), NMT OPERATIONAL, the first TPDO and a heartbeat (or guarding answer) that says OPERATIONAL, then
the state machine to SWITCHED ON (a re-arm resets a fault — controlword bit 7 held, a second edge halfway — and
leaves a quick stop first) and the mode display checked against the mode we set. Only then is the drive
:attr:`~._context.DriveContext.up` (supervised, commanded by the loop). A walk owns the controlword while it runs
and stops at once (:class:`WalkInterruptedError`) when a stop by every channel is asked. A drive that does not
answer yet is waited for, without an error, for ``servo.drive.canopen.boot_timeout`` (a drive that takes seconds to
boot; its boot-up message ends the wait).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ...errors import ErrorCode
from . import _comm, _mapping
from . import _dictionary as od
from ._bringup import BringUpError, Identity, NoAnswerError, optional, step
from ._bringup import read as sdo_read
from ._bringup import write as sdo_write
from ._context import DriveContext
from ._identify import identify, label
from ._scaling import derive
from ._units import I32, clip_counts
from ._verify import read
from ._watch import emcy_text

_logger = logging.getLogger(__name__)

ANSWER_RETRY_S = 1.0
"""A drive that does not answer, or did not take a transition of the bring-up in time, is tried again this often
(reported as error 11 meanwhile) [second]."""


class WalkInterruptedError(BringUpError):
    """A stop by every channel was asked: the walk gives the controlword up."""


def wait(c: DriveContext, predicate: Callable[[], bool], what: str, timeout: float | None = None) -> None:
    """Until ``predicate()``, within ``timeout`` (default ``servo.drive.canopen.timeout``).

    :raises BringUpError: timed out (naming ``what`` and the drive's state), closed, or :class:`WalkInterruptedError`.
    """
    deadline = time.monotonic() + (c.s.timeout_s if timeout is None else timeout)
    while not predicate():
        if c.closing.is_set():
            raise BringUpError("closed")
        if c.stop_reason is not None and not c.stopping:
            raise WalkInterruptedError(f"interrupted: {c.stop_reason}")
        if time.monotonic() > deadline:
            raise BringUpError(f"timed out waiting for {what}; the drive is in {c.state()}")
        time.sleep(0.002)


def wait_state(c: DriveContext, want: str, timeout: float | None = None) -> None:
    wait(c, lambda: c.state() == want, f"state {want} (controlword 0x{c.cw:04X})", timeout)


def attempt(c: DriveContext, cycler: Callable[[], None], reset_fault: bool) -> None:
    """One whole bring-up (see the module docstring); the drive is :attr:`~DriveContext.up` after it, unless it is
    in FAULT and ``reset_fault`` is False (its fault is then read and held until a re-arm).

    :raises BringUpError: another master is heard, a step is refused or unanswered, a transition is not taken in
        time, or the mode display is not the mode set.
    """
    s, node = c.s, c.node
    on_bus = c.bus.claim()  # First: it listens until the bus has been heard long enough…
    delay = c.listening_since + c.bus.listen_s - time.monotonic()
    if delay > 0.0 and c.closing.wait(delay):  # …and the drive's own COB-IDs too.
        raise BringUpError("closed")
    conflicts = [x for x in (c.foreign_master(c.bus.listen_s), on_bus) if x is not None]
    if conflicts:
        raise BringUpError(f"refusing to command it: {'; '.join(conflicts)}")
    c.up = False
    c.walking = True
    c.ready = False  # Nothing is sent while it is configured.
    if c.cw not in (od.CW_QUICK_STOP, od.CW_DISABLE_VOLTAGE):
        c.cw = od.CW_SHUTDOWN  # What the first RPDOs carry: nothing that enables.
    t0 = time.monotonic()
    c.ident = Identity()
    said = [identify(node, s, c.bus.iface, c.ident)]
    c.scale, warning = derive(node, s)
    c.comm = _comm.configure(node, s, c.ident.mode)
    step("modes of operation 0x6060", sdo_write, node, od.MODES_OF_OPERATION, c.ident.mode)
    c.comm.mode_readable, _ = optional("modes of operation 0x6060", sdo_read, node, od.MODES_OF_OPERATION)
    c.layout = _mapping.configure(node, c.ident.mode, s.node_id)
    if c.comm.watch == "guarding":
        node.nmt.start_node_guarding(s.heartbeat_s)
    c.watch_rpdos([node.rpdo[n].cob_id for n in c.layout.rpdos])
    _logger.info("%s%s identified and configured in %.3g s: %s, units %s, watch %s; %s", c.name, label(c.ident),
                 time.monotonic() - t0, od.mode_name(c.ident.mode), c.scale.source, c.comm.watch, c.layout.view())
    if not c.layout.own:
        said.append(f"remapping refused: {c.layout.view()}")
    elif c.layout.polled:
        said.append(f"its PDOs cannot carry {', '.join(f'0x{i:04X}' for i in c.layout.polled)}: read by SDO")
    for text in (*said, warning, *c.comm.notes):
        if text and text not in c.notes_said:
            c.notes_said.add(text)  # Once per drive, not at every re-arm.
            c.notes.step(f"{c.name}: {text}")
            _logger.warning("%s: %s", c.name, text)
    c.mode_cmd = c.ident.mode
    c.mode_display = None
    c.ready = True
    c.bus.add_cycler(cycler)
    started = time.monotonic()
    c.booted = False
    node.nmt.state = "OPERATIONAL"
    wait(c, lambda: c.sw_at > started, "the first TPDO (statusword) after NMT OPERATIONAL")
    if c.comm.hears:
        wait(c, lambda: c.nmt == od.NMT_OPERATIONAL and c.nmt_at > started,
             f"a {'heartbeat' if c.comm.heartbeat else 'guarding answer'} saying OPERATIONAL",
             max(c.s.timeout_s, 3.0 * s.heartbeat_s))
    state = c.state()
    if state in ("FAULT", "FAULT REACTION ACTIVE"):
        if not reset_fault:
            read_fault(c, state, c.statusword)  # Held until an explicit re-arm.
            c.up = True
            return
        reset_held(c)
    elif state == "QUICK STOP ACTIVE":
        c.cw = od.CW_DISABLE_VOLTAGE
        wait_state(c, "SWITCH ON DISABLED")
    walk_to_switched_on(c)
    assert c.layout is not None
    in_tpdo = od.MODES_OF_OPERATION_DISPLAY in c.layout.tpdo
    mode = c.mode_display if in_tpdo else read(node, od.MODES_OF_OPERATION_DISPLAY)
    if mode != c.mode_cmd:
        raise BringUpError(f"0x6061 = {mode} after 0x6060 := {c.mode_cmd}: the drive did not take the mode")
    c.up = True


def reset_held(c: DriveContext) -> None:
    """Fault reset: controlword bit 7 from 0 to 1, held until the drive leaves FAULT (drives that take the reset only
    with the bit held a while), within ``timeout``; if it is still in FAULT, a second edge held as long (drives whose
    fault was still present at the first edge). A second edge sooner would cut short a hold the drive needs.

    :raises BringUpError: still in FAULT (the error names its state), or interrupted."""
    for edge in (1, 2):
        c.cw = od.CW_DISABLE_VOLTAGE
        time.sleep(2 * c.s.period_s)
        c.cw = od.CW_FAULT_RESET
        try:
            wait_state(c, "SWITCH ON DISABLED", c.s.timeout_s)
            return
        except WalkInterruptedError:
            raise
        except BringUpError:
            if edge == 2 or c.closing.is_set():
                raise


def walk_to_switched_on(c: DriveContext) -> None:
    """Shutdown → Switch On, each transition within ``timeout``."""
    if c.state() != "SWITCHED ON":
        c.cw = od.CW_SHUTDOWN
        wait_state(c, "READY TO SWITCH ON")
        c.cw = od.CW_SWITCH_ON
        wait_state(c, "SWITCHED ON")


def bring_up(c: DriveContext, cycler: Callable[[], None], answered: Callable[[bool], None]) -> None:
    """Bring the drive up; any failure (no answer, a refusal, another master, a transition not taken in time) is
    reported as error 11 and the whole bring-up tried again every :data:`ANSWER_RETRY_S` until it succeeds (a drive
    booting after us, power-cycled, or a host stalled by kernel compilation), then the error is cleared.
    ``answered(up)`` is told the outcome of each attempt (re-arms asked meanwhile wait for it)."""
    reported: tuple[ErrorCode, str] | None = None
    boot_until = time.monotonic() + c.s.boot_timeout_s
    try:
        while not c.closing.is_set():
            c.heard.clear()
            try:
                attempt(c, cycler, reset_fault=False)
                if reported is not None and c.fault == reported:
                    c.fault = None  # It is up now.
                _logger.info("%s up: %s, %s", c.name, c.state(), c.ident.view())
                answered(c.fault is None)
                return
            except NoAnswerError as ex:
                if time.monotonic() < boot_until and c.fault is None:
                    _logger.info("%s: waiting for its boot-up (%s)", c.name, ex)
                    c.walking = False
                    if _pause(c, min(ANSWER_RETRY_S, max(0.0, boot_until - time.monotonic()))):
                        return
                    _drain(c)
                    continue  # A drive booting: no error before boot_timeout; its boot-up ends the wait.
                failure = (ErrorCode.DRIVE_FAULT, f"{c.name}: {ex} (none within servo.drive.canopen.boot_timeout "
                           f"{c.s.boot_timeout_s:g} s)")
                if c.fault is None or c.fault == reported:
                    if c.fault != failure:
                        _logger.warning("%s", failure[1])
                    c.fault = reported = failure
                answered(False)
            except Exception as ex:  # canopen/bus errors too: reported, never a silent hang.
                text = str(ex) if isinstance(ex, BringUpError) else f"bring-up failed: {ex!r}"
                failure = (ErrorCode.DRIVE_FAULT, f"{c.name}{label(c.ident) if c.ident.extras else ''}: {text}")
                if c.fault is None or c.fault == reported:
                    if c.fault != failure:
                        _logger.warning("%s", failure[1])
                    c.fault = reported = failure
                elif c.fault != reported:
                    answered(False)
                    return  # A fault of the drive itself: it waits for a re-arm.
                answered(False)
            finally:
                c.walking = False
            if _pause(c, ANSWER_RETRY_S):
                return
            _drain(c)
    finally:
        c.walking = False


def _pause(c: DriveContext, seconds: float) -> bool:
    """Wait before the next attempt; a boot-up heard ends the wait at once. True: closed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not c.heard.is_set():
        if c.closing.wait(0.05):
            return True
    return c.closing.is_set()


def _failure(ex: Exception) -> str:
    """A failed walk in words: a bring-up step's own message, else the exception itself."""
    return str(ex) if isinstance(ex, BringUpError) else repr(ex)


def _unanswered(ex: BringUpError) -> bool:
    """A step without its answer (none in time, or another's late one in its place), not a refusal."""
    import canopen

    return isinstance(ex, NoAnswerError) or isinstance(ex.__cause__, canopen.SdoCommunicationError)


def _drain(c: DriveContext) -> None:
    """Late answers to what timed out must not answer anew."""
    while not c.node.sdo.responses.empty():
        c.node.sdo.responses.get_nowait()


def rearm(c: DriveContext, cycler: Callable[[], None]) -> bool:
    """The whole bring-up again, resetting a fault; True once the drive is SWITCHED ON in our mode under our
    control (the fault cleared), else False with the reason as the fault."""
    stopping, cw, reason = c.stopping, c.cw, c.stop_reason
    c.stopping, c.stop_reason = False, None
    try:
        attempt(c, cycler, reset_fault=True)
    except Exception as ex:  # Reported as the fault; the drive stays stopped as it was.
        c.fault = (ErrorCode.DRIVE_FAULT, f"{c.name}: re-arm failed: {_failure(ex)}")
        c.stopping, c.cw, c.stop_reason = stopping, cw, reason
        c.notes.step(c.fault[1])
        return False
    finally:
        c.walking = False
    c.fault, c.emcy, c.error_code, c.stop_reason = None, None, 0, None
    c.notes.step(f"{c.name} re-armed: {c.state()} in {od.mode_name(c.mode_cmd)}, NMT {od.nmt_name(c.nmt)}")
    return True


def recover(c: DriveContext, cycler: Callable[[], None]) -> bool:
    """The drive heard again after a silence that lost it, or found idle out of SWITCHED ON by itself: the whole
    bring-up again, without a fault reset. Its reaction to a silence, ours or its own (0x6007: Disable Voltage,
    Quick Stop, a fault), or a reboot may have left it anywhere; it is walked back to SWITCHED ON as at the start,
    or, found in FAULT, its fault is read and held until a re-arm. A loss stays the axis's error until then
    (nothing moves meanwhile). A drive back from a stall first works off what queued up meanwhile (its answers come
    late, then answer our next requests): a step without its answer is tried again every :data:`ANSWER_RETRY_S`,
    late answers drained, for ``boot_timeout`` as a booting drive's is. True once up again."""
    give_up_at = time.monotonic() + c.s.boot_timeout_s
    try:
        while True:
            _drain(c)
            try:
                attempt(c, cycler, reset_fault=False)
                break
            except BringUpError as ex:
                c.walking = False
                if not _unanswered(ex) or time.monotonic() >= give_up_at or _pause(c, ANSWER_RETRY_S):
                    raise
    except Exception as ex:  # Held until a re-arm; the drive stays as it is.
        c.fault = (ErrorCode.DRIVE_FAULT, f"{c.name}: not brought up again: {_failure(ex)}")
        c.notes.step(c.fault[1])
        return False
    finally:
        c.walking = False
    state = c.state()
    c.fault = None
    if state in ("FAULT", "FAULT REACTION ACTIVE"):
        read_fault(c, state, c.statusword)  # Its reaction to the silence, or a fault of its own.
        return False
    c.emcy = None  # Its cause is over: a later leave is judged by what it says then.
    c.notes.step(f"{c.name} brought up again: {state} in {od.mode_name(c.mode_cmd)}")
    return True


def read_fault(c: DriveContext, state: str, sw: int) -> None:
    """The drive's error code (0x603F) by SDO, as the fault's text."""
    code = read(c.node, od.ERROR_CODE)
    c.error_code = code or 0
    emcy = f", {emcy_text(c.emcy)}" if c.emcy else ""
    c.set_fault(ErrorCode.DRIVE_FAULT, f"{c.name}: {state} (statusword 0x{sw:04X}), error code "
                f"{'unreadable' if code is None else f'0x{code:04X}'}{emcy}")


def home(c: DriveContext) -> None:
    """Homing (mode 6, ``homing_method``, ``home_offset``, ``homing_speed``), then back to the streaming mode in
    SWITCHED ON. A drive that refuses method 37 is asked 35 (their older number for the same), and vice versa; a
    drive whose homing speeds (0x6099) exceed the envelope's velocity is not homed."""
    s, node = c.s, c.node
    c.walking = True
    try:
        method = _homing_method(c)
        k, kv = c.scale.position, c.scale.velocity
        step("home offset 0x607C", sdo_write, node, od.HOME_OFFSET, clip_counts(s.home_offset * k, I32))
        if s.homing_speed > 0.0:
            for sub, speed in ((1, s.homing_speed), (2, s.homing_speed / 4.0)):
                optional(f"homing speed 0x6099:{sub}", sdo_write, node, od.HOMING_SPEEDS, max(1, round(speed * kv)),
                         sub)
        for sub in (1, 2):
            got, counts = optional(f"homing speed 0x6099:{sub}", sdo_read, node, od.HOMING_SPEEDS, sub)
            if got and int(counts) / kv > s.velocity_limit:
                raise BringUpError(f"its homing speed 0x6099:{sub} = {int(counts) / kv:.3g} unit/s exceeds the "
                                   f"envelope's {s.velocity_limit:g} (set servo.drive.canopen.homing_speed)")
        step("modes of operation 0x6060", sdo_write, node, od.MODES_OF_OPERATION, od.MODE_HOMING)
        c.mode_cmd = od.MODE_HOMING
        c.cw = od.CW_ENABLE
        wait_state(c, "OPERATION ENABLED")
        c.cw = od.CW_HOMING_START
        done = od.SW_HOMING_ATTAINED | od.SW_TARGET_REACHED
        wait(c, lambda: c.statusword & done == done or bool(c.statusword & od.SW_FOLLOWING_ERROR),
             f"homing attained (method {method})", s.homing_timeout_s)
        if c.statusword & od.SW_FOLLOWING_ERROR:
            raise BringUpError(f"homing error (method {method}, statusword 0x{c.statusword:04X})")
        c.notes.step(f"{c.name}: homed (method {method}) at {c.p_counts / k:.6g}")
    except Exception as ex:  # Reported; the drive is put back below either way.
        c.notes.step(f"{c.name}: homing failed: {ex}")
    finally:
        try:
            c.cw = od.CW_SWITCH_ON
            wait_state(c, "SWITCHED ON")
            node.sdo[od.MODES_OF_OPERATION].raw = c.ident.mode
            c.mode_cmd = c.ident.mode
            assert c.layout is not None
            if od.MODES_OF_OPERATION_DISPLAY in c.layout.tpdo:  # A TPDO sent before the change says homing still.
                wait(c, lambda: c.mode_display == c.mode_cmd, f"0x6061 = {c.mode_cmd} after homing")
        except Exception as ex:
            c.set_fault(ErrorCode.DRIVE_FAULT, f"{c.name}: after homing: {ex}")
        c.walking = False


def _homing_method(c: DriveContext) -> int:
    """0x6098 := the method; 37 refused: 35, and 35 refused: 37 (the same method under CiA 402's two numbers)."""
    method = c.s.homing_method
    done, why = optional("homing method 0x6098", sdo_write, c.node, od.HOMING_METHOD, method)
    if done:
        return method
    other = {35: 37, 37: 35}.get(method)
    if other is not None and optional("homing method 0x6098", sdo_write, c.node, od.HOMING_METHOD, other)[0]:
        c.notes.step(f"{c.name}: homing method {method} refused ({why}): {other}, the same method's other number")
        return other
    raise BringUpError(f"homing method 0x6098 := {method}: {why}")


def stand_down(c: DriveContext, cycler: Callable[[], None]) -> None:
    """After the loop let go (at rest): Disable Operation, Shutdown, NMT pre-operational, the drive's watch of our
    heartbeat off."""
    node = c.node
    if node is None or not c.ready:
        return
    c.walking = True
    try:
        for cw, want in ((od.CW_SWITCH_ON, "SWITCHED ON"), (od.CW_SHUTDOWN, "READY TO SWITCH ON")):
            if c.state() in ("FAULT", "FAULT REACTION ACTIVE", "QUICK STOP ACTIVE") or c.stopping:
                break
            c.cw = cw
            wait_state(c, want, min(c.s.timeout_s, 0.5))
        c.up = False
        c.bus.remove_cycler(cycler)
        node.nmt.state = "PRE-OPERATIONAL"
        if c.comm.watch == "heartbeat":
            node.sdo[od.CONSUMER_HEARTBEAT][1].raw = 0
        elif c.comm.watch == "guarding":
            node.sdo[od.GUARD_TIME].raw = 0  # Its life guarding off, then our requests.
            node.nmt.stop_node_guarding()
    except Exception as ex:  # Leaving anyway: the drive's own watch covers what did not get through.
        _logger.info("%s: stand-down incomplete: %s", c.name, ex)
    finally:
        c.walking = False


def velocity(c: DriveContext) -> float | None:
    """The joint's velocity as the drive reports it: its TPDO while they come, else 0x606C by SDO [unit/s]."""
    if c.tpdo_fresh(time.monotonic()) and od.VELOCITY_ACTUAL not in (c.layout.polled if c.layout else ()):
        return c.v_counts / c.scale.velocity
    counts = read(c.node, od.VELOCITY_ACTUAL)
    return None if counts is None else counts / c.scale.velocity
