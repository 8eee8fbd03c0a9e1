"""The ``servo-node`` command: ``run`` (default), ``demo``, ``dsdl-env``, ``plot-otg``, ``scope``.

Flags exist only for what is not a register; everything else is configured with registers, which may be set
from environment variables (``UAVCAN__NODE__ID=125``, ``SERVO__PROFILE__JERK=200``, …) or written with yakut.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from cyphal_common.errors import ServoError

DEMO_ENV = {
    "UAVCAN__UDP__IFACE": "127.0.0.1",
    "UAVCAN__NODE__ID": "125",
    "UAVCAN__SUB__SETPOINT_SERVO__ID": "27",
    "UAVCAN__PUB__FEEDBACK__ID": "28",
    "UAVCAN__PUB__STATUS__ID": "29",
    "UAVCAN__PUB__DYNAMICS__ID": "30",
}
"""What ``servo-node demo`` sets unless the environment already does."""

DEFAULT_REGISTRY = "servo_node.db"
"""The register file of ``servo-node run`` unless ``--registry`` or ``SERVO_NODE_REGISTRY`` names one."""
DEMO_REGISTRY = "demo.db"
"""The register file of ``servo-node demo`` unless ``--registry`` names one."""
_TOP, _SUB = "_top", "_sub"
"""Suffixes of the option's destinations before and after the command (argparse would let a subcommand's default
overwrite what was given before it: ``servo-node --registry F run`` used ``servo_node.db``)."""

_logger = logging.getLogger(__name__)


def _run(registry: str | None, env: dict[str, str], fresh_registry: bool = False) -> int:
    """Serve until SIGINT/SIGTERM, then stop the joint safely and exit 0; a second signal exits at once (1).

    A broken register file or an unusable register value is one line on stderr and exit code 2, no traceback.
    """
    from cyphal_common import dsdl, registry_file

    dsdl.ensure_compiled()
    from ..node import ServoNode  # Deferred: imports generated types, loads numba kernels.

    async def serve() -> int:
        node = ServoNode(registry, env)
        main = asyncio.current_task()
        assert main is not None
        signals: list[int] = []

        def on_signal(signum: int) -> None:
            signals.append(signum)
            if len(signals) == 1:
                _logger.warning("%s: stopping the servo safely, then exiting", signal.Signals(signum).name)
                node.request_close()
            else:
                _logger.warning("%s again: exiting without waiting for the stop", signal.Signals(signum).name)
                main.cancel()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            await node.run()
        except asyncio.CancelledError:
            return 1
        return 0

    try:
        registry_file.prepare(registry, fresh=fresh_registry, program="servo-node")
        return asyncio.run(serve())
    except ServoError as ex:  # ConfigurationError: the register file, a register value, the transport.
        print(f"servo-node: {ex}", file=sys.stderr)
        return 2


def _demo(registry: str, fresh_registry: bool = False) -> int:
    from cyphal_common import dsdl

    env = {**DEMO_ENV, **os.environ}
    exports = dsdl.shell_exports()
    node = env["UAVCAN__NODE__ID"]
    client = 126 if node != "126" else 127  # yakut needs a node-ID of its own to read and write registers
    print(
        f"""Starting a servo node (id {env['UAVCAN__NODE__ID']}) on UDP {env['UAVCAN__UDP__IFACE']} \
with the embedded simulated drive. In another terminal, command it with yakut:

{exports}export UAVCAN__UDP__IFACE={env['UAVCAN__UDP__IFACE']} UAVCAN__NODE__ID={client}
y pub -T 0.1 {env['UAVCAN__SUB__SETPOINT_SERVO__ID']}:uavcan.primitive.scalar.real32 100      # go to 100 rad
y pub -T 0.1 {env['UAVCAN__SUB__SETPOINT_SERVO__ID']}:zubax.telega.ServoCommand '{{target: 5, profile_jerk: 50}}'
y sub {env['UAVCAN__PUB__DYNAMICS__ID']}:zubax.physics.dynamics.DoF3rdTs                 # watch it move
y r {node} sys.status                                      # state, target, limits, errors
y r {node} servo.profile.velocity -- -5 5                  # change a default limit
Stop the publisher and the servo stops after servo.deadman_timeout. Ctrl+C ends the demo.
""",
        flush=True,
    )
    return _run(None if registry in (":memory:", "") else registry, env, fresh_registry)


def _compile_otg() -> None:
    """The OTG's kernels, the batch API's included (``plot-otg`` and batch users): a warm-up task of its own
    process."""
    from ..otg import plan, plan_batch, sample_batch

    trajectory = plan(0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)
    trajectory.at(0.5)
    profiles = plan_batch(0.0, 0.0, 0.0, [1.0, 2.0], 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)[0]
    sample_batch(profiles, [0.5])
    sample_batch(trajectory.profile[None, :], [0.5])  # read-only (a Trajectory's): numba's other signature


def _compile_plant() -> None:
    """The simulated joint's kernels, its commands' included (the embedded drive and ``sim-plant`` call them), and
    the coupled arm's (``sim-plant --arm``): a warm-up task of its own process."""
    from sim_plant import Joint, JointParams
    from sim_plant.arm_motors import ArmPlant

    Joint.warm_up(JointParams())
    ArmPlant.warm_up()


def _compile_bytecode() -> None:
    """This distribution's modules as bytecode where their ``__pycache__`` is writable (a checkout; pip already did it
    for an installed wheel): with PYTHONDONTWRITEBYTECODE set, as in many container images, Python caches none on
    import, and every process compiled them from source again."""
    import compileall
    import importlib.util

    for name in ("servo_node", "sim_plant", "sim_plant_node", "cyphal_common"):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            compileall.compile_dir(folder, quiet=2)


def _warmup() -> int:
    """Fill the caches so that the first start of a node (or a test run) does not compile.

    The DSDL, the OTG, the joint and the modules' bytecode do not depend on each other: they compile in processes of
    their own, as many at once as there are cores; the control loop, which calls the OTG and the joint, then finds
    them in the cache."""
    import os
    import time
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from cyphal_common import dsdl

    t0 = time.monotonic()
    with ProcessPoolExecutor(min(3, os.cpu_count() or 1), mp_context=get_context("spawn")) as pool:
        for task in [pool.submit(f) for f in (_compile_otg, _compile_plant, dsdl.ensure_compiled, _compile_bytecode)]:
            task.result()
    from sim_plant import JointParams

    from ..control import ControlLoop, ControlThread, LoopConfig
    from ..drive import SimDrive
    from ..setpoint import ProfileLimits, Setpoint

    for law in ("velocity", "torque"):
        loop = ControlLoop(LoopConfig(law=law), SimDrive(JointParams()), clock="simulated")
        loop.start()
        loop.command(Setpoint(1.0, 0.0, ProfileLimits(-1.0, 1.0, -1.0, 1.0, 1.0), 1.0))
        loop.advance(0.01)
        loop.sample()  # Read from Python by the node (the seqlocked sample, the dynamics trace): entries of their
        loop.trace_since(0)  # own in numba's cache.
        loop.close()
    # The real-time runner too: one compilation serves any number of axes and every drive (a typed list of one
    # array type), and the group's list helpers with it.
    thread = ControlThread()
    loops = [ControlLoop(LoopConfig(), SimDrive(JointParams()), clock="real") for _ in range(2)]
    with thread.batch():
        for loop in loops:
            loop.start(thread)
    for loop in loops:
        loop.close()
    print(f"caches warm ({time.monotonic() - t0:.1f} s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``servo-node`` console script."""
    parser = argparse.ArgumentParser(prog="servo-node", description=__doc__)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run the servo node (default)")
    demo = sub.add_parser("demo", help="run a node on loopback UDP with the simulated drive and print yakut commands")
    for p, where in ((parser, _TOP), (run, _SUB), (demo, _SUB)):  # Before or after the command: the same option.
        p.add_argument(
            "--registry",
            dest=f"registry{where}",
            metavar="FILE",
            default=None,
            help="register file (persists registers across restarts); ':memory:' keeps them in memory only "
            f"[env SERVO_NODE_REGISTRY, default {DEFAULT_REGISTRY}; demo: {DEMO_REGISTRY}]",
        )
        p.add_argument(
            "--fresh-registry",
            dest=f"fresh_registry{where}",
            action="store_true",
            help="move an existing register file aside (FILE.bad-<time>, or FILE.old-<time> if it was valid) "
            "and start with defaults; without it a broken register file is an error",
        )
    sub.add_parser("dsdl-env", help="print CYPHAL_PATH/PYCYPHAL_PATH exports so yakut uses this project's DSDL")
    sub.add_parser("warmup", help="compile the DSDL and every numba kernel into their caches, then exit")
    sub.add_parser("plot-otg", help="render a trajectory figure (see `servo-node plot-otg --help`)", add_help=False)
    sub.add_parser("scope", help="record nodes' dynamics to CSV and a figure (see `servo-node scope --help`)",
                   add_help=False)
    sub.add_parser("console", help="a web console for every servo on the bus (see `servo-node console --help`)",
                   add_help=False)

    args, rest = parser.parse_known_args(argv)
    registry_option, fresh = _registry_options(parser, args)
    if args.command in (None, "run", "demo", "warmup"):
        from cyphal_common.numba_start import hide_scipy

        hide_scipy()
    from .._kernel_cache import invalidate_if_sources_changed

    invalidate_if_sources_changed()  # Before any kernel module loads its numba cache.
    if args.command == "plot-otg":
        from ..otg.plot import main as plot_main

        return plot_main(list(rest))
    if args.command == "scope":
        from ..scope._cmd import main as scope_main

        return scope_main(list(rest))
    if args.command == "console":
        from ..console._cmd import main as console_main

        return console_main(list(rest))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,  # -v counts even where a library configured logging first (a fork of a process that did).
    )
    if args.command == "dsdl-env":
        from cyphal_common import dsdl

        print(dsdl.shell_exports(), end="")
        return 0
    if args.command == "warmup":
        return _warmup()
    if args.command == "demo":
        return _demo(registry_option or DEMO_REGISTRY, fresh)
    chosen = registry_option or os.environ.get("SERVO_NODE_REGISTRY", DEFAULT_REGISTRY)
    return _run(None if chosen in (":memory:", "") else chosen, dict(os.environ), fresh)


def _registry_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str | None, bool]:
    """``--registry`` and ``--fresh-registry`` wherever they stand (``servo-node --registry F run`` is
    ``servo-node run --registry F``): the file given (None: the command's default) and whether to start fresh.

    An option is never dropped: two different files, or either option with a command that opens no register file,
    is a usage error (exit 2).
    """
    top, sub = args.registry_top, getattr(args, "registry_sub", None)
    if top is not None and sub is not None and top != sub:
        parser.error(f"--registry given twice with different files ({top!r} before the command, {sub!r} after it)")
    fresh = bool(args.fresh_registry_top or getattr(args, "fresh_registry_sub", False))
    if args.command not in (None, "run", "demo"):
        for flag, given in (("--registry", top is not None), ("--fresh-registry", fresh)):
            if given:
                parser.error(f"{flag} does not apply to {args.command} (only to run and demo)")
    return (sub if sub is not None else top), fresh
