"""Issue 10 item 1 at bus level: one Cyphal/UDP frame with a huge index must not stop a running ``servo-node``.

Without the reassembly guard, index 2³¹−1 with end-of-transfer stalls the node for ~24 s and takes ~4 GB; index
3,000,000 stalls it ~5.6 s and keeps ~1.1 GB. Here the node moves in velocity mode (setpoints sent with a raw
socket), the setpoints stop, and the poison datagram follows at once — the deadman must fire on time (measured
by the node itself: ``expired_after_s``), heartbeats keep coming (no gap > 1.5 s), ``y r`` answers, the joint
does not run on, and RSS grows < 10 MB. The same datagram is also aimed at the register service.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests import cyphal_udp as wire
from tests.hostile.harness import HEARTBEAT_GAP_LIMIT_S, BusObserver, LoggedNode, logged_servo_node, observer, rss_kib
from tests.procs import NOT_REALTIME_LATE_S, RegisterClient, base_env, wait_for, y

NODE = 3713
OBSERVER = 3990
ATTACKER = 3001
COMMANDER = 3002
SETPOINT_SUBJECT = 6101
DYNAMICS_SUBJECT = 6102
DEADMAN_S = 0.5
RSS_GROWTH_LIMIT_KIB = 10 * 1024
REGISTER_ACCESS_SERVICE = 384


def servo_command(position: float, velocity: float) -> bytes:
    """zubax.telega.ServoCommand.1.0: target (position, velocity, force), profile pairs, jerk; zeros = defaults."""
    return struct.pack("<8f", position, velocity, 0, 0, 0, 0, 0, 0)


class Commander:
    """Sends velocity-mode setpoints at 20 Hz from a thread until stopped (a publisher that then falls silent)."""

    def __init__(self, sender: wire.Sender, transfer_id: int) -> None:
        self.sender = sender
        self.transfer_id = transfer_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.last_sent = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.send_one()
            self._stop.wait(0.05)

    def send_one(self) -> None:
        frames = wire.transfer_frames(
            servo_command(float("inf"), 1.0),
            1408,
            source=COMMANDER,
            subject=SETPOINT_SUBJECT,
            transfer_id=self.transfer_id,
        )
        self.sender.send(wire.subject_group(SETPOINT_SUBJECT), frames)
        self.transfer_id += 1
        self.last_sent = time.monotonic()

    def __enter__(self) -> Commander:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def poison(index: int, *, subject: int | None = None, service_to: int | None = None, transfer_id: int = 77) -> bytes:
    """One 48-byte datagram: a frame of a multi-frame transfer with the given index and end-of-transfer set."""
    if service_to is not None:
        head = wire.header(
            source=ATTACKER,
            service=REGISTER_ACCESS_SERVICE,
            destination=service_to,
            transfer_id=transfer_id,
            index=index,
            eot=True,
        )
    else:
        head = wire.header(source=ATTACKER, subject=subject, transfer_id=transfer_id, index=index, eot=True)
    return head + bytes(range(24))


@pytest.fixture()
def env() -> dict[str, str]:
    return base_env(
        UAVCAN__NODE__ID=str(NODE),
        UAVCAN__SUB__SETPOINT_SERVO__ID=str(SETPOINT_SUBJECT),
        UAVCAN__PUB__DYNAMICS__ID=str(DYNAMICS_SUBJECT),
        SERVO__DEADMAN_TIMEOUT=str(DEADMAN_S),
    )


@pytest.fixture()
def running(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[LoggedNode, BusObserver]]:
    with (
        logged_servo_node(env, tmp_path / "servo.db", tmp_path / "servo.log", NODE) as node,
        observer(NODE, OBSERVER, DYNAMICS_SUBJECT) as obs,
    ):
        obs.wait_heartbeats(2)
        yield node, obs


@pytest.mark.parametrize("index", [2**31 - 1, 3_000_000])
def test_poison_frame_leaves_node_responsive(
    index: int, env: dict[str, str], running: tuple[LoggedNode, BusObserver]
) -> None:
    node, obs = running
    with wire.sender() as tx, closing(RegisterClient(env, NODE, client_node_id=3804)) as reader:
        rss0 = rss_kib(node.pid)
        with Commander(tx, transfer_id=1) as cmd:
            engaged = lambda: reader.json("sys.status")["servo"]["state"] == "engaged"  # noqa: E731
            wait_for(engaged, 60, what="engaged by raw setpoints")
        # The publisher just fell silent; the poison follows at once (as in the reproduction).
        t_poison = time.monotonic()
        tx.send(wire.subject_group(SETPOINT_SUBJECT), [poison(index, subject=SETPOINT_SUBJECT)])
        tx.send(wire.service_group(NODE), [poison(index, service_to=NODE)])
        silent_since = cmd.last_sent

        s = wait_for(lambda: (s := reader.json("sys.status")["servo"])["state"] == "expired" and s, 30, what="expiry")
        assert DEADMAN_S <= s["expired_after_s"] <= DEADMAN_S + NOT_REALTIME_LATE_S, s  # The node's own measure.
        # Register access answers (another client node-ID: the one just used is in its 2 s transfer-ID timeout).
        assert y("r", str(NODE), "servo.deadman_timeout", client_id=3803).strip() == str(DEADMAN_S)

        while time.monotonic() - t_poison < 4.0:  # A window of several heartbeat periods after the poison.
            time.sleep(0.2)
        gap = obs.heartbeat_gaps(since=t_poison)
        assert gap <= HEARTBEAT_GAP_LIMIT_S, f"heartbeat gap {gap:.2f} s after the poison frame"

        after = obs.dynamics_since(silent_since)
        assert after, "no dynamics received after the setpoints stopped"
        run_on = max(d.position for d in after) - after[0].position
        assert run_on < 1.0, f"the joint ran on {run_on:.2f} units after the setpoints stopped (1 unit/s, 0.5 s)"

        growth = rss_kib(node.pid) - rss0
        assert growth < RSS_GROWTH_LIMIT_KIB, f"RSS grew by {growth} KiB"
        node.assert_alive_and_clean()
        assert "cannot belong to a transfer within the extent" in node.text()  # Dropped and reported, not ignored.
