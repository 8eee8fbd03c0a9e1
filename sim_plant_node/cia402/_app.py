"""``sim-plant --canopen NODE_ID --can IFACE [--eds FILE]``: the simulated joint as a CiA 402 drive on a CANopen bus,
with the object dictionary of the shipped EDS or of a real drive's EDS/DCF (:mod:`._profile`: its PDOs, modes,
units, identity and communication objects).

:class:`Emulator` owns the parts (plant thread, CAN bus, canopen network, :class:`~._node.DriveNode`, a
housekeeping thread) with an idempotent start/close and context-manager use, so that tests can run it in-process on
a ``virtual:`` bus; :func:`run` is the command: registers from the register file and the environment, then the
emulator until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import can
import canopen

from cyphal_common.collector import collect_all, freeze_alive
from cyphal_common.transport import open_can_bus
from sim_plant import Joint, JointParams

from .._plant import Plant
from . import _objects as ob
from . import _profile as pf
from ._drive import Cia402Drive
from ._guarding import GuardListener
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

BOOT_DELAY_ENV = "SIM_PLANT_CANOPEN_BOOT_DELAY"
"""Environment variable (seconds, > 0): the drive is silent that long after start (no SDO, no heartbeat, no
boot-up), as a drive that takes seconds to boot, then sends its boot-up message. For tests; not a register."""

FAULT_RESET_HOLD_ENV = "SIM_PLANT_CANOPEN_FAULT_RESET_HOLD"
"""Environment variable (seconds, > 0): a fault reset takes controlword bit 7 held set that long (a rising edge
alone does nothing), as on drives that need the edge held. For tests; not a register."""

SDO_DROP_ENV = "SIM_PLANT_CANOPEN_SDO_DROP"
"""Environment variable (N > 0): every N-th SDO request goes unanswered, as a drive too busy to answer on time (a
master's SDO timeout and retries are what carries it). For tests; not a register."""

LIMIT_SWITCHES_ENV = "SIM_PLANT_CANOPEN_LIMIT_SWITCHES"
"""Environment variable ``NEG POS`` (joint units): the negative and positive limit switch positions (homing 17/18,
0x60FD); default :data:`DEFAULT_LIMIT_SWITCHES`."""
DEFAULT_LIMIT_SWITCHES = (-1.0, 1.0)

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
    shipped: Any, params: JointParams, units: pf.Units, quick_stop_deceleration: float, od: Any = None
) -> dict[int, int]:
    """Initial values of the drive objects: the shipped EDS's defaults in the drive's units (``units``), the
    decelerations from ``sim.quick_stop_deceleration``; then the values another file (``od``) gives its objects;
    the rated torque (0x6076, mN·m or mN) is ``sim.max_force`` whatever the file says."""
    values = {i: int(shipped[i].default or 0) for i in ob.DRIVE_OBJECTS}
    for i in _SCALED_DEFAULTS:
        k = units.velocity if i == ob.VELOCITY_WINDOW else units.position
        values[i] = max(1, round(values[i] * k / 10000.0))
    decel = max(1, round(quick_stop_deceleration * units.velocity))
    values[ob.QUICK_STOP_DECELERATION] = values[ob.PROFILE_DECELERATION] = decel
    if od is not None and od is not shipped:
        for i in ob.DRIVE_OBJECTS:
            given = pf.value_of(od, i)
            if isinstance(given, int) and i not in (ob.SUPPORTED_DRIVE_MODES, ob.MODES_OF_OPERATION_DISPLAY):
                values[i] = given
    values[ob.RATED_TORQUE] = max(1, round(params.max_force * 1000.0))
    return values


def fault_after_from_env(env: Mapping[str, str], name: str = FAULT_AFTER_ENV) -> float:
    """Seconds of :data:`FAULT_AFTER_ENV` (or another such variable; 0: unset).

    :raises ValueError: not a positive number."""
    text = env.get(name, "").strip()
    if not text:
        return 0.0
    value = float(text)
    if not value > 0.0:
        raise ValueError(f"{name} must be a positive number of seconds, got {text!r}")
    return value


def switches_from_env(env: Mapping[str, str]) -> tuple[float, float]:
    """:data:`LIMIT_SWITCHES_ENV` (default :data:`DEFAULT_LIMIT_SWITCHES`). :raises ValueError: not NEG < POS."""
    text = env.get(LIMIT_SWITCHES_ENV, "").split()
    if not text:
        return DEFAULT_LIMIT_SWITCHES
    negative, positive = (float(x) for x in text)
    if not negative < positive:
        raise ValueError(f"{LIMIT_SWITCHES_ENV} must be two positions NEG < POS, got {' '.join(text)!r}")
    return negative, positive


def _dropping(on_request: Callable[[int, bytearray, float], None], every: int) -> Callable[..., None]:
    """``on_request`` that leaves every ``every``-th SDO request unanswered."""
    count = itertools.count(1)

    def on(can_id: int, data: bytearray, timestamp: float) -> None:
        if next(count) % every:
            on_request(can_id, data, timestamp)

    return on


def load_dictionary(path: str, node_id: int) -> Any:
    """A drive's EDS or DCF as canopen reads it.

    :raises ValueError: missing, unreadable or malformed (the message names the file)."""
    try:
        return canopen.import_od(path, node_id)
    except Exception as ex:  # canopen raises what its parsers raise: name the file whatever it was.
        raise ValueError(f"cannot load the object dictionary {path!r}: {ex}") from ex


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
        eds: str | None = None,
        boot_delay: float = 0.0,
        fault_reset_hold: float = 0.0,
        sdo_drop: int = 0,
        switches: tuple[float, float] = DEFAULT_LIMIT_SWITCHES,
    ) -> None:
        """Describe the emulator; nothing is opened before :meth:`start`. ``eds``: a drive's EDS or DCF to present
        (None: the shipped one); ``boot_delay``: silent that long before its boot-up [second];
        ``fault_reset_hold``: see :data:`FAULT_RESET_HOLD_ENV`; ``sdo_drop``: see :data:`SDO_DROP_ENV`;
        ``switches``: the limit switches [unit]."""
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
        self._eds = eds
        self._boot_delay = boot_delay
        self._fault_reset_hold = fault_reset_hold
        self._sdo_drop = sdo_drop
        self._switches = switches
        self.units: pf.Units | None = None
        """What a count of its position and velocity objects means (once started)."""
        self.booted = threading.Event()
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
                shipped = canopen.import_od(str(eds), self.node_id)
            od = shipped if self._eds is None else load_dictionary(self._eds, self.node_id)
            fills = pf.fill_ins(od, self._cpu)
            self.units = units = pf.units(od, self.params.kind, self._cpu, fills)
            supported, _ = pf.supported_modes(od)
            node_ref: list[DriveNode] = []

            def emcy(code: int, register: int) -> None:
                if node_ref and node_ref[0].has_network():
                    if code:
                        node_ref[0].emcy.send(code, register)
                    else:
                        node_ref[0].emcy.reset(register)

            defaults = drive_defaults(shipped, self.params, units, self._qsd, od)
            self.drive = Cia402Drive(
                self.plant, defaults, units, emcy, self._fault_after, modes=pf.accepted_modes(supported),
                supported=supported, lookup=lambda index, sub: node_ref[0].value(index, sub) if node_ref else None,
                switches=self._switches, fault_reset_hold=self._fault_reset_hold)
            self.node = DriveNode(self.node_id, od, self.drive, self._fixed_mapping, fills)
            node_ref.append(self.node)
            self.network = canopen.Network(self._bus)
            self.network.NOTIFIER_CYCLE = NOTIFIER_CYCLE_S
            if self.node.guarding is not None:  # canopen's own listener drops remote frames.
                self.network.listeners.append(GuardListener(self.node.guarding))
            self.network.connect()
            self.plant.start()
            if self._boot_delay <= 0.0:
                self._boot()
            self._thread = threading.Thread(target=self._housekeeping, name="cia402-housekeeping", daemon=True)
            self._thread.start()
        except BaseException:
            self.close()
            raise
        _logger.info(
            "CiA 402 drive up: node %d on %s, %s joint %s", self.node_id, self.iface, self.params.kind, self.params
        )
        return self

    def _boot(self) -> None:
        """Join the bus: the SDO server, the boot-up message, PRE-OPERATIONAL."""
        assert self.network is not None and self.node is not None and self.drive is not None
        if self._sdo_drop > 0:
            self.node.sdo.on_request = _dropping(self.node.sdo.on_request, self._sdo_drop)  # Before it subscribes.
        self.network[self.node_id] = self.node
        self.node.boot()
        self.drive.ready()
        self.booted.set()

    def _housekeeping(self) -> None:
        node = self.node
        assert node is not None
        if not self.booted.is_set():
            if self._stop.wait(self._boot_delay):
                return
            self._boot()
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
        if self.node is not None and self.node.has_network() and self.booted.is_set():
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


async def run(registry_file: str | None, fresh_registry: bool, node_id: int, iface: str,
              eds: str | None = None) -> int:
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
            eds=eds,
            boot_delay=fault_after_from_env(os.environ, BOOT_DELAY_ENV),
            fault_reset_hold=fault_after_from_env(os.environ, FAULT_RESET_HOLD_ENV),
            sdo_drop=int(os.environ.get(SDO_DROP_ENV, "").strip() or 0),
            switches=switches_from_env(os.environ),
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
    collect_all()  # Before its threads start: its frames come from them.
    try:
        await loop.run_in_executor(None, emulator.start)
    except ValueError as ex:  # A malformed or unopenable CAN iface, an unloadable --eds.
        print(f"sim-plant: {ex}", file=sys.stderr)
        return 2
    freeze_alive()
    try:
        await stop.wait()
    finally:
        emulator.close()
    return 0
