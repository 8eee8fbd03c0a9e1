"""A plain python-can bus from a CAN iface string (``uavcan.can.iface`` syntax), for CANopen and other raw-CAN users.

One parser for both sides of a CANopen link (the emulated CiA 402 drive and the servo's CiA 402 backend):

* ``udpmc:<group>[:<port>]`` — our multicast virtual CAN bus between processes on this host (the same bus and the
  same restrictions as the Cyphal ``udpmc:`` media: loopback only, TTL 0, group in 239.0.0.0/8), Classic CAN.
  The bus echoes every frame to every socket on the host, ours included; :class:`UdpMulticastCanBus` drops its own
  echoes by a random token in the frame's ``channel`` field, so it behaves like a real CAN controller.
* ``virtual:<name>`` — python-can's in-process virtual bus (only within one process).
* ``socketcan:can0`` and any other ``<python-can interface>:<channel>`` — python-can's interface of that name.
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

import can

from ._factory import UDPMC_PREFIX, parse_udpmc_iface
from ._udp_multicast_media import enlarge_receive_buffer, restrict_to_loopback

__all__ = ["CanIfaceError", "UdpMulticastCanBus", "open_can_bus"]

_logger = logging.getLogger(__name__)


class CanIfaceError(ValueError):
    """The iface string is malformed or the bus cannot be opened; the message says which and why."""


class UdpMulticastCanBus(can.BusABC):  # type: ignore[misc]
    """python-can ``udp_multicast`` restricted to this host, without the echo of its own frames (Classic CAN)."""

    def __init__(self, group: str, port: int, **kwargs: Any) -> None:
        """Open the multicast socket on ``group:port`` and re-point it to the loopback interface."""
        self._token = f"udpmc-{secrets.token_hex(8)}"
        self._inner = can.Bus(interface="udp_multicast", channel=group, port=port, fd=False, hop_limit=0)
        try:
            enlarge_receive_buffer(self._inner)  # The CANopen bus carries every node's PDOs to every process too.
            restrict_to_loopback(self._inner, group)
        except OSError as ex:  # Still host-local thanks to TTL 0.
            _logger.warning("udpmc %s: could not restrict the socket to the loopback interface: %s", group, ex)
        self.channel_info = f"udpmc:{group}:{port}"
        self._cyclic: list[Any] = []  # Every periodic send task ever started here (see shutdown()).
        super().__init__(channel=self.channel_info, **kwargs)

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        """Send one frame, tagged so that our own echo is recognised."""
        msg.channel = self._token
        self._inner.send(msg, timeout)

    def _recv_internal(self, timeout: float | None) -> tuple[can.Message | None, bool]:
        msg = self._inner.recv(timeout)
        if msg is not None and msg.channel == self._token:
            return None, False  # Our own frame; a real controller does not receive it.
        return msg, False

    def fileno(self) -> int:
        """The socket's descriptor (python-can's notifier may select on it)."""
        return int(self._inner.fileno())

    def _send_periodic_internal(self, *args: Any, **kwargs: Any) -> Any:
        task = super()._send_periodic_internal(*args, **kwargs)
        self._cyclic.append(task)
        return task

    def shutdown(self) -> None:
        """Stop the periodic send tasks and wait for their threads (a stopped task may be mid-send: it must not
        send on a closed socket), then close the socket. Idempotent."""
        super().shutdown()
        for task in self._cyclic:
            task.stop()
            thread = getattr(task, "thread", None)
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=1.0)
        self._cyclic.clear()
        self._inner.shutdown()


def open_can_bus(iface: str, bitrate: int | None = None) -> can.BusABC:
    """Open the python-can bus an iface string names (see the module docstring); ``bitrate`` for real hardware.

    :raises CanIfaceError: malformed string, unknown python-can interface, or the bus could not be opened.
    """
    spec = iface.strip()
    kind, sep, channel = spec.partition(":")
    if not sep or not kind:
        raise CanIfaceError(
            f"Malformed CAN iface {iface!r}: expected <interface>:<channel>, e.g. socketcan:can0, "
            "virtual:bus0 or udpmc:239.74.163.2"
        )
    try:
        if spec.lower().startswith(UDPMC_PREFIX):
            group, port = parse_udpmc_iface(spec)
            return UdpMulticastCanBus(group, port)
        kwargs: dict[str, Any] = {"interface": kind, "channel": channel}
        if bitrate is not None and kind != "virtual":
            kwargs["bitrate"] = int(bitrate)
        return can.Bus(**kwargs)
    except CanIfaceError:
        raise
    except (ValueError, ImportError, OSError, can.CanError, NotImplementedError) as ex:
        raise CanIfaceError(f"Cannot open CAN iface {iface!r}: {ex}") from ex
