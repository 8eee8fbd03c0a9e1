"""Transport construction from ``uavcan.*`` registers: pycyphal's standard factory plus our ``udpmc:`` CAN ifaces.

Everything except ``udpmc:`` entries in ``uavcan.can.iface`` is handled by
``pycyphal.application.make_transport`` itself (same registers, same defaults written back to the registry,
same redundancy rules), so behaviour only differs where our virtual bus is involved.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from pycyphal.transport import InvalidMediaConfigurationError, Transport
from pycyphal.transport.can import CANTransport
from pycyphal.transport.redundant import RedundantTransport

from . import _reassembly_guard, _udp_emission, _udp_reception
from ._udp_multicast_media import DEFAULT_GROUP, DEFAULT_PORT, UDPMulticastMedia, validate_group, validate_port

if TYPE_CHECKING:
    from pycyphal.application.register import ValueProxy

__all__ = [
    "UDPMC_PREFIX",
    "UdpmcIfaceError",
    "make_transport",
    "parse_udpmc_iface",
    "udpmc_transport",
    "yakut_transport_expression",
]

UDPMC_PREFIX = "udpmc:"
"""Prefix of our iface syntax in ``uavcan.can.iface``: ``udpmc:<group-ip>[:<port>]``."""

_ANONYMOUS = 0xFFFF  # Per the Cyphal register spec, uavcan.node.id = 65535 means "unset".


class UdpmcIfaceError(InvalidMediaConfigurationError, ValueError):
    """A ``udpmc:`` iface string is malformed (also a ``ValueError`` for callers that expect one)."""


def parse_udpmc_iface(iface: str) -> tuple[str, int]:
    """Parse ``udpmc:<group>[:<port>]`` (the prefix is optional here) into ``(group, port)``, or raise clearly."""
    spec = iface.strip()
    body = spec[len(UDPMC_PREFIX) :] if spec.lower().startswith(UDPMC_PREFIX) else spec
    expected = (
        f"expected udpmc:<group-ip>[:<port>] with the group in 239.0.0.0/8 and port in [1, 65535], "
        f"e.g. udpmc:{DEFAULT_GROUP} or udpmc:{DEFAULT_GROUP}:{DEFAULT_PORT}"
    )
    parts = body.split(":")
    if not body or len(parts) > 2 or not parts[0]:
        raise UdpmcIfaceError(f"Malformed CAN iface {iface!r}: {expected}")
    try:
        group = validate_group(parts[0])
    except InvalidMediaConfigurationError as ex:
        raise UdpmcIfaceError(f"Malformed CAN iface {iface!r}: {ex}; {expected}") from None
    port = DEFAULT_PORT
    if len(parts) == 2:
        try:
            port = validate_port(int(parts[1], 10))
        except (ValueError, InvalidMediaConfigurationError):
            raise UdpmcIfaceError(f"Malformed CAN iface {iface!r}: bad port {parts[1]!r}; {expected}") from None
    return group, port


def udpmc_transport(group: str = DEFAULT_GROUP, node_id: int | None = None, mtu: int = 64) -> Transport:
    """Cyphal/CAN transport on our multicast virtual bus; usable from a yakut ``--transport`` expression.

    ``group`` is ``<group>[:<port>]`` or ``udpmc:<group>[:<port>]``; several whitespace-separated entries give a
    ``RedundantTransport`` over one CAN transport per group. ``node_id`` None (or 65535) means anonymous.
    """
    specs = [parse_udpmc_iface(s) for s in group.split()]
    if not specs:
        raise UdpmcIfaceError(f"No multicast group given in {group!r}")
    nid = None if node_id is None or node_id == _ANONYMOUS else int(node_id)
    transports: list[Transport] = []
    try:
        for grp, port in specs:
            transports.append(CANTransport(UDPMulticastMedia(grp, port, mtu), nid))
        return transports[0] if len(transports) == 1 else _redundant(transports)
    except BaseException:
        for t in transports:
            t.close()
        raise


def yakut_transport_expression(group: str | Sequence[str], node_id: int | None, mtu: int = 64) -> str:
    """The ``YAKUT_TRANSPORT`` / ``--transport`` value that makes yakut use our bus (see the package docstring)."""
    groups = group if isinstance(group, str) else " ".join(group)
    for spec in groups.split():
        parse_udpmc_iface(spec)  # Fail here, not inside yakut.
    nid = "None" if node_id is None else str(int(node_id))
    return (
        '__import__("cyphal_common.transport",fromlist=["udpmc_transport"])'
        f".udpmc_transport({json.dumps(groups)},{nid},{int(mtu)})"
    )


def make_transport(registry: Mapping[str, Any], *, reconfigurable: bool = False) -> Transport | None:
    """Build the node's transport from ``uavcan.*`` registers like pycyphal does, plus ``udpmc:`` CAN ifaces.

    ``registry`` is a ``pycyphal.application.register.Registry`` (missing registers are created from defaults and
    from ``UAVCAN__*`` environment variables, as pycyphal does), a mutable mapping of ``ValueProxy`` (defaults
    are written back), or a plain mapping of native values such as ``{"uavcan.node.id": 42}`` (left untouched).
    Returns None if nothing is configured, one transport, or a ``RedundantTransport`` for several
    (always a ``RedundantTransport`` if ``reconfigurable``), exactly like ``pycyphal.application.make_transport``.
    """
    from pycyphal.application import make_transport as std_make_transport
    from pycyphal.application.register import Natural16, Natural32, ValueProxy

    _reassembly_guard.install()  # UDP/serial reassembly bounded by the extent (see _reassembly_guard).
    _udp_reception.install()  # UDP input sessions read by the event loop, no thread each (see _udp_reception).
    _udp_emission.install()  # UDP frames sent straight from the socket, no task each (see _udp_emission).
    regs = _as_registers(registry)

    def init(name: str, default: Any) -> ValueProxy:
        return regs.setdefault(name, ValueProxy(default))

    ifaces = str(init("uavcan.can.iface", "")).split()
    udpmc = [parse_udpmc_iface(i) for i in ifaces if i.lower().startswith(UDPMC_PREFIX)]  # Validate before building.
    if not udpmc:
        return std_make_transport(regs, reconfigurable=reconfigurable)

    node_id: int | None = int(init("uavcan.node.id", Natural16([_ANONYMOUS])))
    if node_id is not None and not (0 <= node_id < _ANONYMOUS):
        node_id = None
    mtu = int(init("uavcan.can.mtu", Natural16([64])))
    init("uavcan.can.bitrate", Natural32([1_000_000, 4_000_000]))  # Meaningless on udpmc; exposed as pycyphal does.

    others = " ".join(i for i in ifaces if not i.lower().startswith(UDPMC_PREFIX))
    # pycyphal builds everything else (UDP, serial, loopback, non-udpmc CAN) from the same registers.
    red = std_make_transport(_IfaceOverlay(regs, ValueProxy(others)), reconfigurable=True)
    assert isinstance(red, RedundantTransport)
    try:
        for group, port in udpmc:
            media = UDPMulticastMedia(group, port, mtu)
            try:
                tr = CANTransport(media, node_id)
            except BaseException:
                media.close()
                raise
            try:
                red.attach_inferior(tr)
            except BaseException:
                tr.close()
                raise
    except BaseException:
        red.close()
        raise

    if reconfigurable or len(red.inferiors) > 1:
        return red
    (single,) = red.inferiors
    red.detach_inferior(single)
    red.close()
    return single


def _redundant(transports: Sequence[Transport]) -> RedundantTransport:
    """Join transports under one ``RedundantTransport`` (frames deduplicated, survives loss of an inferior)."""
    red = RedundantTransport()
    for t in transports:
        red.attach_inferior(t)
    return red


def _as_registers(registry: Mapping[str, Any]) -> MutableMapping[str, ValueProxy]:
    """Use a register mapping as is (so defaults land in it); wrap a mapping of native values in a new dict."""
    from pycyphal.application.register import Registry, ValueProxy

    if isinstance(registry, Registry):
        return registry
    if isinstance(registry, MutableMapping) and all(isinstance(v, ValueProxy) for v in registry.values()):
        return registry
    return {str(k): v if isinstance(v, ValueProxy) else ValueProxy(v) for k, v in registry.items()}


class _IfaceOverlay(MutableMapping[str, "ValueProxy"]):
    """The registry seen by pycyphal's factory: ``uavcan.can.iface`` without our ``udpmc:`` entries."""

    _KEY = "uavcan.can.iface"

    def __init__(self, base: MutableMapping[str, ValueProxy], can_iface: ValueProxy) -> None:
        self._base = base
        self._can_iface = can_iface

    def __getitem__(self, key: str) -> ValueProxy:
        return self._can_iface if key == self._KEY else self._base[key]

    def __setitem__(self, key: str, value: ValueProxy) -> None:
        if key == self._KEY:
            self._can_iface = value
        else:
            self._base[key] = value

    def __delitem__(self, key: str) -> None:
        del self._base[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)

    def setdefault(self, key: str, default: Any = None) -> ValueProxy:
        # Delegate so that a Registry applies UAVCAN__* environment variables to newly created registers.
        return self._can_iface if key == self._KEY else self._base.setdefault(key, default)
