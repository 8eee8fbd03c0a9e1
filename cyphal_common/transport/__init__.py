"""Transports for both applications: pycyphal's standard transports plus a multicast virtual CAN bus (udpmc).

``make_transport(registry)`` honours the standard ``uavcan.*`` transport registers exactly like
``pycyphal.application.make_transport`` (``uavcan.node.id``, ``uavcan.udp.*``, ``uavcan.serial.*``,
``uavcan.can.*``, ``uavcan.loopback``), and additionally accepts ``udpmc:`` entries in ``uavcan.can.iface``.

``uavcan.can.iface`` (whitespace-separated; several entries give a redundant transport, entries may be mixed):

======================================  =====================================================================
``socketcan:can0``                      Real SocketCAN hardware (pycyphal's native SocketCAN media, Linux).
``socketcan:vcan0``                     A SocketCAN ``vcan`` virtual bus, where the kernel has one.
``pythoncan:``-style ``<iface>:<ch>``   Any other entry goes to pycyphal's ``PythonCANMedia``: ``virtual:``,
                                        ``virtual:<name>`` (in-process only), ``slcan:/dev/ttyACM0@115200``,
                                        ``pcan:PCAN_USBBUS1``, ``kvaser:0``, ``gs_usb:0``, ``usb2can:<serial>``,
                                        ``canalystii:0``, ``seeedstudio:/dev/ttyUSB0``, ``usbtingo:``; also
                                        pycyphal's ``candump:<log file>`` and ``socketcand:<ch>:<host>[:<port>]``.
``udpmc:239.74.163.2``                  Ours: python-can ``udp_multicast`` virtual CAN bus between processes
``udpmc:<group>:<port>``                on this host (loopback only, TTL 0). The group must be in 239.0.0.0/8;
                                        the port defaults to 43113. Malformed values raise ``UdpmcIfaceError``.
======================================  =====================================================================

Examples: ``udpmc:239.74.163.2`` (single bus), ``udpmc:239.74.163.2 udpmc:239.74.163.3`` (doubly redundant),
``socketcan:can0 udpmc:239.74.163.2`` (mixed, redundant). ``uavcan.can.mtu`` selects Classic CAN (8) or
CAN FD (64) for udpmc ifaces too; ``uavcan.can.bitrate`` has no meaning for udpmc and is ignored there.
Environment form: ``UAVCAN__CAN__IFACE='udpmc:239.74.163.2' UAVCAN__CAN__MTU=64 UAVCAN__NODE__ID=42``.

``open_can_bus(iface)`` opens a plain python-can bus from one such entry (``udpmc:…``, ``virtual:<name>``,
``socketcan:can0``, any ``<python-can interface>:<channel>``) for raw-CAN protocols such as CANopen.

yakut builds its transport with pycyphal's own factory, which does not know ``udpmc:``; instead give it a
transport expression (``--transport`` or ``YAKUT_TRANSPORT``), which yakut evaluates with builtins available::

    YAKUT_TRANSPORT='__import__("cyphal_common.transport",fromlist=["udpmc_transport"]).udpmc_transport("239.74.163.2",100,64)'

(group string, yakut's node-ID or ``None`` for anonymous, MTU); the group string may hold several
space-separated groups for a redundant transport. ``yakut_transport_expression(group, node_id, mtu)`` builds it.
yakut must run with a Python where ``cyphal_common`` is importable (this project's venv).
"""

from ._backlog import bounded_backlog
from ._can_bus import CanIfaceError, UdpMulticastCanBus, open_can_bus
from ._factory import (
    UDPMC_PREFIX,
    UdpmcIfaceError,
    make_transport,
    parse_udpmc_iface,
    udpmc_transport,
    yakut_transport_expression,
)
from ._reassembly_guard import dropped_frames
from ._transfer_ids import continue_after_restart
from ._udp_multicast_media import DEFAULT_GROUP, DEFAULT_PORT, UDPMulticastMedia

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_PORT",
    "UDPMC_PREFIX",
    "CanIfaceError",
    "UDPMulticastMedia",
    "UdpMulticastCanBus",
    "UdpmcIfaceError",
    "bounded_backlog",
    "continue_after_restart",
    "dropped_frames",
    "make_transport",
    "open_can_bus",
    "parse_udpmc_iface",
    "udpmc_transport",
    "yakut_transport_expression",
]
