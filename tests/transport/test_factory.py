"""The register-driven factory: standard ifaces delegated to pycyphal, ``udpmc:`` built here, bad values rejected."""

from __future__ import annotations

import os

import pytest
from pycyphal.transport.can import CANTransport
from pycyphal.transport.redundant import RedundantTransport
from pycyphal.transport.udp import UDPTransport

from cyphal_common.transport import UdpmcIfaceError, make_transport

from .conftest import DsdlEnv, Endpoint, random_endpoint

# pycyphal.application needs the compiled uavcan namespace. Tests are coroutines because CAN media bind to the
# running event loop when the transport starts them (as in the application).
pytestmark = pytest.mark.usefixtures("dsdl_env")


async def test_udp_iface_delegated() -> None:
    """A standard UDP configuration yields pycyphal's UDPTransport with the node-ID."""
    tr = make_transport({"uavcan.udp.iface": "127.0.0.1", "uavcan.node.id": 7})
    try:
        assert isinstance(tr, UDPTransport) and tr.local_node_id == 7
    finally:
        assert tr is not None
        tr.close()


async def test_udp_from_environment_via_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """``UAVCAN__UDP__IFACE`` in the environment reaches a real Registry exactly as in pycyphal."""
    from pycyphal.application import make_registry

    monkeypatch.setenv("UAVCAN__UDP__IFACE", "127.0.0.1")
    monkeypatch.setenv("UAVCAN__NODE__ID", "9")
    monkeypatch.delenv("UAVCAN__CAN__IFACE", raising=False)
    registry = make_registry(None, dict(os.environ))
    try:
        tr = make_transport(registry)
        assert isinstance(tr, UDPTransport) and tr.local_node_id == 9
        tr.close()
        assert "uavcan.can.mtu" in registry  # Defaults are exposed as registers, as pycyphal does.
    finally:
        registry.close()


async def test_pythoncan_virtual_delegated() -> None:
    """``virtual:`` goes to pycyphal's PythonCANMedia; two entries give a redundant transport."""
    tr = make_transport({"uavcan.can.iface": "virtual:", "uavcan.node.id": 5})
    assert isinstance(tr, CANTransport) and "PythonCANMedia" in repr(tr)
    tr.close()
    tr = make_transport({"uavcan.can.iface": "virtual: virtual:", "uavcan.node.id": 5})
    assert isinstance(tr, RedundantTransport) and len(tr.inferiors) == 2
    tr.close()


async def test_nothing_configured() -> None:
    """No transport registers: None, or an empty RedundantTransport if reconfigurable (pycyphal semantics)."""
    assert make_transport({}) is None
    tr = make_transport({}, reconfigurable=True)
    assert isinstance(tr, RedundantTransport) and not tr.inferiors
    tr.close()


@pytest.mark.parametrize("mtu", [8, 64])
async def test_udpmc_single(endpoint: Endpoint, mtu: int) -> None:
    """``udpmc:<group>:<port>`` builds a CANTransport on our media with MTU and node-ID from registers."""
    tr = make_transport({"uavcan.can.iface": endpoint.iface, "uavcan.can.mtu": mtu, "uavcan.node.id": 12})
    try:
        assert isinstance(tr, CANTransport) and tr.local_node_id == 12
        assert f"UDPMulticastMedia('udpmc:{endpoint.group}:{endpoint.port}', mtu={mtu})" in repr(tr)
        assert tr.protocol_parameters.mtu == mtu - 1  # The CAN tail byte takes one.
    finally:
        assert tr is not None
        tr.close()


async def test_udpmc_default_port_and_anonymous() -> None:
    """The port is optional (43113); node-ID 65535 means anonymous."""
    group = random_endpoint().group
    tr = make_transport({"uavcan.can.iface": f"udpmc:{group}", "uavcan.node.id": 0xFFFF})
    try:
        assert isinstance(tr, CANTransport) and tr.local_node_id is None
        assert f"udpmc:{group}:43113" in repr(tr)
    finally:
        assert tr is not None
        tr.close()


async def test_udpmc_redundant_and_mixed() -> None:
    """Several udpmc entries, or udpmc mixed with a pycyphal iface, give one RedundantTransport."""
    a, b = random_endpoint(), random_endpoint()
    tr = make_transport({"uavcan.can.iface": f"{a.iface} {b.iface}", "uavcan.node.id": 3})
    assert isinstance(tr, RedundantTransport) and len(tr.inferiors) == 2
    assert all(isinstance(t, CANTransport) and t.local_node_id == 3 for t in tr.inferiors)
    tr.close()
    tr = make_transport({"uavcan.can.iface": f"virtual: {a.iface}", "uavcan.node.id": 3})
    assert isinstance(tr, RedundantTransport) and len(tr.inferiors) == 2
    text = repr(tr)
    assert "PythonCANMedia('virtual:'" in text and "UDPMulticastMedia" in text
    tr.close()
    tr = make_transport({"uavcan.can.iface": a.iface}, reconfigurable=True)
    assert isinstance(tr, RedundantTransport) and len(tr.inferiors) == 1
    tr.close()


async def test_udpmc_with_register_proxies_writes_defaults(endpoint: Endpoint) -> None:
    """A mutable mapping of ValueProxy is used in place: missing standard registers get their defaults."""
    from pycyphal.application.register import Natural16, ValueProxy

    regs = {"uavcan.can.iface": ValueProxy(endpoint.iface), "uavcan.node.id": ValueProxy(Natural16([4]))}
    tr = make_transport(regs)
    assert isinstance(tr, CANTransport) and tr.local_node_id == 4
    tr.close()
    assert int(regs["uavcan.can.mtu"]) == 64
    assert "uavcan.udp.iface" in regs  # pycyphal's own part ran on the same mapping.


@pytest.mark.parametrize(
    ("iface", "fragment"),
    [
        ("udpmc:", "expected udpmc:<group-ip>"),
        ("udpmc:10.1.2.3", "239.0.0.0/8"),
        ("udpmc:224.0.0.251", "239.0.0.0/8"),
        ("udpmc:not-an-ip", "Invalid multicast group"),
        ("udpmc:239.1.2.3:0", "bad port"),
        ("udpmc:239.1.2.3:70000", "bad port"),
        ("udpmc:239.1.2.3:http", "bad port"),
        ("udpmc:239.1.2.3:1:2", "expected udpmc:<group-ip>"),
        ("udpmc:ff15::1", "expected udpmc:<group-ip>"),
        ("virtual: udpmc:239.1.2.3:x", "bad port"),
    ],
)
async def test_udpmc_malformed(iface: str, fragment: str) -> None:
    """Malformed udpmc entries raise UdpmcIfaceError naming the bad value, before any transport is built."""
    with pytest.raises(UdpmcIfaceError) as info:
        make_transport({"uavcan.can.iface": iface})
    assert fragment in str(info.value)
    bad = iface.split()[-1]
    assert repr(bad) in str(info.value)
    assert isinstance(info.value, ValueError)


async def test_dsdl_fixture_is_used(dsdl_env: DsdlEnv) -> None:
    """Sanity: the compiled uavcan namespace is importable for pycyphal.application."""
    import uavcan.register

    assert uavcan.register.Value_1_0 is not None
    assert dsdl_env.output.is_dir()
