"""Someone else's ODrive: the ``odrive-can`` package's mock device (``odrive_can.mock.ODriveCANMock``, MIT) on our
``udpmc:`` CAN bus, as a process of its own: ``python -m tests.odrive.odrive_can_mock NODE_ID --can IFACE``.

Nothing of ours is between the bus and the mock: its own DBC decodes our frames and encodes its heartbeat (5 Hz) and
encoder estimates (10 Hz). What it is (its docstring: "a rough mock, not a complete simulation"): a rate-limited
first-order model, Set_Axis_State taking 0.5 s during which it handles no other frame, no watchdog, no torque
control, no errors."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("node_id", type=int)
    parser.add_argument("--can", required=True, help="our CAN iface (udpmc:GROUP:PORT)")
    parser.add_argument("-v", "--verbose", action="store_true", help="the mock's every frame (DEBUG)")
    args = parser.parse_args()
    level = logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s")

    from odrive_can.mock import ODriveCANMock

    from cyphal_common.transport import open_can_bus

    mock = ODriveCANMock(axis_id=args.node_id, can_bus=open_can_bus(args.can))

    async def run() -> None:
        task = asyncio.ensure_future(mock.main())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(run())
    finally:
        mock.notifier.stop()
        mock.bus.shutdown()


if __name__ == "__main__":
    main()
