"""Each pytest-xdist worker on a network of its own, so parallel workers never hear each other.

Cyphal/UDP multicast on 127.0.0.1 and our ``udpmc:`` CAN groups reach every listener of a network namespace: two
workers running tests that share a node-ID, subject-ID or group would read each other's traffic. Rather than
carving every ID of every test into per-worker ranges, a worker moves itself into a new network namespace at start
(before any test runs or any thread of a test exists), brings its loopback up with a multicast route, and everything
it starts — servo nodes, drives, yakut, namespaces of the multi-host tests — inherits that network. The same
isolation keeps other processes' Cyphal traffic on this machine out of the tests.

It needs root (``CAP_SYS_ADMIN``); without it a parallel run is refused (the Makefile runs serially then).
:func:`on_host` runs a command on the network the worker came from, for what needs the outside (pip).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Callable

_CLONE_NEWNET = 0x40000000
_host_fd: int | None = None
"""The worker's original network namespace, kept open to return to for :func:`on_host`."""


def _libc_call(name: str, *args: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def isolate() -> None:
    """Move this process into a new network namespace with a multicast-capable loopback (idempotent)."""
    global _host_fd
    if _host_fd is not None:
        return
    fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _libc_call("unshare", _CLONE_NEWNET)
    except OSError:
        os.close(fd)
        raise
    _host_fd = fd
    for args in (["link", "set", "lo", "up", "multicast", "on"], ["route", "add", "224.0.0.0/4", "dev", "lo"]):
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def on_host() -> Callable[[], None] | None:
    """A ``preexec_fn`` that puts a child on the network the worker came from (None when not isolated)."""
    fd = _host_fd
    if fd is None:
        return None

    def enter() -> None:
        _libc_call("setns", fd, _CLONE_NEWNET)

    return enter
