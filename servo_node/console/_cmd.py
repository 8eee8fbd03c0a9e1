"""``servo-node console``: a local web console for every servo on the bus.

Examples (the bus comes from the standard environment, as for yakut and every other command)::

    export UAVCAN__UDP__IFACE=127.0.0.1 UAVCAN__NODE__ID=120
    servo-node console                       # http://127.0.0.1:8765/#token=… : open it in a browser
    servo-node console --allow-motion        # also jog and move the servos (hold-to-move)
    servo-node console --host 192.168.1.5    # another interface: anyone who can reach it and has the token

Without ``UAVCAN__NODE__ID`` the console only listens (nodes, plots). (Options only here: :mod:`._app` serves.)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="servo-node console", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default=None, metavar="ADDRESS",
                    help=f"address to serve on (default {DEFAULT_HOST}, this machine only); any other is reachable "
                         "from the network: a warning is printed")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any free)")
    ap.add_argument("--allow-motion", action="store_true",
                    help="enable the motion controls (arm, jog, move-to, coordinated move, re-arm); off by default")
    ap.add_argument("--record-dir", default=".", metavar="DIR", help="where recordings are written (default .)")
    ap.add_argument("--url-file", default=None, metavar="FILE",
                    help="also write the page's URL (with its token) to this file, readable by its owner only")
    ap.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM (exit 0); 2 on bad options, a missing extra or an unusable transport."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s", stream=sys.stderr)
    try:
        from aiohttp import web
    except ImportError:
        print("servo-node console: aiohttp is not installed: pip install 'cyphal-servo[console]'", file=sys.stderr)
        return 2
    from cyphal_common import dsdl
    from cyphal_common.collector import freeze_start_up_objects

    dsdl.ensure_compiled()
    from ._app import Console
    from ._bus import Bus, ConsoleError
    from ._security import Guard, is_loopback, new_token

    host = args.host or DEFAULT_HOST
    if not is_loopback(host):
        print(f"servo-node console: WARNING: serving on {host}, not on this machine only: whoever reaches it with "
              f"the token can change registers{' and move the servos' if args.allow_motion else ''}", file=sys.stderr)

    async def serve() -> int:
        bus = Bus()
        token = new_token()
        runner: web.AppRunner | None = None
        try:
            await bus.start()
            guard = Guard(token, host, args.port)
            console = Console(bus, guard, args.allow_motion, Path(args.record_dir))
            runner = web.AppRunner(console.app(), access_log=None, handle_signals=False)
            await runner.setup()
            site = web.TCPSite(runner, host, args.port)
            await site.start()
            port = runner.addresses[0][1]
            guard.bind(port)
            url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/#token={token}"
            if args.url_file:
                Path(args.url_file).touch(mode=0o600)
                Path(args.url_file).write_text(url + "\n")
            print(f"servo console: {url}" + ("" if bus.node.id is not None else
                                             "  (anonymous: no UAVCAN__NODE__ID, it only listens)"), flush=True)
            if not args.allow_motion:
                print("motion controls off (start with --allow-motion to jog and move)", flush=True)
            freeze_start_up_objects()  # A long collection would pause the moves it commands (their repetitions).
            stop = asyncio.Event()
            for signum in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(signum, stop.set)
            await stop.wait()
            return 0
        except (ConsoleError, OSError) as ex:
            print(f"servo-node console: {ex}", file=sys.stderr)
            return 2
        finally:
            if runner is not None:
                await runner.cleanup()
            await bus.close()

    return asyncio.run(serve())
