"""The ``sim-plant`` command line: parse the flags, compile the DSDL, then import and run the node.

The node module imports generated types and ``pycyphal.application`` (which imports the ``uavcan`` namespace),
so it is imported only after :func:`cyphal_common.dsdl.ensure_compiled`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

DEFAULT_REGISTRY = "sim_plant.db"
"""Register file of the node unless ``--registry`` says otherwise (in the current directory)."""


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``sim-plant``."""
    ap = argparse.ArgumentParser(
        prog="sim-plant", description="One simulated joint as a Cyphal node speaking the UDRAL servo interface."
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
    ap.add_argument("--verbose", "-v", action="store_true", help="log at DEBUG level")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("pycyphal").setLevel(logging.WARNING)  # Its DEBUG/INFO is per-frame noise.
    if args.verbose:
        logging.getLogger("sim_plant_node").setLevel(logging.DEBUG)
    registry_file = None if args.registry in ("", ":memory:") else args.registry

    from cyphal_common import dsdl

    dsdl.ensure_compiled()
    from ._app import run  # Deferred: needs the compiled DSDL.

    try:
        return asyncio.run(run(registry_file, args.fresh_registry))
    except KeyboardInterrupt:
        return 0
