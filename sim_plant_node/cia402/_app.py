"""``sim-plant --canopen NODE_ID --can IFACE``: the simulated joint as a CiA 402 drive on a CANopen bus.

:class:`Emulator` owns the parts (plant thread, CAN bus, canopen network, :class:`~._node.DriveNode`, a
housekeeping thread) with an idempotent start/close and context-manager use, so that tests can run it in-process on
a ``virtual:`` bus; :func:`run` is the command: registers from the register file and the environment, then the
emulator until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import can
import canopen

from cyphal_common.transport import open_can_bus
from sim_plant import Joint, JointParams

from .._plant import Plant
from . import _objects as ob
from ._drive import Cia402Drive
from ._node import DriveNode

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterSpec

_logger = logging.getLogger(__name__)

FAULT_AFTER_ENV = "SIM_PLANT_CANOPEN_FAULT_AFTER"
"""Environment variable (seconds, > 0): inject an over-current fault (EMCY 0x2310) that long after the drive first
enters OPERATION ENABLED, once per process. For tests; not a register, so it never persists."""

FIXED_MAPPING_ENV = "SIM_PLANT_CANOPEN_FIXED_PDO_MAPPING"
"""Environment variable (1): the PDO mapping parameters are read-only (a master's remapping is aborted), as on
drives with a fixed mapping; the EDS defaults stay. For tests; not a register."""

COUNTS_PER_UNIT = "sim.canopen.counts_per_unit"
DEFAULT_COUNTS_PER_UNIT = 10000.0
"""Position increments per unit (velocity: increments/s per unit/s); the servo's
``servo.drive.canopen.counts_per_unit`` has the same default."""


def canopen_specs() -> Mapping[str, RegisterSpec]:
    """Registers of the CANopen face beside the joint's ``sim.*`` (imports ``pycyphal.application``: compile the
    DSDL first)."""
    from cyphal_common.registers import RegisterSpec, real64, scalar

    check = scalar(lambda x: x > 0.0, "> 0 [increments per rad or m]")
    return {COUNTS_PER_UNIT: RegisterSpec(real64(DEFAULT_COUNTS_PER_UNIT), check)}


TICK_S = 0.005
"""Period of the housekeeping thread (supervision, heartbeat consumer, event-driven TPDOs, the no-SYNC cycle)."""

NOTIFIER_CYCLE_S = 0.1
"""Receive-thread poll period of the canopen network (canopen's 1 s default would make every close last 1 s)."""

_SCALED_DEFAULTS = (ob.FOLLOWING_ERROR_WINDOW, ob.POSITION_WINDOW, ob.VELOCITY_WINDOW)
"""Objects whose EDS default is in increments at the default 10000 increments per unit: rescaled to the register."""


def drive_defaults(
    od: Any, params: JointParams, counts_per_unit: float, quick_stop_deceleration: float
) -> dict[int, int]:
    """Initial values of the drive objects: the EDS defaults, in increments of ``counts_per_unit``, the
    decelerations from ``sim.quick_stop_deceleration``, the rated torque (0x6076, mN·m or mN) = ``sim.max_force``."""
    values = {i: int(od[i].default or 0) for i in ob.DRIVE_OBJECTS}
    scale = counts_per_unit / 10000.0
    for i in _SCALED_DEFAULTS:
        values[i] = max(1, round(values[i] * scale))
    decel = max(1, round(quick_stop_deceleration * counts_per_unit))
    values[ob.QUICK_STOP_DECELERATION] = values[ob.PROFILE_DECELERATION] = decel
    values[ob.RATED_TORQUE] = max(1, round(params.max_force * 1000.0))
    return values


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
    """One emulated CiA 402 drive on a CAN bus: joint, drive, CANopen node. Start once, close any number of times."""

    def __init__(
        self,
        params: JointParams,
        node_id: int,
        iface: str,
        *,
        counts_per_unit: float = DEFAULT_COUNTS_PER_UNIT,
        quick_stop_deceleration: float = 50.0,
        step_rate: float = 1000.0,
        fault_after: float = 0.0,
        fixed_mapping: bool = False,
    ) -> None:
        """Describe the emulator; nothing is opened before :meth:`start`."""
        if not 1 <= node_id <= 127:
            raise ValueError(f"CANopen node-ID must be 1..127, got {node_id}")
        self.params = params
        self.node_id = node_id
        self.iface = iface
        self._cpu = counts_per_unit
        self._qsd = quick_stop_deceleration
        self._step_rate = step_rate
        self._fault_after = fault_after
        self._fixed_mapping = fixed_mapping
        self.plant: Plant | None = None
        self.drive: Cia402Drive | None = None
        self.node: DriveNode | None = None
        self.network: canopen.Network | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bus: can.BusABC | None = None
        self._started = False

    def start(self) -> Emulator:
        """Compile/load the joint's kernels, open the bus, boot the node (boot-up, PRE-OPERATIONAL). Idempotent."""
        if self._started:
            return self
        self._started = True
        try:
            self._bus = open_can_bus(self.iface)  # First: a bad iface fails before the (possibly slow) warm-up.
            Joint.warm_up(self.params)
            self.plant = Plant(self.params, self._step_rate)
            with ob.eds_path() as eds:
                od = canopen.import_od(str(eds), self.node_id)
            node_ref: list[DriveNode] = []

            def emcy(code: int, register: int) -> None:
                if node_ref and node_ref[0].has_network():
                    if code:
                        node_ref[0].emcy.send(code, register)
                    else:
                        node_ref[0].emcy.reset(register)

            defaults = drive_defaults(od, self.params, self._cpu, self._qsd)
            self.drive = Cia402Drive(self.plant, defaults, self._cpu, emcy, self._fault_after)
            self.node = DriveNode(self.node_id, od, self.drive, self._fixed_mapping)
            node_ref.append(self.node)
            self.network = canopen.Network(self._bus)
            self.network.NOTIFIER_CYCLE = NOTIFIER_CYCLE_S
            self.network[self.node_id] = self.node
            self.network.connect()
            self.plant.start()
            self.node.boot()
            self.drive.ready()
            self._thread = threading.Thread(target=self._housekeeping, name="cia402-housekeeping", daemon=True)
            self._thread.start()
        except BaseException:
            self.close()
            raise
        _logger.info(
            "CiA 402 drive up: node %d on %s, %s joint %s", self.node_id, self.iface, self.params.kind, self.params
        )
        return self

    def _housekeeping(self) -> None:
        node = self.node
        assert node is not None
        logged = -math.inf
        while not self._stop.wait(TICK_S):
            try:
                node.tick()
            except Exception:  # A bus error must not silently end supervision: log (at most 1/s) and keep going.
                if time.monotonic() - logged >= 1.0:
                    logged = time.monotonic()
                    _logger.exception("Housekeeping failed")

    def close(self) -> None:
        """Stop housekeeping, leave the bus, stop the joint. Idempotent."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None
        if self.node is not None and self.node.has_network():
            with contextlib.suppress(Exception):
                self.node.shutdown()
        if self.network is not None:
            network, self.network = self.network, None
            with contextlib.suppress(Exception):
                network.disconnect()  # Shuts the bus down too.
        elif self._bus is not None:
            with contextlib.suppress(Exception):
                self._bus.shutdown()
        self._bus = None
        if self.plant is not None:
            self.plant.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()


async def run(registry_file: str | None, fresh_registry: bool, node_id: int, iface: str) -> int:
    """Run the emulated drive until SIGINT/SIGTERM; returns the exit status (2: invalid configuration)."""
    from cyphal_common.registers import ValidatingRegistry, declare

    from .._app import SPECS, load_config
    from .._startup import open_configured

    canopen_registers = canopen_specs()
    specs = {**SPECS, **canopen_registers}
    def configure(registry: ValidatingRegistry) -> Emulator:
        config = load_config(registry)
        declare(registry, canopen_registers)
        return Emulator(
            config.params,
            node_id,
            iface,
            counts_per_unit=float(registry[COUNTS_PER_UNIT].floats[0]),
            quick_stop_deceleration=config.quick_stop_deceleration,
            step_rate=config.step_rate,
            fault_after=fault_after_from_env(os.environ),
            fixed_mapping=os.environ.get(FIXED_MAPPING_ENV, "").strip() == "1",
        )

    opened = open_configured(registry_file, fresh_registry, specs, configure)
    if opened is None:
        return 2
    registry, emulator = opened
    registry.close()  # Read once: the emulator serves its own object dictionary, not these registers.
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await loop.run_in_executor(None, emulator.start)
    except ValueError as ex:  # A malformed or unopenable CAN iface.
        print(f"sim-plant: {ex}", file=sys.stderr)
        return 2
    try:
        await stop.wait()
    finally:
        emulator.close()
    return 0
