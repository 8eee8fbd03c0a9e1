"""Reading (and writing) another node's registers (``uavcan.register.Access``) as a client, patiently: a request
unanswered within its deadline is asked again with a longer one.

An answer is matched to its own request only (its transfer-ID), so a client whose host is too busy to read its bus
within a deadline gets each answer after that request has been given up; asked again with the same deadline, every
answer comes late again (seen over udpmc CAN on a loaded 2-core machine: answers 1–2 s after the request, and a read
that three 1 s requests never completed). Doubling the deadline outgrows such a backlog; a node that is gone is
known after the deadlines' sum. A write asked again writes the same value again: the node's answer is the same.
Importing this module needs no compiled DSDL.
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


@dataclass(frozen=True)
class Entry:
    """A node's whole answer to an access: the ``uavcan.register.Value`` (its type and elements), its flags and the
    system time of the middle of the answered request's round trip [second]."""

    value: Any
    """``uavcan.register.Value.1.0``; its ``empty`` is set when the node has no such register."""
    mutable: bool
    persistent: bool
    at_s: float

    @property
    def exists(self) -> bool:
        return self.value.empty is None


async def access_register(client: Any, name: str, value: Any = None,
                          timeouts_s: Sequence[float] = READ_TIMEOUTS_S) -> Entry | None:
    """Access ``name`` through ``client`` (a pycyphal ``uavcan.register.Access`` client): a read, or a write of
    ``value`` (a ``uavcan.register.Value.1.0``) that the node answers with the value it then holds (its old one if it
    refused the write); None if no request of ``timeouts_s`` was answered within its deadline."""
    import uavcan.register

    request = uavcan.register.Access_1_0.Request(name=uavcan.register.Name_1_0(name))
    if value is not None:
        request.value = value
    for timeout in timeouts_s:
        client.response_timeout = timeout  # Taken by the call below as it starts.
        asked = time.time()
        res = await client.call(request)
        if res is not None:
            break
    else:
        return None
    response = res[0]
    return Entry(response.value, bool(response.mutable), bool(response.persistent), 0.5 * (asked + time.time()))


async def read_register(client: Any, name: str, timeouts_s: Sequence[float] = READ_TIMEOUTS_S) -> Answer | None:
    """Read ``name`` through ``client`` (a pycyphal ``uavcan.register.Access`` client); None if no request of
    ``timeouts_s`` was answered within its deadline."""
    from pycyphal.application.register import ValueProxy

    entry = await access_register(client, name, None, timeouts_s)
    if entry is None:
        return None
    value = entry.value
    if value.empty is not None:
        return Answer(None, entry.at_s)
    if value.string is not None:
        return Answer(value.string.value.tobytes().decode(), entry.at_s)
    return Answer(list(ValueProxy(value).floats), entry.at_s)
