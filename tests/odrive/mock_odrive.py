"""Someone else's emulated ODrive as a process: the ``odrive-can`` package's ``ODriveCANMock`` on our udpmc bus.

``python -m tests.odrive.mock_odrive NODE_ID --can IFACE``. The mock takes any python-can bus (its ``can_bus``
argument); ours is :func:`cyphal_common.transport.open_can_bus`'s. One adaptation, through its own API: its
heartbeat and encoder loops run with a period of 0.1 s and 0.01 s (their ``delay`` argument; the defaults are 0.2 s
and 0.1 s, a real ODrive's 0.1 s and 0.01 s). Its wiring is left as it is (a python-can notifier thread putting frames
into an asyncio queue: the event loop sees them when its 10 ms encoder loop wakes it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging


async def main(node_id: int, iface: str) -> None:
    from odrive_can.mock import ODriveCANMock

    from cyphal_common.transport import open_can_bus

    mock = ODriveCANMock(node_id, open_can_bus(iface))
    async with asyncio.TaskGroup() as tg:
        tg.create_task(mock.heartbeat_loop(0.1))
        tg.create_task(mock.encoder_loop(0.01))
        tg.create_task(mock.message_handler())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("node_id", type=int)
    ap.add_argument("--can", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    try:
        asyncio.run(main(args.node_id, args.can))
    except KeyboardInterrupt:
        pass
