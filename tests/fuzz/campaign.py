"""Fuzzing campaign against a running ``servo-node`` process over Cyphal/UDP (issue 10): inputs and invariants.

Choice of engine: **hypothesis**, not atheris. The target is another process reached through sockets, so
atheris' coverage feedback (it instruments the interpreter it runs in) would measure the fuzzer, not the node;
what helps here is structure-aware generation (Cyphal/UDP headers, transfers split into frames, DSDL values,
IEEE-754 edge cases, register ``Value`` unions) and, on a failure, shrinking a batch to the few datagrams that
break an invariant, replayable from a seed — hypothesis does both, is already a test dependency, and runs the same
strategies in the short pytest variant (``tests/fuzz/test_fuzz.py``) and the long one (``bench/fuzz.py``).

One **input** is one datagram sent with a raw socket (hand-built header, :mod:`tests.cyphal_udp`) to the node's
subjects (``setpoint_servo``, ``readiness``) or to its service group (``uavcan.register.Access``,
``uavcan.node.ExecuteCommand``, other service-IDs), from random source node-IDs (also anonymous and the node's
own). Kinds: valid transfers (ServoCommand with NaN, ±inf, denormals, ±3.4e38, tiny/huge limits; register writes of
random names, types and sizes; commands), the same transfers split into frames (in and out of order, duplicated,
with huge indices), and corrupted ones (bit flips, bad header/transfer CRC, wrong version, truncated datagrams,
random bytes).

Invariants, checked after every batch (:meth:`Campaign.check`):

- the process is up and its log has no ``Traceback``;
- no heartbeat gap above 1.5 s (heard by an in-process pycyphal subscriber, filtered by the node's node-ID);
- RSS stays within ``rss_limit_kib`` of its value after warm-up;
- nothing moves without a valid armed setpoint: ``readiness`` is configured and never ENGAGED (every readiness
  transfer the fuzzer makes has bit 0 of its value cleared: SLEEP or STANDBY), so the measured position in
  ``dynamics`` must not change and the measured velocity stays 0 — inside any configured limit.

Kept out of the inputs, because they legitimately change motion or the node's identity: writes to ``sim.*`` (e.g.
``sim.position`` moves the simulated joint) and ``uavcan.*`` (port-IDs, node-ID), and the RESTART /
FACTORY_RESET / POWER_OFF commands (a restart would apply such writes). Random register *names* still hit them
by chance only if they are generated exactly; they are filtered.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests import cyphal_udp as wire
from tests.hostile.harness import HEARTBEAT_GAP_LIMIT_S, BusObserver, LoggedNode, logged_servo_node, observer, rss_kib
from tests.procs import base_env

NODE = 2917
OBSERVER = 2988
SETPOINT_SUBJECT = 5121
READINESS_SUBJECT = 5122
DYNAMICS_SUBJECT = 5123
ACCESS = 384
EXECUTE_COMMAND = 435
FORBIDDEN_COMMANDS = {65535, 65534, 65532}  # RESTART, POWER_OFF, FACTORY_RESET.
REGISTER_NAMES = [
    "servo.profile.velocity",
    "servo.profile.acceleration",
    "servo.profile.jerk",
    "servo.torque_limit",
    "servo.deadman_timeout",
    "servo.loop_rate",
    "servo.loop_clock",
    "servo.loop_priority",
    "servo.arrival_tolerance",
    "servo.drive.backend",
    "servo.drive.mode",
    "servo.drive.kind",
    "servo.control.velocity_gain",
    "servo.control.torque_gains",
    "servo.stop.acceleration",
    "servo.stop.jerk",
    "servo.stop.disengage_immediately",
    "servo.dynamics_rate",
    "sys.status",
    "sys.motion",
    "sys.counters",
    "sys.events",
    "sys.last_rejection",
]


# ------------------------------------------------------------------------------------------------ strategies

EDGE_FLOATS = [
    0.0,
    -0.0,
    float("nan"),
    float("inf"),
    -float("inf"),
    3.4e38,
    -3.4e38,
    3.4028235e38,
    1e-45,
    -1e-45,
    1.2e-38,
    1e-30,
    1e30,
    1.0,
    -1.0,
    1e-7,
]
f32 = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(width=32, allow_nan=True, allow_infinity=True))


@st.composite
def servo_command(draw: Any) -> bytes:
    """A ServoCommand payload (32 bytes) or one of its prefixes/extensions (0..63 bytes)."""
    body = struct.pack("<8f", *(draw(f32) for _ in range(8)))
    cut = draw(st.sampled_from([32, 32, 32, 4, 8, 12, 20, 28, 0, 1, 3, 31, 33, 63, 64, 100]))
    return (body + draw(st.binary(min_size=max(0, cut - 32), max_size=max(0, cut - 32))))[:cut]


@st.composite
def readiness(draw: Any) -> bytes:
    """A readiness payload that is never ENGAGED (bit 0 of the value cleared)."""
    data = bytearray(draw(st.binary(min_size=0, max_size=4)))
    if data:
        data[0] &= 0xFE
    return bytes(data)


def _register_value(draw: Any) -> Any:
    import uavcan.primitive
    import uavcan.register

    kind = draw(
        st.sampled_from(
            ["empty", "string", "unstructured", "bit", "integer8", "natural16", "real32", "real64", "integer64"]
        )
    )
    n = draw(st.integers(0, 4))
    if kind == "empty":
        return uavcan.register.Value_1_0(empty=uavcan.primitive.Empty_1_0())
    if kind == "string":
        text = draw(st.sampled_from(["sim", "udral", "velocity", "torque", "monotonic", "stepped", "", "x" * 200]))
        return uavcan.register.Value_1_0(string=uavcan.primitive.String_1_0(text))
    if kind == "unstructured":
        return uavcan.register.Value_1_0(unstructured=uavcan.primitive.Unstructured_1_0(draw(st.binary(max_size=8))))
    if kind == "bit":
        return uavcan.register.Value_1_0(bit=uavcan.primitive.array.Bit_1_0([draw(st.booleans()) for _ in range(n)]))
    if kind == "integer8":
        vals = [draw(st.integers(-128, 127)) for _ in range(n)]
        return uavcan.register.Value_1_0(integer8=uavcan.primitive.array.Integer8_1_0(vals))
    if kind == "integer64":
        vals = [draw(st.integers(-(2**63), 2**63 - 1)) for _ in range(n)]
        return uavcan.register.Value_1_0(integer64=uavcan.primitive.array.Integer64_1_0(vals))
    if kind == "natural16":
        vals = [draw(st.integers(0, 65535)) for _ in range(n)]
        return uavcan.register.Value_1_0(natural16=uavcan.primitive.array.Natural16_1_0(vals))
    if kind == "real32":
        return uavcan.register.Value_1_0(real32=uavcan.primitive.array.Real32_1_0([draw(f32) for _ in range(n)]))
    vals = [draw(st.floats(allow_nan=True, allow_infinity=True)) for _ in range(n)]
    return uavcan.register.Value_1_0(real64=uavcan.primitive.array.Real64_1_0(vals))


@st.composite
def register_write(draw: Any) -> bytes:
    """A serialized ``uavcan.register.Access.Request``: a known or random name, a random value."""
    import pycyphal.dsdl
    import uavcan.register

    name = draw(
        st.one_of(
            st.sampled_from(REGISTER_NAMES),
            st.text(max_size=40).map(lambda s: s.encode()[:255].decode(errors="ignore")),
        )
    )
    if name.startswith(("sim.", "uavcan.")):
        name = "servo." + name
    req = uavcan.register.Access_1_0.Request(name=uavcan.register.Name_1_0(name), value=_register_value(draw))
    return b"".join(pycyphal.dsdl.serialize(req))


@st.composite
def execute_command(draw: Any) -> bytes:
    """A serialized ``uavcan.node.ExecuteCommand.1.1`` request, never RESTART/POWER_OFF/FACTORY_RESET."""
    command = draw(st.integers(0, 65535).filter(lambda c: c not in FORBIDDEN_COMMANDS))
    param = draw(st.binary(max_size=16))
    return struct.pack("<HB", command, len(param)) + param


@dataclasses.dataclass(frozen=True)
class Port:
    """Where a transfer goes: a subject, or a service of the node (request)."""

    subject: int | None = None
    service: int | None = None

    @property
    def group(self) -> str:
        return wire.subject_group(self.subject) if self.subject is not None else wire.service_group(NODE)

    def fields(self) -> dict[str, Any]:
        if self.subject is not None:
            return {"subject": self.subject}
        return {"service": self.service, "destination": NODE, "request": True}


SETPOINT = Port(subject=SETPOINT_SUBJECT)
READINESS = Port(subject=READINESS_SUBJECT)


@st.composite
def transfer(draw: Any) -> tuple[Port, bytes]:
    """A port and a payload that belongs there (or does not)."""
    choice = draw(
        st.sampled_from(
            ["setpoint", "setpoint", "setpoint", "readiness", "access", "access", "command", "other-service", "stray"]
        )
    )
    if choice == "setpoint":
        return SETPOINT, draw(servo_command())
    if choice == "readiness":
        return READINESS, draw(readiness())
    if choice == "access":
        return Port(service=ACCESS), draw(register_write())
    if choice == "command":
        return Port(service=EXECUTE_COMMAND), draw(execute_command())
    if choice == "other-service":
        return Port(service=draw(st.integers(0, 511))), draw(st.binary(max_size=40))
    return SETPOINT, draw(st.binary(max_size=64))  # Anything else on the setpoint subject.


SOURCES = st.one_of(st.integers(1, 65534), st.sampled_from([NODE, wire.ANONYMOUS, 0, 65534, 3000]))


@st.composite
def datagrams(draw: Any) -> list[tuple[str, bytes]]:
    """One transfer's datagrams, possibly split, reordered, duplicated, mutated or corrupted."""
    port, payload = draw(transfer())
    source = draw(SOURCES)
    if port.service is not None and source == wire.ANONYMOUS:
        source = 3000
    tid = draw(st.one_of(st.integers(0, 2**16), st.integers(0, 2**64 - 1)))
    mtu = draw(st.sampled_from([1408, 1408, 1408, 4, 5, 7, 16, 64]))
    frames = wire.transfer_frames(
        payload, mtu, source=source, transfer_id=tid, priority=draw(st.integers(0, 7)), **port.fields()
    )
    mutation = draw(
        st.sampled_from(
            [
                "none",
                "none",
                "none",
                "reorder",
                "duplicate",
                "index",
                "flip",
                "header-crc",
                "payload-crc",
                "version",
                "truncate",
                "garbage",
                "drop",
            ]
        )
    )
    out = list(frames)
    if mutation == "reorder":
        out = draw(st.permutations(out))
    elif mutation == "duplicate":
        out = [*out, draw(st.sampled_from(out))]
    elif mutation == "index":  # Same frame, any index (incl. far beyond the extent), valid header CRC.
        i = draw(st.integers(0, len(out) - 1))
        index = draw(st.one_of(st.integers(0, 40), st.sampled_from([2**31 - 1, 3_000_000, 2**20, 1000])))
        head = wire.header(source=source, transfer_id=tid, index=index, eot=draw(st.booleans()), **port.fields())
        out[i] = head + out[i][wire.HEADER_BYTES :]
    elif mutation == "flip":
        i = draw(st.integers(0, len(out) - 1))
        d = bytearray(out[i])
        bit = draw(st.integers(0, len(d) * 8 - 1))
        d[bit // 8] ^= 1 << (bit % 8)
        out[i] = bytes(d)
    elif mutation == "header-crc":
        out[0] = out[0][:22] + draw(st.binary(min_size=2, max_size=2)) + out[0][24:]
    elif mutation == "payload-crc" and len(out[-1]) > wire.HEADER_BYTES:
        out[-1] = out[-1][:-1] + bytes([out[-1][-1] ^ 0xA5])
    elif mutation == "version":
        head = wire.header(source=source, transfer_id=tid, version=draw(st.integers(0, 255)), **port.fields())
        out[0] = head + out[0][wire.HEADER_BYTES :]
    elif mutation == "truncate":
        out[0] = out[0][: draw(st.integers(0, len(out[0])))]
    elif mutation == "garbage":
        out = [draw(st.binary(min_size=0, max_size=80))]
    elif mutation == "drop" and len(out) > 1:
        out.pop(draw(st.integers(0, len(out) - 1)))
    return [(port.group, _sanitize(port, d)) for d in out]


def _sanitize(port: Port, datagram: bytes) -> bytes:
    """Readiness frames at index 0 never carry an ENGAGED value, whatever the mutation did (the invariant's premise)."""
    if port is not READINESS or len(datagram) <= wire.HEADER_BYTES:
        return datagram
    index = int.from_bytes(datagram[16:20], "little") & 0x7FFFFFFF
    if index != 0:
        return datagram
    d = bytearray(datagram)
    d[wire.HEADER_BYTES] &= 0xFE
    return bytes(d)


def batches(size: int) -> st.SearchStrategy[list[list[tuple[str, bytes]]]]:
    """``size`` transfers' worth of datagrams."""
    return st.lists(datagrams(), min_size=size, max_size=size)


# ------------------------------------------------------------------------------------------------ the campaign


class InvariantViolationError(AssertionError):
    """An invariant of the campaign does not hold."""


class Campaign:
    """A running node under fuzz: send batches, check invariants, count inputs."""

    def __init__(
        self,
        node: LoggedNode,
        obs: BusObserver,
        sender: wire.Sender,
        rss_limit_kib: int,
        max_rate: float,
        tolerate_starvation: bool = False,
    ) -> None:
        self.node = node
        self.obs = obs
        self.sender = sender
        self.rss_limit_kib = rss_limit_kib
        self.max_rate = max_rate
        self.inputs = 0
        self.started = time.monotonic()
        self.rss0 = rss_kib(node.pid)
        self.rss_max = self.rss0
        self.max_gap = 0.0
        first = obs.dynamics_since(0.0)
        if not first:
            raise InvariantViolationError("no dynamics received before the campaign")
        self.position0 = first[-1].position
        self._log_offset = 0
        self.tolerate_starvation = tolerate_starvation
        self.starved_gaps: list[tuple[float, float]] = []
        self._last_heartbeat = self.started
        self._dynamics_seen = self.started
        self.recent: list[Sequence[Sequence[tuple[str, bytes]]]] = []
        self._cpu_at = [(time.monotonic(), cpu_seconds(node.pid))]

    def send(self, batch: Sequence[Sequence[tuple[str, bytes]]]) -> None:
        """Send every datagram of a batch, paced to ``max_rate`` datagrams per second overall."""
        self.recent = [*self.recent[-49:], batch]  # The inputs just before a violation, for the report.
        for datagrams_ in batch:
            for group, data in datagrams_:
                self.sender.sock.sendto(data, (group, wire.CYPHAL_UDP_PORT))
                self.inputs += 1
        ahead = self.inputs / self.max_rate - (time.monotonic() - self.started)
        if ahead > 0:
            time.sleep(ahead)

    def check(self) -> None:
        """Every invariant (see the module docstring); raises :class:`InvariantViolationError`."""
        node = self.node
        if node.proc.poll() is not None:
            raise InvariantViolationError(f"servo-node exited with {node.proc.returncode}: {node.text()[-3000:]}")
        with node.log.open("rb") as f:
            f.seek(self._log_offset)
            new = f.read()
        if b"Traceback" in new:
            raise InvariantViolationError(f"traceback in the node's log:\n{new.decode(errors='replace')[-6000:]}")
        self._log_offset += max(0, len(new) - 16)  # Keep a little overlap so a split word is still found.
        now = time.monotonic()
        self._cpu_at = [*(x for x in self._cpu_at if now - x[0] < 60.0), (now, cpu_seconds(node.pid))]
        self._check_heartbeats(now)
        rss = rss_kib(node.pid)
        self.rss_max = max(self.rss_max, rss)
        if rss - self.rss0 > self.rss_limit_kib:
            raise InvariantViolationError(f"RSS grew {rss - self.rss0} KiB > {self.rss_limit_kib} KiB")
        samples = self.obs.dynamics_since(self._dynamics_seen)
        for d in samples:
            if abs(d.position - self.position0) > 1e-6 or abs(d.velocity) > 1e-6:
                raise InvariantViolationError(
                    f"moved without an armed setpoint: p {self.position0} -> {d.position}, v {d.velocity}"
                )
        if samples:
            self._dynamics_seen = samples[-1].t + 1e-9

    def _cpu_share(self, a: float, b: float) -> float:
        """The node's CPU use between ``a`` and ``b`` as a share of one core (from the samples taken at checks)."""
        before = [x for x in self._cpu_at if x[0] <= a] or self._cpu_at[:1]
        after = [x for x in self._cpu_at if x[0] >= b] or self._cpu_at[-1:]
        (t0, c0), (t1, c1) = before[-1], after[0]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0

    def _check_heartbeats(self, now: float) -> None:
        """Gaps between heartbeats heard since the last check, and the gap still open now.

        With ``tolerate_starvation``, a gap during which the node used less than half a core is recorded in
        :attr:`starved_gaps` instead of failing: the machine did not run the node (nice 19 on shared cores), the
        node did not stall (a stalled node, like the one the poison frame froze, burns a full core). Gaps longer
        than 10 s fail regardless.
        """
        new = self.obs.heartbeats_after(self._last_heartbeat)
        edges = [self._last_heartbeat, *new]
        spans = [(a, b) for a, b in itertools.pairwise(edges)] + [(edges[-1], now)]
        for k, (a, b) in enumerate(spans):
            gap = b - a
            self.max_gap = max(self.max_gap, gap)
            if gap <= HEARTBEAT_GAP_LIMIT_S:
                continue
            share = self._cpu_share(a, b)
            closed = k < len(spans) - 1
            text = (
                f"heartbeat gap {gap:.2f} s > {HEARTBEAT_GAP_LIMIT_S} s; the node used {share:.0%} of a core meanwhile"
            )
            if not self.tolerate_starvation or gap > 10.0 or share >= 0.5:
                raise InvariantViolationError(text + " (a stalled node burns CPU; a starved one does not)")
            if closed:
                self.starved_gaps.append((round(gap, 2), round(share, 2)))
        if new:
            self._last_heartbeat = new[-1]

    def report(self) -> dict[str, Any]:
        """Numbers of the run so far."""
        elapsed = time.monotonic() - self.started
        return {
            "inputs": self.inputs,
            "seconds": round(elapsed, 1),
            "inputs_per_s": round(self.inputs / elapsed, 1) if elapsed > 0 else 0.0,
            "max_heartbeat_gap_s": round(self.max_gap, 3),
            "starved_gaps": self.starved_gaps,
            "rss_start_kib": self.rss0,
            "rss_max_kib": self.rss_max,
            "heartbeats": len(self.obs.heartbeats),
            "dynamics_samples": len(self.obs.dynamics_since(self.started)),
        }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process [s] (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dump(batches_: Sequence[Sequence[Sequence[tuple[str, bytes]]]], path: Path) -> None:
    """Write batches as JSON ([[group, hex datagram], …] per transfer) to replay them with :func:`replay`."""
    path.write_text(json.dumps([[[[g, d.hex()] for g, d in t] for t in b] for b in batches_]))


def replay(path: Path, sender: wire.Sender) -> int:
    """Send the datagrams of a :func:`dump` file again, in order; returns how many."""
    n = 0
    for b in json.loads(path.read_text()):
        for t in b:
            for g, d in t:
                sender.sock.sendto(bytes.fromhex(d), (g, wire.CYPHAL_UDP_PORT))
                n += 1
    return n


def node_env() -> dict[str, str]:
    """The node under fuzz: readiness gate configured (never engaged), uncommon IDs."""
    return base_env(
        UAVCAN__NODE__ID=str(NODE),
        UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT_SUBJECT),
        UAVCAN__SUB__READINESS__ID=str(READINESS_SUBJECT),
        UAVCAN__PUB__DYNAMICS__ID=str(DYNAMICS_SUBJECT),
    )


@contextmanager
def campaign(
    workdir: Path, rss_limit_kib: int = 32 * 1024, max_rate: float = 3000.0, tolerate_starvation: bool = False
) -> Iterator[Campaign]:
    """Start the node, the observer and the raw sender; yield a :class:`Campaign` once dynamics flow."""
    from tests.procs import wait_for

    env = node_env()
    with ExitStack() as stack:
        node = stack.enter_context(logged_servo_node(env, workdir / "servo.db", workdir / "servo.log", NODE))
        obs = stack.enter_context(observer(NODE, OBSERVER, DYNAMICS_SUBJECT))
        tx = stack.enter_context(wire.sender())
        obs.wait_heartbeats(2)
        wait_for(lambda: len(obs.dynamics_since(0.0)) >= 10, 30, what="dynamics samples")
        time.sleep(2.0)  # Let RSS settle after start-up before taking the baseline.
        yield Campaign(node, obs, tx, rss_limit_kib, max_rate, tolerate_starvation)
