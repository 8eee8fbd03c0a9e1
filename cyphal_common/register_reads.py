"""Reading another node's registers (``uavcan.register.Access``) as a client, patiently: a request unanswered within
its deadline is asked again with a longer one.

An answer is matched to its own request only (its transfer-ID), so a client whose host is too busy to read its bus
within a deadline gets each answer after that request has been given up; asked again with the same deadline, every
answer comes late again (seen over udpmc CAN on a loaded 2-core machine: answers 1–2 s after the request, and a read
that three 1 s requests never completed). Doubling the deadline outgrows such a backlog; a node that is gone is
known after the deadlines' sum. Importing this module needs no compiled DSDL.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

READ_TIMEOUTS_S = (1.0, 2.0, 4.0)
"""The deadlines of a read's requests, one after the other [second]."""


@dataclass(frozen=True)
class Answer:
    """A node's answer to a read: the register's value (a string, a list of numbers, or None: no such register) and
    the system time of the middle of the answered request's round trip [second]."""

    value: str | list[float] | None
    at_s: float


async def read_register(client: Any, name: str, timeouts_s: Sequence[float] = READ_TIMEOUTS_S) -> Answer | None:
    """Read ``name`` through ``client`` (a pycyphal ``uavcan.register.Access`` client); None if no request of
    ``timeouts_s`` was answered within its deadline."""
    import uavcan.register
    from pycyphal.application.register import ValueProxy

    request = uavcan.register.Access_1_0.Request(name=uavcan.register.Name_1_0(name))
    for timeout in timeouts_s:
        client.response_timeout = timeout  # Taken by the call below as it starts.
        asked = time.time()
        res = await client.call(request)
        if res is not None:
            break
    else:
        return None
    at_s = 0.5 * (asked + time.time())
    value = res[0].value
    if value.empty is not None:
        return Answer(None, at_s)
    if value.string is not None:
        return Answer(value.string.value.tobytes().decode(), at_s)
    return Answer(list(ValueProxy(value).floats), at_s)
