"""pycyphal CAN media over python-can's ``udp_multicast`` bus: a virtual CAN bus shared by processes on this host.

Why: this machine has no SocketCAN ``vcan``, and pycyphal's ``PythonCANMedia`` does not know ``udp_multicast``.

Semantics (those of a real CAN controller, which is what the Cyphal/CAN transport expects):

- Every frame sent on a group reaches every *other* media instance joined to that group and port,
  in this process or in any other process on this host.
- The sender never receives its own frames from the bus. python-can's ``UdpMulticastBus`` does echo them
  (multicast loopback is needed so that other local processes receive anything at all), so each instance tags
  its outgoing frames with a random token in the frame's ``channel`` field (carried in the msgpack datagram) and
  drops received frames that carry its own token.
- A loopback copy is delivered to the transport only when pycyphal asks for it (``Envelope.loopback``),
  after the frame has been handed to the bus — like a controller reporting transmission completion.
- MTU 8 selects Classic CAN (FD frames from other nodes are dropped by the bus), any larger valid MTU selects
  CAN FD (bit-rate switch flag set, as pycyphal's own python-can media does).

Traffic stays on this host: python-can's ``UdpMulticastBus`` has no option to pick a network interface
(it binds ``0.0.0.0:<port>`` and joins the group on ``INADDR_ANY``, i.e. the interface the routing table picks),
so after construction the socket (reached through the public ``fileno()``) is re-pointed to the loopback
interface: ``IP_MULTICAST_IF=127.0.0.1``, group membership moved from ``INADDR_ANY`` to ``127.0.0.1``,
``IP_MULTICAST_ALL=0`` (only groups joined by this very socket are received, so two groups on one port do not
leak into each other), and multicast TTL 0 (never leaves the host even if re-pointing failed).
Groups must lie in the administratively scoped range 239.0.0.0/8.
Caveat: python-can's initial ``INADDR_ANY`` join needs some route for the group (e.g. a default route); on a host
with no route at all the bus cannot be created (python-can raises, reported as ``InvalidMediaConfigurationError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

import can
from pycyphal.transport import InvalidMediaConfigurationError, ResourceClosedError, Timestamp
from pycyphal.transport.can.media import DataFrame, Envelope, FilterConfiguration, FrameFormat, Media

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_PORT",
    "UDPMulticastMedia",
    "enlarge_receive_buffer",
    "restrict_to_loopback",
    "validate_group",
    "validate_port",
]

_logger = logging.getLogger(__name__)

DEFAULT_GROUP = "239.74.163.2"
"""Default multicast group (administratively scoped, the same as python-can's IPv4 default)."""

DEFAULT_PORT = 43113
"""Default UDP port (python-can's ``udp_multicast`` default)."""

_ADMIN_SCOPED = ipaddress.IPv4Network("239.0.0.0/8")
_LOOPBACK_ADDR = "127.0.0.1"
_IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)  # Linux-only option; Python may lack the constant.
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux-only option, as above.
_RX_POLL_SEC = 0.1  # Receive-thread poll period; bounds how long close() waits for the thread.
_TX_TIMEOUT_SEC = 0.01  # The longest a send waits for room in the socket's own send buffer (never seen needed).
_NUM_FILTERS = 64  # Filtering is done in software here, so many filters cost little and reduce traffic upward.


def validate_group(group: str) -> str:
    """Return the normalized group address or raise ``InvalidMediaConfigurationError`` explaining the problem."""
    try:
        addr = ipaddress.IPv4Address(group.strip())
    except ValueError:
        raise InvalidMediaConfigurationError(
            f"Invalid multicast group {group!r}: expected an IPv4 address in 239.0.0.0/8, e.g. {DEFAULT_GROUP}"
        ) from None
    if addr not in _ADMIN_SCOPED:
        raise InvalidMediaConfigurationError(
            f"Multicast group {group!r} is outside the administratively scoped range 239.0.0.0/8 "
            f"(use e.g. {DEFAULT_GROUP})"
        )
    return str(addr)


def validate_port(port: int) -> int:
    """Return the port if it is a valid UDP port, else raise ``InvalidMediaConfigurationError``."""
    if isinstance(port, bool) or not isinstance(port, int) or not (1 <= port <= 0xFFFF):
        raise InvalidMediaConfigurationError(f"Invalid UDP port {port!r}: expected an integer in [1, 65535]")
    return port


@contextlib.contextmanager
def _bus_socket(bus: can.BusABC) -> Iterator[socket.socket]:
    """A python-can ``udp_multicast`` bus's socket through a duplicate descriptor, closed on exit (the bus keeps its
    own)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, fileno=os.dup(bus.fileno()))
    try:
        yield sock
    finally:
        sock.close()


def restrict_to_loopback(bus: can.BusABC, group: str) -> None:
    """Move a python-can ``udp_multicast`` bus socket's send interface and group membership to ``lo``, isolate groups.

    Raises ``OSError`` if the socket refuses; the bus then stays host-local anyway (TTL 0), just not bound to lo.
    """
    with _bus_socket(bus) as sock:
        lo = socket.inet_aton(_LOOPBACK_ADDR)
        grp = socket.inet_aton(group)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, lo)
        try:
            sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
        except OSError as ex:  # Not Linux: other groups on the same port may leak in; use distinct ports there.
            _logger.info("udpmc %s: IP_MULTICAST_ALL unsupported: %s", group, ex)
        # Join on lo first, then leave the INADDR_ANY membership, so a failure never leaves the socket deaf.
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, grp + lo)
        except OSError as ex:
            if ex.errno != errno.EADDRINUSE:
                raise
            return  # INADDR_ANY already resolved to lo: that membership is the one we want; keep it.
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, grp + socket.inet_aton("0.0.0.0"))
        except OSError as ex:
            _logger.debug("udpmc %s: leaving the INADDR_ANY membership failed: %s", group, ex)


RX_BUFFER_BYTES = 4 << 20
"""Receive buffer asked for a udpmc socket. Every process on a group receives every frame of the bus and filters in
software: at the kernel's default (about 200 kB, some 200 frames) a receiver busy for a tenth of a second at 2000
frames/s dropped frames — 47 to 1019 per process in one coordination test — and with them multi-frame service
responses."""


def enlarge_receive_buffer(bus: can.BusABC) -> None:
    """Ask for :data:`RX_BUFFER_BYTES` on a python-can ``udp_multicast`` bus socket (beyond ``net.core.rmem_max``
    where permitted, as root; else capped there)."""
    with _bus_socket(bus) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, RX_BUFFER_BYTES)
        except OSError:  # Not permitted: the request is capped at net.core.rmem_max.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RX_BUFFER_BYTES)


class UDPMulticastMedia(Media):
    """Cyphal/CAN media over a python-can ``udp_multicast`` bus restricted to the loopback interface."""

    def __init__(self, group: str = DEFAULT_GROUP, port: int = DEFAULT_PORT, mtu: int = 64) -> None:
        """Open the bus now (errors surface here); receiving starts when the transport calls ``start()``."""
        self._group = validate_group(group)
        self._port = validate_port(port)
        if mtu not in Media.VALID_MTU_SET:
            raise InvalidMediaConfigurationError(f"Invalid MTU {mtu!r}: expected one of {sorted(Media.VALID_MTU_SET)}")
        self._mtu = int(mtu)
        self._is_fd = self._mtu > 8
        # Random per-instance token: identifies our own frames when the bus echoes them back to us.
        self._token = f"udpmc-{secrets.token_hex(8)}"
        self._closed = False
        self._close_lock = threading.Lock()
        self._filters: tuple[FilterConfiguration, ...] = ()
        self._rx_handler: Media.ReceivedFramesHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rx_thread: threading.Thread | None = None
        try:
            # hop_limit=0: IPv4 multicast TTL 0 keeps every datagram on this host.
            self._bus = can.Bus(
                interface="udp_multicast", channel=self._group, port=self._port, fd=self._is_fd, hop_limit=0
            )
        except (can.CanError, OSError) as ex:
            raise InvalidMediaConfigurationError(
                f"Could not open udp_multicast bus on {self._group}:{self._port}: {ex}"
            ) from ex
        try:
            enlarge_receive_buffer(self._bus)
            restrict_to_loopback(self._bus, self._group)
        except OSError as ex:  # Still host-local thanks to TTL 0; just not bound to lo.
            _logger.warning("%s: could not restrict the multicast socket to the loopback interface: %s", self, ex)
        except BaseException:
            self._bus.shutdown()
            raise
        super().__init__()

    @property
    def group(self) -> str:
        """The multicast group address."""
        return self._group

    @property
    def port(self) -> int:
        """The UDP port."""
        return self._port

    @property
    def is_fd(self) -> bool:
        """True if the bus runs CAN FD (MTU > 8)."""
        return self._is_fd

    @property
    def interface_name(self) -> str:
        return f"udpmc:{self._group}:{self._port}"

    @property
    def mtu(self) -> int:
        return self._mtu

    @property
    def number_of_acceptance_filters(self) -> int:
        return _NUM_FILTERS

    def start(
        self,
        handler: Media.ReceivedFramesHandler,
        no_automatic_retransmission: bool,
        error_handler: Media.ErrorHandler | None = None,
    ) -> None:
        if self._closed:
            raise ResourceClosedError(repr(self))
        if self._rx_handler is not None:
            raise RuntimeError(f"{self!r}: start() invoked more than once")
        _ = error_handler, no_automatic_retransmission  # Neither errors nor retransmission exist on this bus.
        self._rx_handler = handler
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # Constructed outside a coroutine: fall back like pycyphal's own media does.
            self._loop = asyncio.get_event_loop()
        self._rx_thread = threading.Thread(target=self._rx_thread_main, name=f"{self.interface_name}-rx", daemon=True)
        self._rx_thread.start()

    def configure_acceptance_filters(self, configuration: Sequence[FilterConfiguration]) -> None:
        """Replace the software filters. Ignored after close instead of raising: the transport reconfigures filters
        while closing its sessions, and must still close cleanly if this media was closed under it (lost bus)."""
        if self._closed:
            return
        self._filters = tuple(configuration)  # Atomic replacement; the receive thread reads the attribute once.

    async def send(self, frames: Iterable[Envelope], monotonic_deadline: float) -> int:
        """Send the frames in order, now, on the caller's thread.

        A frame is a ``sendto`` on a loopback UDP socket: microseconds, and it never waits for a receiver (a full
        receiver drops the datagram), so it runs on the event loop. A transmit thread, as pycyphal's python-can media
        has, cost two thread hand-offs per transfer: on a loaded host they delayed a coordinator's burst of three
        setpoints by 0.03-1.3 s and a node's dynamics by up to a second."""
        if self._closed:
            raise ResourceClosedError(repr(self))
        if self._rx_handler is None:
            raise RuntimeError(f"{self!r}: send() before start()")
        envelopes = list(frames)
        num_sent = 0
        for env in envelopes:
            if self._closed or time.monotonic() >= monotonic_deadline:
                break
            msg = can.Message(
                arbitration_id=env.frame.identifier,
                is_extended_id=env.frame.format == FrameFormat.EXTENDED,
                data=bytes(env.frame.data),
                is_fd=self._is_fd,
                bitrate_switch=self._is_fd,
                channel=self._token,
                is_rx=False,
            )
            try:
                self._bus.send(msg, _TX_TIMEOUT_SEC)
            except (can.CanError, OSError) as ex:
                _logger.debug("%s: send failed: %s", self, ex)
                break
            num_sent += 1
        # Loopback as a CAN controller does it: the frame comes back to us once it is on the bus.
        now = Timestamp.now()
        loopback = [(now, Envelope(env.frame, loopback=True)) for env in envelopes[:num_sent] if env.loopback]
        if loopback:
            asyncio.get_running_loop().call_soon(self._deliver, loopback)
        return num_sent

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        th = self._rx_thread
        if th is not None and th is not threading.current_thread():
            th.join(timeout=_RX_POLL_SEC * 20)
        try:
            self._bus.shutdown()
        except Exception as ex:  # Closing must not fail; python-can only logs its own errors here anyway.
            _logger.warning("%s: bus shutdown error: %s", self, ex)

    @staticmethod
    def list_available_interface_names() -> Iterable[str]:
        return [f"udpmc:{DEFAULT_GROUP}:{DEFAULT_PORT}"]

    # ---------------------------------------------------------------------------------------------------------------

    def _accepts(self, msg: can.Message) -> bool:
        """Software acceptance filtering; an empty configuration rejects everything (per the Media contract)."""
        ext = bool(msg.is_extended_id)
        for f in self._filters:
            if f.format is not None and (f.format == FrameFormat.EXTENDED) != ext:
                continue
            if (msg.arbitration_id & f.mask) == (f.identifier & f.mask):
                return True
        return False

    def _parse(self, msg: can.Message) -> DataFrame | None:
        """Turn a received python-can message into a Cyphal data frame, or None if it must be dropped."""
        if msg.channel == self._token:  # Our own frame echoed by the multicast loopback.
            return None
        if msg.is_error_frame or msg.is_remote_frame or not self._accepts(msg):
            return None
        fmt = FrameFormat.EXTENDED if msg.is_extended_id else FrameFormat.BASE
        try:
            return DataFrame(fmt, int(msg.arbitration_id), bytearray(msg.data))
        except ValueError as ex:
            _logger.debug("%s: malformed frame dropped: %s (%s)", self, msg, ex)
            return None

    def _deliver(self, batch: list[tuple[Timestamp, Envelope]]) -> None:
        """Invoke the transport's handler on the event loop (never after close)."""
        if self._closed or self._rx_handler is None:
            return
        try:
            self._rx_handler(batch)
        except Exception as ex:  # The handler must not kill the loop callback machinery.
            _logger.exception("%s: unhandled exception in the receive handler: %s", self, ex)

    def _rx_thread_main(self) -> None:
        """Block on the bus, batch whatever is immediately available, and hand batches to the event loop."""
        loop = self._loop
        assert loop is not None
        while not self._closed:
            batch: list[tuple[Timestamp, Envelope]] = []
            try:
                msg = self._bus.recv(_RX_POLL_SEC)
                while msg is not None:
                    frame = self._parse(msg)
                    if frame is not None:
                        batch.append((Timestamp.now(), Envelope(frame, loopback=False)))
                    msg = self._bus.recv(0.0)
            except can.CanOperationError as ex:  # Garbage datagram on our port, or the socket went away on close.
                if self._closed:
                    break
                _logger.warning("%s: receive error (continuing): %s", self, ex)
            except Exception as ex:
                if self._closed:
                    break
                _logger.exception("%s: receive thread failure: %s", self, ex)
                time.sleep(_RX_POLL_SEC)
            if batch:
                try:
                    loop.call_soon_threadsafe(self._deliver, batch)
                except RuntimeError:  # Event loop closed: nobody to deliver to any more.
                    break
        _logger.debug("%s: receive thread exits", self)
