"""Our emulated ODrive driven by the CAN Simple protocol as others wrote it: ODrive's published DBC (firmware
0.6.10, as the ``odrive-can`` package ships it) read by ``cantools``, and the ``odrive-can`` package's own asyncio
client. The emulator runs in this process on a ``udpmc:`` bus; nothing here uses our codec."""

from __future__ import annotations

import asyncio
import math
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from sim_plant import JointParams
from sim_plant_node.odrive import Emulator, endpoints
from tests.odrive.rig import DRIVE_ID, Listener, iface
from tests.procs import wait_for

PARAMS = JointParams(max_velocity=50.0, max_force=500.0, inertia=1.0)


@contextmanager
def emulated(**values: float) -> Iterator[tuple[Emulator, Listener]]:
    bus = iface()
    with Emulator(PARAMS, DRIVE_ID, bus, values=values) as em:
        listener = Listener(bus)
        try:
            wait_for(lambda: listener.heartbeat is not None and listener.estimates is not None, timeout=30,
                     what="the emulator's cyclic frames")
            yield em, listener
        finally:
            listener.close()


def _estimates(listener: Listener) -> tuple[float, float]:
    e = listener.estimates
    assert e is not None
    return float(e["Pos_Estimate"]), float(e["Vel_Estimate"])


def test_dbc_frames_drive_every_mode_and_the_heartbeat_says_so() -> None:
    """Each frame built from the DBC does what the protocol says: closed loop, velocity [turn/s], position with
    its feed-forwards (int16 thousandths), torque [N·m]; IDLE cancels; Get_Version answers an RTR."""
    with emulated() as (_, ln):
        assert ln.state() == "IDLE" and ln.error() == "NONE"
        ln.send("Get_Version", rtr=True)
        wait_for(lambda: any(n == "Get_Version" for _, n, _ in ln.frames), timeout=30, what="Get_Version's answer")
        version = next(d for _, n, d in ln.frames if n == "Get_Version")
        assert (version["Fw_Version_Major"], version["Fw_Version_Minor"], version["Fw_Version_Revision"]) == (0, 6, 10)

        ln.send("Set_Controller_Mode", Control_Mode="VELOCITY_CONTROL", Input_Mode="PASSTHROUGH")
        ln.send("Set_Axis_State", Axis_Requested_State="CLOSED_LOOP_CONTROL")
        wait_for(lambda: ln.state() == "CLOSED_LOOP_CONTROL", timeout=30, what="closed loop")
        assert str(ln.heartbeat["Procedure_Result"]) == "BUSY"  # type: ignore[index]
        ln.send("Set_Input_Vel", Input_Vel=1.5, Input_Torque_FF=0.0)
        wait_for(lambda: abs(_estimates(ln)[1] - 1.5) < 1e-3, timeout=30, what="1.5 turn/s")
        since = time.monotonic()
        wait_for(lambda: sum(1 for t, n, _ in list(ln.frames) if t > since and n == "Get_Encoder_Estimates") >= 40,
                 timeout=30, what="40 estimates")
        # Pos_Estimate advances at 1.5 turn/s on the frames' receipt instants. The slope is the median over pairs of
        # frames half the record apart: a frame a starved thread sent late moves a few pairs, not the verdict.
        record = [(t, float(d["Pos_Estimate"])) for t, n, d in list(ln.frames) if t > since
                  and n == "Get_Encoder_Estimates"]
        half = len(record) // 2
        pairs = zip(record, record[half:], strict=False)
        slopes = sorted((p1 - p0) / (t1 - t0) for (t0, p0), (t1, p1) in pairs if t1 > t0)
        assert slopes and 0.9 * 1.5 < slopes[len(slopes) // 2] < 1.1 * 1.5, slopes

        ln.send("Set_Controller_Mode", Control_Mode="POSITION_CONTROL", Input_Mode="PASSTHROUGH")
        ln.send("Set_Input_Pos", Input_Pos=2.0, Vel_FF=0.0, Torque_FF=0.0)
        wait_for(lambda: abs(_estimates(ln)[0] - 2.0) < 1e-3 and abs(_estimates(ln)[1]) < 1e-3, timeout=30,
                 what="held at 2 turns")
        ln.send("Set_Input_Pos", Input_Pos=2.0, Vel_FF=0.25, Torque_FF=0.0)  # A velocity feed-forward held…
        # …against the position gain (20/s): v_ff + 20·(2 − p) = v settles at p = 2 + 0.25/20, v = 0.
        wait_for(lambda: abs((e := _estimates(ln))[0] - (2.0 + 0.25 / 20.0)) < 2e-3 and abs(e[1]) < 0.01, timeout=30,
                 what="settled at 2 + 0.25/20 turns")

        ln.send("Set_Controller_Mode", Control_Mode="TORQUE_CONTROL", Input_Mode="PASSTHROUGH")
        ln.send("Set_Input_Torque", Input_Torque=-2.0)
        # −2 N·m on J = 1 kg·m²: −2 rad/s² ≈ −0.32 turn/s².
        wait_for(lambda: _estimates(ln)[1] < -0.05, timeout=30, what="accelerating backwards")
        ln.send("Set_Axis_State", Axis_Requested_State="IDLE")
        wait_for(lambda: ln.state() == "IDLE", timeout=30, what="IDLE")
        assert str(ln.heartbeat["Procedure_Result"]) == "CANCELLED"  # type: ignore[index]


def test_watchdog_set_through_rxsdo_disarms_and_clear_errors_rearms() -> None:
    """RxSdo writes (DBC layout; the endpoint IDs of the emulator's flat_endpoints.json) enable a 0.5 s watchdog
    (a test process that is not real-time may stall for a tenth of a second while it feeds it);
    fed by Set_Input_Vel the axis stays in closed loop, silent it disarms with WATCHDOG_TIMER_EXPIRED; closed loop
    is refused until Clear_Errors, and granted after."""
    table = endpoints()["endpoints"]

    def write(ln: Listener, name: str, raw: int) -> None:
        ln.send("RxSdo", Opcode="WRITE", Endpoint_ID=table[name]["id"], Reserved=0, Value=raw)

    with emulated() as (_, ln):
        write(ln, "axis0.config.watchdog_timeout", struct.unpack("<I", struct.pack("<f", 0.5))[0])
        write(ln, "axis0.config.enable_watchdog", 1)
        ln.send("RxSdo", Opcode="READ", Endpoint_ID=table["axis0.config.watchdog_timeout"]["id"], Reserved=0, Value=0)
        wait_for(lambda: any(n == "TxSdo" for _, n, _ in ln.frames), timeout=30, what="TxSdo")
        raw = next(d for _, n, d in ln.frames if n == "TxSdo")["Value"]
        assert struct.unpack("<f", struct.pack("<I", raw))[0] == pytest.approx(0.5)
        ln.send("Set_Controller_Mode", Control_Mode="VELOCITY_CONTROL", Input_Mode="PASSTHROUGH")

        def feed(seconds: float) -> float:
            """Set_Input_Vel every 20 ms for ``seconds``; returns the longest gap between two feeds."""
            last = start = time.monotonic()
            gap = 0.0
            while (now := time.monotonic()) < start + seconds:
                ln.send("Set_Input_Vel", Input_Vel=0.5, Input_Torque_FF=0.0)
                gap, last = max(gap, now - last), now
                time.sleep(0.02)
            return gap

        for _ in range(3):  # Fed for 1.5 s (three timeouts), it stays in closed loop, unless this process stalled.
            ln.send("Set_Axis_State", Axis_Requested_State="CLOSED_LOOP_CONTROL")
            gap = feed(1.5)
            if ln.state() == "CLOSED_LOOP_CONTROL" and ln.error() == "NONE":
                break
            # Disarmed while fed: only a stall of this process (the feeder, the emulator's threads) excuses it.
            assert gap > 0.4, (gap, ln.state(), ln.error())
            ln.send("Clear_Errors", Identify=0)
            wait_for(lambda: ln.error() == "NONE", timeout=30, what="Clear_Errors after a stall")
        assert ln.state() == "CLOSED_LOOP_CONTROL" and ln.error() == "NONE"
        wait_for(lambda: ln.state() == "IDLE", timeout=30, what="the watchdog's disarm")
        assert ln.error() == "WATCHDOG_TIMER_EXPIRED"
        assert str(ln.heartbeat["Procedure_Result"]) == "DISARMED"  # type: ignore[index]
        ln.send("Set_Axis_State", Axis_Requested_State="CLOSED_LOOP_CONTROL")
        time.sleep(0.6)
        assert ln.state() == "IDLE"  # Refused while the error stands.
        ln.send("Clear_Errors", Identify=0)
        wait_for(lambda: ln.error() == "NONE", timeout=30, what="Clear_Errors")
        ln.send("Set_Axis_State", Axis_Requested_State="CLOSED_LOOP_CONTROL")

        def fed_in_closed_loop() -> bool:
            ln.send("Set_Input_Vel", Input_Vel=0.0, Input_Torque_FF=0.0)
            return ln.state() == "CLOSED_LOOP_CONTROL" and ln.error() == "NONE"

        wait_for(fed_in_closed_loop, timeout=30, interval=0.02, what="closed loop again")


def test_odrive_can_client_moves_the_emulator() -> None:
    """odrive-can's ``ODriveCAN`` (its own frames, its own reader thread) on our udpmc bus: closed loop (it waits for
    the heartbeat to say so), a velocity, then a position; its Estop is an error its check reports, Clear_Errors
    clears it."""
    from odrive_can import ODriveCAN
    from odrive_can.odrive import DriveError

    from cyphal_common.transport import open_can_bus

    bus = iface()

    async def until(predicate: Callable[[], object], what: str) -> None:
        """Wait (10 s at most) for what the drive reports: a fixed sleep then a look fails on a starved host."""
        try:
            async with asyncio.timeout(10.0):
                while not predicate():
                    await asyncio.sleep(0.01)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}; last estimates {seen[-3:]}") from None

    def raises_estop() -> bool:
        try:
            client.check_errors()
        except DriveError as ex:
            assert "ESTOP_REQUESTED" in str(ex), ex
            return True
        return False

    async def drive(client: ODriveCAN, seen: list[tuple[float, float]]) -> None:
        client.feedback_callback = lambda msg, _c: seen.append((msg.data["Pos_Estimate"], msg.data["Vel_Estimate"]))
        await client.start()
        client.check_errors()
        client.set_controller_mode("VELOCITY_CONTROL", "PASSTHROUGH")
        await client.set_axis_state("CLOSED_LOOP_CONTROL")
        client.set_input_vel(-1.0)
        await until(lambda: seen and seen[-1][1] == pytest.approx(-1.0, abs=1e-3), "velocity -1 turn/s")
        client.set_controller_mode("POSITION_CONTROL", "PASSTHROUGH")
        client.set_input_pos(0.5)
        await until(lambda: seen[-1][0] == pytest.approx(0.5, abs=1e-3), "position 0.5 turn")
        client._send_message("Estop")
        await until(raises_estop, "ESTOP_REQUESTED reported")
        client.clear_errors()
        await until(lambda: not raises_estop(), "the error cleared")
        client.check_errors()
        client.stop()

    with Emulator(PARAMS, DRIVE_ID, bus):
        client = ODriveCAN(DRIVE_ID, open_can_bus(bus))
        seen: list[tuple[float, float]] = []
        asyncio.run(asyncio.wait_for(drive(client, seen), 30))
        assert all(math.isfinite(p) and math.isfinite(v) for p, v in seen)
