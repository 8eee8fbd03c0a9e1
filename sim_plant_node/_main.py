"""The ``sim-plant`` command line: parse the flags, compile the DSDL, then import and run the node (Cyphal/UDRAL, or
with ``--canopen NODE_ID --can IFACE [--eds FILE]`` the emulated CiA 402 drive of :mod:`sim_plant_node.cia402`, or
with ``--odrive NODE_ID --can IFACE`` the emulated ODrive of :mod:`sim_plant_node.odrive`).

``sim-plant arm-step …`` is an offline subcommand (:mod:`sim_plant_node._arm_step`: the coupled arm's step response
against an independent integration); any other first argument is the node's options, as before.

The node module imports generated types and ``pycyphal.application`` (which imports the ``uavcan`` namespace),
so it is imported only after :func:`cyphal_common.dsdl.ensure_compiled`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

DEFAULT_REGISTRY = "sim_plant.db"
"""Register file of the node unless ``--registry`` says otherwise (in the current directory)."""


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``sim-plant``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["arm-step"]:
        from ._arm_step import main as arm_step  # Offline: no DSDL, no node.

        return arm_step(argv[1:])
    ap = argparse.ArgumentParser(
        prog="sim-plant",
        description="One simulated joint as a Cyphal node speaking the UDRAL servo interface.",
        epilog="sim-plant arm-step --help: the coupled arm's step response (offline, no node).",
    )
    ap.add_argument(
        "--registry",
        default=DEFAULT_REGISTRY,
        help=f"register file (default: {DEFAULT_REGISTRY} in the current directory; ':memory:' or '' for none)",
    )
    ap.add_argument(
        "--fresh-registry",
        action="store_true",
        help="move an existing register file aside (FILE.bad-<time>, or FILE.old-<time> if it was valid) "
        "and start with defaults; without it a broken register file is an error",
    )
    ap.add_argument(
        "--canopen",
        type=int,
        metavar="NODE_ID",
        help="run the joint as a CiA 402 drive on a CANopen bus with this node-ID (1..127) instead of a Cyphal node",
    )
    ap.add_argument(
        "--odrive",
        type=int,
        metavar="NODE_ID",
        help="run the joint as an ODrive axis (CAN Simple protocol, firmware 0.6) with this node-ID (0..63) instead "
        "of a Cyphal node",
    )
    ap.add_argument(
        "--can",
        metavar="IFACE",
        help="CAN bus of --canopen or --odrive, uavcan.can.iface syntax: udpmc:GROUP[:PORT], socketcan:can0, "
        "virtual:NAME",
    )
    ap.add_argument(
        "--eds",
        metavar="FILE",
        help="with --canopen: present this drive's EDS or DCF (its PDOs, modes, units, identity, communication "
        "objects) instead of the shipped one",
    )
    ap.add_argument(
        "--arm",
        action="store_true",
        help="serve the coupled 3-DOF arm's base, shoulder and elbow as three UDRAL drives (ports <joint>.setpoint "
        "etc., registers arm.<joint>.*) stepping one plant",
    )
    ap.add_argument("--verbose", "-v", action="store_true", help="log at DEBUG level")
    args = ap.parse_args(argv)
    if args.canopen is not None and args.odrive is not None:
        ap.error("--canopen and --odrive are two different drives; run one sim-plant each")
    can_drive = args.canopen if args.canopen is not None else args.odrive
    if (can_drive is None) != (args.can is None):
        ap.error("--canopen NODE_ID (or --odrive NODE_ID) and --can IFACE go together")
    if args.eds is not None and args.canopen is None:
        ap.error("--eds goes with --canopen NODE_ID --can IFACE")
    if args.arm and can_drive is not None:
        ap.error("--arm is a Cyphal node; it does not go with --canopen or --odrive")
    if args.canopen is not None and not 1 <= args.canopen <= 127:
        ap.error(f"--canopen: node-ID must be 1..127, got {args.canopen}")
    if args.odrive is not None and not 0 <= args.odrive <= 63:
        ap.error(f"--odrive: node-ID must be 0..63, got {args.odrive}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("pycyphal").setLevel(logging.WARNING)  # Its DEBUG/INFO is per-frame noise.
    if args.verbose:
        logging.getLogger("sim_plant_node").setLevel(logging.DEBUG)
    registry_file = None if args.registry in ("", ":memory:") else args.registry

    from cyphal_common.numba_start import hide_scipy

    hide_scipy()  # Before the node's kernels load numba.
    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    logging.getLogger("canopen").setLevel(logging.WARNING)  # Its INFO is per-SDO/PDO noise.
    try:
        if args.canopen is not None:
            from .cia402._app import run as run_canopen  # Deferred: the registers need the compiled DSDL.

            return asyncio.run(run_canopen(registry_file, args.fresh_registry, args.canopen, args.can, args.eds))
        if args.odrive is not None:
            from .odrive._app import run as run_odrive  # Deferred: the registers need the compiled DSDL.

            return asyncio.run(run_odrive(registry_file, args.fresh_registry, args.odrive, args.can))
        if args.arm:
            from ._arm_app import run_arm  # Deferred: needs the compiled DSDL.

            return asyncio.run(run_arm(registry_file, args.fresh_registry))
        from ._app import run  # Deferred: needs the compiled DSDL.

        return asyncio.run(run(registry_file, args.fresh_registry))
    except KeyboardInterrupt:
        return 0
