"""Peer process for cross-process tests: publishes on one subject, counts what it hears, reports JSON on stop.

Usage: ``_peer.py <udpmc group spec> <node-id> <mtu> <publish subject> <listen subject> <payload bytes>``.
Prints ``READY`` once subscribed, publishes every 50 ms until a line arrives on stdin (or 120 s pass),
then prints one JSON line: transfers heard per source node on the listen subject, transfers heard on its own
publish subject (must stay 0: own frames are not echoed back), and the transport's frame statistics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import threading
from collections import Counter

from pycyphal.transport import (
    InputSessionSpecifier,
    MessageDataSpecifier,
    OutputSessionSpecifier,
    PayloadMetadata,
    Priority,
    Timestamp,
    Transfer,
)

from cyphal_common.transport import udpmc_transport


def payload_for(transfer_id: int, size: int) -> bytes:
    """Deterministic payload so the receiver can verify multi-frame reassembly."""
    return bytes((transfer_id + i) % 256 for i in range(size))


async def main(spec: str, node_id: int, mtu: int, pub_subject: int, sub_subject: int, size: int) -> None:
    """Run the peer until told to stop."""
    tr = udpmc_transport(spec, node_id, mtu)
    meta = PayloadMetadata(4096)
    heard: Counter[int] = Counter()
    self_heard = 0
    listen = tr.get_input_session(InputSessionSpecifier(MessageDataSpecifier(sub_subject), None), meta)
    own = tr.get_input_session(InputSessionSpecifier(MessageDataSpecifier(pub_subject), None), meta)
    out = tr.get_output_session(OutputSessionSpecifier(MessageDataSpecifier(pub_subject), None), meta)
    loop = asyncio.get_running_loop()
    stop = threading.Event()  # A daemon thread, so a never-closed stdin cannot block interpreter exit.

    def wait_for_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    print("READY", flush=True)
    transfer_id = 0
    deadline = loop.time() + 120.0
    while not stop.is_set() and loop.time() < deadline:
        payload = payload_for(transfer_id, size)
        await out.send(Transfer(Timestamp.now(), Priority.NOMINAL, transfer_id, [memoryview(payload)]), loop.time() + 5)
        transfer_id += 1
        while (rx := await listen.receive(0.0)) is not None:
            heard[int(rx.source_node_id or -1)] += 1
        while await own.receive(0.0) is not None:
            self_heard += 1
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # Let in-flight transfers land before the final count.
    while (rx := await listen.receive(0.0)) is not None:
        heard[int(rx.source_node_id or -1)] += 1
    while await own.receive(0.0) is not None:
        self_heard += 1
    stats = dataclasses.asdict(tr.sample_statistics())
    tr.close()
    report = {"heard": {str(k): v for k, v in heard.items()}, "self_heard": self_heard, "sent": transfer_id}
    print(json.dumps({**report, "stats": stats}), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5])))
