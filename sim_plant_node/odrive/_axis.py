"""The emulated ODrive axis: CAN Simple frames in, the simulated joint commanded, answers and cyclic frames out.

No python-can here: :meth:`OdriveAxis.handle` takes a frame's command, payload and RTR flag and returns the frames
to answer; :meth:`OdriveAxis.tick` runs the watchdog and the fault injection; the cyclic payloads come from
:meth:`heartbeat`, :meth:`estimates` and :meth:`torques`. All methods are thread-safe (one lock).

What it does as firmware 0.6 does (ODrive's documentation and examples): IDLE (motor off, the joint coasts) and
CLOSED_LOOP_CONTROL; entering closed loop resets the inputs to the present position and zero velocity and torque;
PASSTHROUGH inputs (position held with its velocity feed-forward, velocity, torque); an error disarms the axis
(IDLE, procedure result DISARMED) and shows in the heartbeat's Axis_Error until Clear_Errors; a request for closed
loop with an error pending is refused; the watchdog (``axis0.config.enable_watchdog``, ``watchdog_timeout``) is fed
by Set_Axis_State and Set_Input_* (the messages ODrive's own CAN examples say feed it) and, expired in closed loop,
disarms with WATCHDOG_TIMER_EXPIRED. What it does its own way: the joint's velocity controller is ideal (Webots
semantics), so a torque feed-forward beside a velocity or a position acts as nothing more than what it already
achieves (it is reported in Get_Torques' target); the velocity and torque limits are the joint's
(``sim.max_velocity``, ``sim.max_force``), Set_Limits is not emulated; calibration requests succeed at once; input
modes other than PASSTHROUGH are taken as PASSTHROUGH (with a warning); the watchdog is checked in closed loop
only; endpoint IDs are this emulator's (``flat_endpoints.json``).
"""

from __future__ import annotations

import logging
import math
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

from cyphal_common import odrive as cs
from cyphal_common.odrive import AxisError, AxisState, ControlMode, InputMode, ProcedureResult

from .._plant import Command, Mode, Plant

_logger = logging.getLogger(__name__)

FIRMWARE = (0, 6, 10)
"""The firmware version this emulator answers Get_Version with (the version of the DBC its frames follow)."""
HARDWARE = (0, 0, 0)
"""Hardware version 0.0.0: no real board."""

CARRY_MAX_S = 0.02
"""Longest interval an estimate is carried over to its scheduled instant [second]."""

Frames = list[tuple[int, bytes]]


class OdriveAxis:
    """One ODrive axis around a :class:`~sim_plant_node._plant.Plant`."""

    def __init__(self, plant: Plant, endpoints: Mapping[str, Mapping[str, Any]], config: Mapping[str, Any],
                 fault_after: float = 0.0, fault_bits: int = int(AxisError.CURRENT_LIMIT_VIOLATION)) -> None:
        """``endpoints``: path → {id, type} (the emulator's ``flat_endpoints.json``); ``config``: initial values of
        the configuration endpoints by path (``units_per_turn`` beside them: joint units per turn);
        ``fault_after``: seconds after the first closed loop at which ``fault_bits`` is raised (0: never)."""
        self._plant = plant
        self._lock = threading.RLock()
        self._upt = float(config["units_per_turn"])
        self._by_id = {int(e["id"]): (path, str(e["type"])) for path, e in endpoints.items()}
        self.values: dict[str, Any] = {path: config.get(path, 0) for path in endpoints}
        self.state = AxisState.IDLE
        self.result = ProcedureResult.SUCCESS
        self.active_errors = 0
        self.disarm_reason = 0
        self.input_pos = 0.0
        self.input_vel = 0.0
        self.input_torque = 0.0
        self._offset = 0.0  # Set_Absolute_Position: estimate = joint/units_per_turn + offset [turn]
        self._fed_at = time.monotonic()
        self._fault_after = fault_after
        self._fault_bits = fault_bits
        self._fault_at = math.nan
        self._warned: set[str] = set()
        self.feeds = 0
        """Watchdog feeds so far (tests)."""

    # ---------------------------------------------------------------- configuration (endpoints)

    def _cfg(self, name: str) -> Any:
        return self.values[name]

    @property
    def control_mode(self) -> int:
        return int(self._cfg("axis0.controller.config.control_mode"))

    @property
    def input_mode(self) -> int:
        return int(self._cfg("axis0.controller.config.input_mode"))

    def rate_ms(self, which: str) -> int:
        """``heartbeat``, ``encoder`` or ``torques``: the cyclic message period [ms] (0: off)."""
        return int(self._cfg(f"axis0.config.can.{which}_msg_rate_ms"))

    # ---------------------------------------------------------------- frames from the master

    def handle(self, command: int, data: bytes, rtr: bool) -> Frames:
        """A frame addressed to this axis; returns the frames to send back."""
        with self._lock:
            if rtr or (not data and command in _GETTERS):
                return self._answer(command)
            if command in (cs.SET_AXIS_STATE, cs.SET_INPUT_POS, cs.SET_INPUT_VEL, cs.SET_INPUT_TORQUE):
                self._feed()
            try:
                return self._command(command, data)
            except (ValueError, struct.error) as ex:  # A malformed frame changes nothing.
                self._warn(f"malformed {cs.COMMAND_NAMES.get(command, command)}: {ex}")
                return []

    def _command(self, command: int, data: bytes) -> Frames:
        if command == cs.SET_AXIS_STATE:
            self._request_state(struct.unpack_from("<I", data)[0])
        elif command == cs.SET_CONTROLLER_MODE:
            control, inp = struct.unpack_from("<II", data)
            self.values["axis0.controller.config.control_mode"] = ControlMode(control)
            self.values["axis0.controller.config.input_mode"] = InputMode(inp)
            if inp not in (InputMode.PASSTHROUGH, InputMode.INACTIVE):
                self._warn(f"input mode {InputMode(inp).name} is emulated as PASSTHROUGH")
            self._apply()
        elif command == cs.SET_INPUT_POS:
            self.input_pos, self.input_vel, self.input_torque = cs.unpack_input_pos(data)
            self._apply()
        elif command == cs.SET_INPUT_VEL:
            self.input_vel, self.input_torque = cs.unpack_floats(data)
            self._apply()
        elif command == cs.SET_INPUT_TORQUE:
            self.input_torque = cs.unpack_float(data)
            self._apply()
        elif command == cs.CLEAR_ERRORS:
            self.active_errors = self.disarm_reason = 0
        elif command == cs.ESTOP:
            self._disarm(int(AxisError.ESTOP_REQUESTED))
        elif command == cs.SET_ABSOLUTE_POSITION:
            self._offset = cs.unpack_float(data) - self._plant.sample().position / self._upt
        elif command == cs.RX_SDO:
            return self._sdo(data)
        elif command not in _GETTERS and command != cs.TX_SDO:
            self._warn(f"{cs.COMMAND_NAMES.get(command, hex(command))} is not emulated")
        return []

    def _request_state(self, requested: int) -> None:
        if requested == AxisState.CLOSED_LOOP_CONTROL:
            if self.active_errors or self.disarm_reason:
                self.result = ProcedureResult.DISARMED  # Refused: an error is pending until Clear_Errors.
                return
            if self.state != AxisState.CLOSED_LOOP_CONTROL:
                p = self._position_turns()
                self.input_pos, self.input_vel, self.input_torque = p, 0.0, 0.0  # No transient on entry.
                self.state, self.result = AxisState.CLOSED_LOOP_CONTROL, ProcedureResult.BUSY
                if math.isnan(self._fault_at) and self._fault_after > 0.0:
                    self._fault_at = time.monotonic() + self._fault_after
            self._apply()
        elif requested == AxisState.IDLE:
            if self.state == AxisState.CLOSED_LOOP_CONTROL:
                self.result = ProcedureResult.CANCELLED
            self.state = AxisState.IDLE
            self._plant.passive()
        elif requested in (AxisState.FULL_CALIBRATION_SEQUENCE, AxisState.MOTOR_CALIBRATION,
                           AxisState.ENCODER_OFFSET_CALIBRATION, AxisState.STARTUP_SEQUENCE):
            if self.state != AxisState.CLOSED_LOOP_CONTROL:
                self.result = ProcedureResult.SUCCESS  # The simulated motor needs no calibration.
        else:
            self.result = ProcedureResult.INVALID_STATE

    def _apply(self) -> None:
        """The present inputs to the joint (closed loop only; IDLE keeps the motor off)."""
        if self.state != AxisState.CLOSED_LOOP_CONTROL:
            return
        p = self._plant.params
        upt = self._upt
        v_max = p.max_velocity  # The ODrive's vel_limit: the joint's own (sim.max_velocity).
        mode = self.control_mode
        if self.input_mode == InputMode.INACTIVE:
            mode = -1
        if mode == ControlMode.POSITION_CONTROL:
            target = (self.input_pos - self._offset) * upt
            gain = float(self._cfg("axis0.controller.config.pos_gain"))
            v_ff = max(-v_max, min(v_max, self.input_vel * upt))
            self._plant.track(target, v_ff, 0.0, gain, p.max_force, math.inf, hold=True)
        elif mode == ControlMode.VELOCITY_CONTROL:
            v = max(-v_max, min(v_max, self.input_vel * upt))
            self._plant.apply(Command(Mode.VELOCITY, target_position=math.inf, velocity=v, motor_force=p.max_force))
        elif mode == ControlMode.TORQUE_CONTROL:
            f = self.input_torque * 2.0 * math.pi / upt  # Power kept: τ·2π·n = F·upt·n.
            self._plant.apply(Command(Mode.FORCE, motor_force=p.max_force, force=max(-p.max_force,
                                                                                     min(f, p.max_force))))
        else:  # Voltage control, or INACTIVE inputs: no torque.
            self._plant.apply(Command(Mode.FORCE, motor_force=p.max_force, force=0.0))

    def _sdo(self, data: bytes) -> Frames:
        opcode, endpoint, raw = cs.unpack_sdo(data)
        found = self._by_id.get(endpoint)
        if found is None:
            self._warn(f"RxSdo for unknown endpoint {endpoint}")
            return []
        path, kind = found
        fmt = cs.SDO_FORMATS[kind]
        if opcode == cs.SDO_WRITE:
            (value,) = struct.unpack_from("<" + fmt, raw)
            self._write(path, value)
            return []  # Firmware 0.6.10 confirms no write (0.6.11 does).
        return [(cs.TX_SDO, cs.pack_sdo(0, endpoint, fmt, self._read(path)))]

    def _write(self, path: str, value: Any) -> None:
        self.values[path] = value
        if path == "axis0.config.enable_watchdog" and value:
            self._feed()
        elif path in ("axis0.controller.config.control_mode", "axis0.controller.config.input_mode",
                      "axis0.controller.config.pos_gain"):
            self._apply()

    def _read(self, path: str) -> Any:
        if path == "axis0.active_errors":
            return self.active_errors
        if path == "axis0.disarm_reason":
            return self.disarm_reason
        if path == "axis0.current_state":
            return int(self.state)
        return self.values[path]

    # ---------------------------------------------------------------- answers and cyclic frames

    def _answer(self, command: int) -> Frames:
        if command == cs.GET_VERSION:
            return [(command, cs.pack_version(2, HARDWARE, FIRMWARE, 0))]
        if command == cs.HEARTBEAT:
            return [(command, self.heartbeat())]
        if command == cs.GET_ERROR:
            return [(command, struct.pack("<II", self.active_errors, self.disarm_reason))]
        if command == cs.GET_ENCODER_ESTIMATES:
            return [(command, self.estimates())]
        if command == cs.GET_TORQUES:
            return [(command, self.torques())]
        if command == cs.GET_BUS_VOLTAGE_CURRENT:
            return [(command, cs.pack_floats(24.0, 0.0))]
        return []

    def heartbeat(self, at: float | None = None) -> bytes:
        """Axis_Error (active errors | disarm reason), state, procedure result, trajectory done (always: no
        trajectory is run)."""
        with self._lock:
            return cs.pack_heartbeat(self.active_errors | self.disarm_reason, self.state, self.result, True)

    def estimates(self, at: float | None = None) -> bytes:
        """Position [turn] and velocity [turn/s] of the joint now, or carried to ``at`` (monotonic; the instant the
        timer of a real drive would have sampled it, however late this thread runs)."""
        s = self._plant.sample()
        dt = 0.0 if at is None else max(-CARRY_MAX_S, min(CARRY_MAX_S, at - s.monotonic))
        with self._lock:
            return cs.pack_floats((s.position + s.velocity * dt) / self._upt + self._offset, s.velocity / self._upt)

    def torques(self, at: float | None = None) -> bytes:
        """Torque target (the input or feed-forward) and estimate [N·m] (the joint's force at the shaft)."""
        s = self._plant.sample()
        with self._lock:
            return cs.pack_floats(self.input_torque, s.force * self._upt / (2.0 * math.pi))

    # ---------------------------------------------------------------- time

    def tick(self, now: float) -> None:
        """The watchdog (closed loop only) and the injected fault."""
        with self._lock:
            if self.state != AxisState.CLOSED_LOOP_CONTROL:
                return
            timeout = float(self._cfg("axis0.config.watchdog_timeout"))
            if self._cfg("axis0.config.enable_watchdog") and timeout > 0.0 and now - self._fed_at > timeout:
                _logger.warning("Watchdog expired (%.3g s without a feed, timeout %g s): disarmed",
                                now - self._fed_at, timeout)
                self._disarm(int(AxisError.WATCHDOG_TIMER_EXPIRED))
            elif now >= self._fault_at:
                self._fault_at = math.inf  # Once per process.
                _logger.warning("Injected fault %s", cs.error_names(self._fault_bits))
                self._disarm(self._fault_bits)

    def _feed(self) -> None:
        self._fed_at = time.monotonic()
        self.feeds += 1

    def _disarm(self, bits: int) -> None:
        self.disarm_reason |= bits
        if self.state == AxisState.CLOSED_LOOP_CONTROL:
            self.result = ProcedureResult.DISARMED
        self.state = AxisState.IDLE
        self._plant.passive()

    def _position_turns(self) -> float:
        return self._plant.sample().position / self._upt + self._offset

    def _warn(self, text: str) -> None:
        if text not in self._warned and len(self._warned) < 64:
            self._warned.add(text)
            _logger.warning("%s", text)


_GETTERS = frozenset({cs.GET_VERSION, cs.HEARTBEAT, cs.GET_ERROR, cs.GET_ENCODER_ESTIMATES, cs.GET_IQ,
                      cs.GET_TEMPERATURE, cs.GET_BUS_VOLTAGE_CURRENT, cs.GET_TORQUES, cs.GET_POWERS})
"""Messages a master requests (RTR or an empty data frame) and the drive answers."""
