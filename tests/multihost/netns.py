"""Several hosts on one machine without containers: Linux network namespaces joined by a bridge.

A :class:`Network` is a "switch" namespace holding a bridge, and one namespace per host, each attached to the
bridge by a veth pair (``eth0`` in the host, ``<host>`` in the switch) with an address of the 198.18.0.0/15
benchmarking range and a multicast route, as an isolated Ethernet segment. Nothing is created in the machine's own
namespace, so parallel runs cannot clash and other processes' multicast never reaches the hosts. Every name
carries the creating process's PID; :meth:`Network.close` deletes the namespaces (and with them every veth and the
bridge), and a new network first removes what a killed earlier run left behind.

:meth:`Network.cut` sets a host's link down at the switch: the host is cut off from the others, while what runs
inside it (a servo and its drive over the host's own multicast loopback) keeps talking, as on a robot whose
axis controller and drive share a bus that stays up when the link to the coordinator breaks.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.procs import RegisterClient

PREFIX = "csmh"
"""Namespace names: ``csmh<pid>x<random>-<host>`` (cyphal-servo multi-host)."""
_NAME = re.compile(rf"^{PREFIX}(\d+)x[0-9a-f]+-\S+")
_CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


def namespaces() -> list[str]:
    """Every network namespace name (``ip netns list``)."""
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def sweep_stale() -> list[str]:
    """Delete the namespaces of earlier runs whose process is gone (a killed test run); returns their names."""
    stale = [n for n in namespaces() if (m := _NAME.match(n)) and not Path(f"/proc/{m[1]}").exists()]
    for name in stale:
        _ip("netns", "del", name, check=False)
    return stale


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (not root, no ``ip``, no permission), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    probe = f"{PREFIX}{os.getpid()}x{secrets.token_hex(3)}-probe"
    try:
        res = _ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        return "no `ip` command (iproute2)"
    if res.returncode != 0:
        return f"cannot create a network namespace: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    """One host: its namespace and its address on the segment."""

    name: str
    netns: str
    address: str

    def command(self, args: list[str]) -> list[str]:
        """``args`` run inside this host."""
        return ["ip", "netns", "exec", self.netns, *args]


class Network:
    """An isolated segment of hosts (context manager); every namespace is deleted on close, whatever happened."""

    def __init__(self) -> None:
        sweep_stale()
        self.tag = f"{PREFIX}{os.getpid()}x{secrets.token_hex(3)}"
        self.hosts: dict[str, Host] = {}
        self._switch = f"{self.tag}-sw"
        self._created: list[str] = []
        try:
            self._add_netns(self._switch)
            _ip("-n", self._switch, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
            _ip("-n", self._switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        """A new host on the segment: address 198.18.0.<n+1>/24, multicast routed through its link."""
        host = Host(name, f"{self.tag}-{name}", f"198.18.0.{len(self.hosts) + 1}")
        self._add_netns(host.netns)
        _ip("-n", self._switch, "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _ip("-n", self._switch, "link", "set", name, "master", "br0", "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "route", "add", "224.0.0.0/4", "dev", "eth0")
        self.hosts[name] = host
        return host

    def cut(self, host: Host) -> None:
        """Take the host's link down at the switch (the host keeps its address; its carrier goes)."""
        _ip("-n", self._switch, "link", "set", host.name, "down")

    def restore(self, host: Host) -> None:
        _ip("-n", self._switch, "link", "set", host.name, "up")

    def close(self) -> None:
        """Delete every namespace made (veths and the bridge go with them); idempotent."""
        while self._created:
            _ip("netns", "del", self._created.pop(), check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _enter_netns(netns: str) -> None:
    """Move the calling thread (only it) into the namespace: the sockets it opens from then on live there."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
    finally:
        os.close(fd)


class HostRegisterClient(RegisterClient):
    """:class:`~tests.procs.RegisterClient` from inside a host: its event loop's thread joins the host's
    namespace before opening the transport, so the test reads a host's registers even while it is cut off."""

    def __init__(self, host: Host, server_node_id: int, client_node_id: int) -> None:
        self._netns = host.netns
        super().__init__({"UAVCAN__UDP__IFACE": host.address}, server_node_id, client_node_id,
                         thread_name=f"register-client-{host.name}")

    async def _enter(self) -> None:
        _enter_netns(self._netns)

    def close(self) -> None:
        """Close as the base class does, and drop the client now (its finalizer would run at interpreter exit)."""
        super().close()
        self._client = None
