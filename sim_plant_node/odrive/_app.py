"""``sim-plant --odrive NODE_ID --can IFACE``: the simulated joint as an ODrive (CAN Simple protocol, firmware 0.6).

:class:`Emulator` owns the parts (the joint's stepping thread, the CAN bus, a receive thread answering frames for
its node-ID, a cyclic thread sending the heartbeat, the encoder estimates and the torques at their configured
periods and running the watchdog) with an idempotent start/close and context-manager use, so tests can run it
in-process; :func:`run` is the command: registers from the register file and the environment, then the emulator
until SIGINT/SIGTERM.

=====================================  =========  ========  ===================================================
Register                               Type       Default   Meaning
=====================================  =========  ========  ===================================================
``sim.odrive.units_per_turn``          real64     2π        joint units (rad or m) per turn of the ODrive's
                                                            position; torque at the shaft = force·this/2π
``sim.odrive.pos_gain``                real64     20        ``controller.config.pos_gain`` [(turn/s)/turn]
``sim.odrive.heartbeat_msg_rate_ms``   real64     100       heartbeat period [ms] (0: off)
``sim.odrive.encoder_msg_rate_ms``     real64     10        Get_Encoder_Estimates period [ms] (0: off)
``sim.odrive.torques_msg_rate_ms``     real64     0         Get_Torques period [ms] (0: off)
``sim.odrive.watchdog_timeout``        real64     0         > 0: the watchdog enabled at boot with this timeout
                                                            [s] (as saved with odrivetool); 0: disabled until a
                                                            master enables it through its endpoints
=====================================  =========  ========  ===================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

import can

from cyphal_common import odrive as cs
from cyphal_common.collector import collect_all, freeze_alive
from cyphal_common.transport import open_can_bus
from sim_plant import Joint, JointParams

from .._plant import Plant
from ._axis import OdriveAxis

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterSpec

_logger = logging.getLogger(__name__)

FAULT_AFTER_ENV = "SIM_PLANT_ODRIVE_FAULT_AFTER"
"""Environment variable (seconds, > 0): raise CURRENT_LIMIT_VIOLATION that long after the axis first enters closed
loop, once per process. For tests; not a register, so it never persists."""

TICK_S = 0.005
"""Longest sleep of the cyclic thread: the watchdog's resolution [second]."""

DEFAULTS: dict[str, float] = {
    "sim.odrive.units_per_turn": 2.0 * math.pi,
    "sim.odrive.pos_gain": 20.0,
    "sim.odrive.heartbeat_msg_rate_ms": 100.0,
    "sim.odrive.encoder_msg_rate_ms": 10.0,
    "sim.odrive.torques_msg_rate_ms": 0.0,
    "sim.odrive.watchdog_timeout": 0.0,
}


def endpoints() -> dict[str, Any]:
    """The emulator's ``flat_endpoints.json`` (fw_version, hw_version, endpoints: path → id, type)."""
    return dict(json.loads(resources.files(__package__).joinpath("flat_endpoints.json").read_text()))


def odrive_specs() -> Mapping[str, RegisterSpec]:
    """The ``sim.odrive.*`` registers (imports ``pycyphal.application``: compile the DSDL first)."""
    from cyphal_common.registers import RegisterSpec, real64, scalar

    def ms(x: float) -> bool:
        return x == int(x) and 0 <= x <= 60_000

    checks = {
        "sim.odrive.units_per_turn": scalar(lambda x: x != 0.0, "≠ 0 [unit/turn]"),
        "sim.odrive.pos_gain": scalar(lambda x: x >= 0.0, "≥ 0 [1/s]"),
        "sim.odrive.heartbeat_msg_rate_ms": scalar(ms, "whole ms, 0..60000"),
        "sim.odrive.encoder_msg_rate_ms": scalar(ms, "whole ms, 0..60000"),
        "sim.odrive.torques_msg_rate_ms": scalar(ms, "whole ms, 0..60000"),
        "sim.odrive.watchdog_timeout": scalar(lambda x: 0.0 <= x <= 60.0, "in [0, 60] s"),
    }
    return {name: RegisterSpec(real64(DEFAULTS[name]), check) for name, check in checks.items()}


def initial_config(values: Mapping[str, float]) -> dict[str, Any]:
    """The axis's configuration endpoints from the ``sim.odrive.*`` values (missing ones: defaults)."""
    v = {**DEFAULTS, **values}
    return {
        "units_per_turn": v["sim.odrive.units_per_turn"],
        "axis0.controller.config.control_mode": int(cs.ControlMode.POSITION_CONTROL),  # The firmware's defaults.
        "axis0.controller.config.input_mode": int(cs.InputMode.PASSTHROUGH),
        "axis0.controller.config.pos_gain": v["sim.odrive.pos_gain"],
        "axis0.config.can.heartbeat_msg_rate_ms": int(v["sim.odrive.heartbeat_msg_rate_ms"]),
        "axis0.config.can.encoder_msg_rate_ms": int(v["sim.odrive.encoder_msg_rate_ms"]),
        "axis0.config.can.torques_msg_rate_ms": int(v["sim.odrive.torques_msg_rate_ms"]),
        "axis0.config.enable_watchdog": v["sim.odrive.watchdog_timeout"] > 0.0,
        "axis0.config.watchdog_timeout": v["sim.odrive.watchdog_timeout"],
    }


def fault_after_from_env(env: Mapping[str, str]) -> float:
    """Seconds of :data:`FAULT_AFTER_ENV` (0: unset). :raises ValueError: not a positive number."""
    text = env.get(FAULT_AFTER_ENV, "").strip()
    if not text:
        return 0.0
    value = float(text)
    if not value > 0.0:
        raise ValueError(f"{FAULT_AFTER_ENV} must be a positive number of seconds, got {text!r}")
    return value


class Emulator:
    """One emulated ODrive axis on a CAN bus. Start once, close any number of times."""

    def __init__(self, params: JointParams, node_id: int, iface: str, *, values: Mapping[str, float] | None = None,
                 step_rate: float = 1000.0, fault_after: float = 0.0) -> None:
        """Describe the emulator (``values``: ``sim.odrive.*`` by name); nothing is opened before :meth:`start`."""
        if not 0 <= node_id <= cs.NODE_ID_MAX:
            raise ValueError(f"ODrive node-ID must be 0..{cs.NODE_ID_MAX}, got {node_id}")
        self.params = params
        self.node_id = node_id
        self.iface = iface
        self._config = initial_config(values or {})
        self._step_rate = step_rate
        self._fault_after = fault_after
        self.plant: Plant | None = None
        self.axis: OdriveAxis | None = None
        self._bus: can.BusABC | None = None
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False
        self.sent = 0
        """Frames sent so far."""

    def start(self) -> Emulator:
        """Compile/load the joint's kernels, open the bus, start answering and the cyclic frames. Idempotent."""
        if self._started:
            return self
        self._started = True
        try:
            self._bus = open_can_bus(self.iface)  # First: a bad iface fails before the (possibly slow) warm-up.
            Joint.warm_up(self.params)
            self.plant = Plant(self.params, self._step_rate)
            self.axis = OdriveAxis(self.plant, endpoints()["endpoints"], self._config, self._fault_after)
            self.plant.start()
            for target, name in ((self._receive, "odrive-rx"), (self._cyclic, "odrive-cyclic")):
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.close()
            raise
        _logger.info("ODrive up: node %d on %s, %s joint %s", self.node_id, self.iface, self.params.kind,
                     self.params)
        return self

    def send(self, command: int, data: bytes) -> None:
        """One frame from this axis (a full socket loses it, as a busy controller would)."""
        bus = self._bus
        if bus is None:
            return
        msg = can.Message(arbitration_id=cs.arbitration_id(self.node_id, command), data=data, is_extended_id=False)
        try:
            with self._send_lock:
                bus.send(msg)
            self.sent += 1
        except (can.CanError, OSError) as ex:
            _logger.debug("send failed: %s", ex)

    def _receive(self) -> None:
        bus, axis = self._bus, self.axis
        assert bus is not None and axis is not None
        while not self._stop.is_set():
            try:
                msg = bus.recv(0.1)
            except (can.CanError, OSError, ValueError):
                if self._stop.is_set():
                    return
                time.sleep(0.01)
                continue
            if msg is None or msg.is_extended_id or msg.is_error_frame:
                continue
            node, command = cs.split_id(msg.arbitration_id)
            if node != self.node_id:
                continue
            for answer, data in axis.handle(command, bytes(msg.data), msg.is_remote_frame):
                self.send(answer, data)

    def _cyclic(self) -> None:
        axis = self.axis
        assert axis is not None
        streams = ((cs.HEARTBEAT, "heartbeat", axis.heartbeat),
                   (cs.GET_ENCODER_ESTIMATES, "encoder", axis.estimates),
                   (cs.GET_TORQUES, "torques", axis.torques))
        due = {command: time.monotonic() for command, _, _ in streams}
        logged = -math.inf
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                axis.tick(now)
                for command, which, payload in streams:
                    period = axis.rate_ms(which) * 1e-3
                    if period <= 0.0:
                        due[command] = math.inf  # Off.
                        continue
                    if math.isinf(due[command]):
                        due[command] = now  # Switched on: at once.
                    if now >= due[command]:
                        self.send(command, payload(due[command]))  # The state at the timer's instant.
                        due[command] = max(due[command] + period, now - period)  # No burst after a stall.
            except Exception:  # Never let the cyclic frames end silently: log (at most 1/s) and keep going.
                if time.monotonic() - logged >= 1.0:
                    logged = time.monotonic()
                    _logger.exception("Cyclic frames failed")
            wait = min([TICK_S, *(d - time.monotonic() for d in due.values())])
            self._stop.wait(max(0.0, wait))

    def close(self) -> None:
        """Stop the threads, leave the bus, stop the joint. Idempotent."""
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)
        self._threads = []
        if self._bus is not None:
            bus, self._bus = self._bus, None
            with contextlib.suppress(Exception):
                bus.shutdown()
        if self.plant is not None:
            self.plant.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()


async def run(registry_file: str | None, fresh_registry: bool, node_id: int, iface: str) -> int:
    """Run the emulated ODrive until SIGINT/SIGTERM; returns the exit status (2: invalid configuration)."""
    from cyphal_common.registers import ValidatingRegistry, declare

    from .._app import SPECS, load_config
    from .._startup import open_configured

    registers = odrive_specs()

    def configure(registry: ValidatingRegistry) -> Emulator:
        config = load_config(registry)
        declare(registry, registers)
        values = {name: float(registry[name].floats[0]) for name in registers}
        return Emulator(config.params, node_id, iface, values=values, step_rate=config.step_rate,
                        fault_after=fault_after_from_env(os.environ))

    opened = open_configured(registry_file, fresh_registry, {**SPECS, **registers}, configure)
    if opened is None:
        return 2
    registry, emulator = opened
    registry.close()  # Read once: the emulator serves its own endpoints, not these registers.
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    collect_all()  # Before its threads start: its frames come from them.
    try:
        await loop.run_in_executor(None, emulator.start)
    except ValueError as ex:  # A malformed or unopenable CAN iface.
        print(f"sim-plant: {ex}", file=sys.stderr)
        return 2
    freeze_alive()
    try:
        await stop.wait()
    finally:
        emulator.close()
    return 0
