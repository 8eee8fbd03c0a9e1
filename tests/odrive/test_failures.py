"""How the ``odrive`` backend fails: frames of the drive's node-ID that are not the drive's, that cannot be decoded,
that carry NaN, and a drive that falls silent. The servo and the emulated ODrive are processes (as in
test_system.py); this process puts the stranger's frames on the bus.

CAN Simple frames carry no sender: a stranger's frame for the drive's node-ID is known only by what it is. A frame
only a master sends (a command, a request) cannot be the drive's, since our own frames never come back to us: a
request is counted, a command is the drive's fault (another master commands it: error 11, this servo does not
share a drive). A stranger that sends drive frames (estimates, heartbeats) as the drive is indistinguishable from
it: estimates it sends are judged by the loop like the drive's (NaN: error 8; a jump the drive cannot make: 9).
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path
from typing import Any

import can

from cyphal_common import odrive as cs
from tests.odrive.rig import DRIVE_ID, Listener, rig
from tests.procs import wait_for


def _frame(listener: Listener, command: int, data: bytes = b"", rtr: bool = False) -> None:
    listener.bus.send(can.Message(arbitration_id=cs.arbitration_id(DRIVE_ID, command), data=None if rtr else data,
                                  is_remote_frame=rtr, dlc=8 if rtr else len(data), is_extended_id=False))


def _fb_faults(r: Any) -> int:
    """The loop's feedback faults so far (``sys.events``)."""
    return int(r.reader.json("sys.events")["fb_faults"])


def test_undecodable_frames_and_requests_are_counted_and_a_strangers_command_is_a_fault(
    tmp_path: Path,
) -> None:
    """A 3-byte heartbeat and a 5-byte estimate: dropped, counted in ``sys.drive``, no error; a request (RTR) from
    another master: counted; a Set_Input_Vel from another master: error 11 naming it, until re-armed."""
    with rig(tmp_path) as r:
        r.up()
        stranger = Listener(r.iface)
        try:
            _frame(stranger, cs.HEARTBEAT, b"\x00\x01\x02")
            _frame(stranger, cs.GET_ENCODER_ESTIMATES, b"\x00\x00\x80\x7f\x00")
            wait_for(lambda: r.drive()["dropped"] == 2, timeout=30, what="two frames dropped")
            _frame(stranger, cs.GET_ENCODER_ESTIMATES, rtr=True)
            wait_for(lambda: r.drive()["strangers"] == 1, timeout=30, what="the request counted")
            assert r.servo()["state"] == "standby"  # Nothing of it is a fault.
            _frame(stranger, cs.SET_INPUT_VEL, cs.pack_floats(1.0, 0.0))
            s = wait_for(lambda: (s := r.servo())["error"] == 11 and s, timeout=30, what="the stranger's fault")
            assert "another master" in s["reason"] and "Set_Input_Vel" in s["reason"], s
        finally:
            stranger.close()


def test_nan_estimates_are_distrusted(tmp_path: Path) -> None:
    """An encoder estimate of NaN for the drive's node-ID: the loop distrusts it (error 8), nothing moves."""
    with rig(tmp_path) as r:
        r.up()
        stranger = Listener(r.iface)
        try:
            _frame(stranger, cs.GET_ENCODER_ESTIMATES, cs.pack_floats(math.nan, math.nan))
            seen: list[dict[str, Any]] = []

            def distrusted() -> dict[str, Any] | None:
                seen.append(r.servo())
                return seen[-1] if seen[-1]["error"] == 8 else None

            try:
                s = wait_for(distrusted, timeout=30, what="the NaN distrusted")
            except AssertionError as ex:
                raise AssertionError(f"{ex}; the last statuses {seen[-3:]}; logs in {tmp_path}") from None
            print(s)
            # The drive stays idle: as its heartbeat says (this listener has heard none yet when it has only just
            # joined: UNKNOWN until the first).
            wait_for(lambda: stranger.state() == "IDLE", timeout=30, what="the drive's heartbeat saying IDLE")
        finally:
            stranger.close()


def test_a_silent_drive_is_lost_and_heard_again(tmp_path: Path) -> None:
    """The emulator stopped (SIGSTOP): error 3 (the estimates' or the heartbeat's silence, whichever is seen first);
continued: heard again, the servo stands by."""
    with rig(tmp_path) as r:
        r.up()
        r.plant_proc.send_signal(signal.SIGSTOP)
        try:
            s = wait_for(lambda: (s := r.servo())["error"] == 3 and s["state"] == "error" and s, timeout=30,
                         what="drive lost")
            print(s["reason"])
            assert "heartbeat silent" in s["reason"] or "no feedback" in s["reason"], s
        finally:
            r.plant_proc.send_signal(signal.SIGCONT)
        s = wait_for(lambda: (s := r.servo())["state"] == "standby" and s, timeout=30, what="the drive heard again")
        assert "reports again" in s["reason"] or "the drive is back" in s["reason"], s


def test_a_nan_while_the_drive_is_silent_is_shown_when_it_answers_again(tmp_path: Path) -> None:
    """A NaN estimate while the drive is held for lost (SIGSTOP, error 3): heard again, the axis shows the loop's
    error 8, not STANDBY (ci56: it went unseen). Meanwhile ``sys.status`` shows the drive's fault (its heartbeat's
    silence) or 8 (the estimates' silence was seen first, and the NaN is an estimate heard: ci68) until the loop's
    own silence covers it again."""
    with rig(tmp_path) as r:
        r.up()
        stranger = Listener(r.iface)
        r.plant_proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: r.servo()["error"] == 3, timeout=30, what="drive lost")
            faults = _fb_faults(r)
            _frame(stranger, cs.GET_ENCODER_ESTIMATES, cs.pack_floats(math.nan, math.nan))
            wait_for(lambda: _fb_faults(r) > faults, timeout=30, what="the NaN distrusted (sys.events)")
            time.sleep(1.0)  # Silent past the feedback timeout (0.5 s) after the NaN: the loop's drive-lost covers it.
        finally:
            r.plant_proc.send_signal(signal.SIGCONT)
            stranger.close()
        s = wait_for(lambda: ((s := r.servo())["error"] != 3 or s["state"] != "error") and s, timeout=30,
                     what="the drive heard again")
        assert s["error"] == 8 and s["state"] == "error", s
