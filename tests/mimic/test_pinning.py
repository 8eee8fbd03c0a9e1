"""``servo.mimic.leader_node_id`` pins the leader: another node's samples on the leader's subjects are foreign
(counted, never followed), even when they come first. Shell and axis in one process on the simulated loop
clock, over a real UDP transport (see ``tests/node/test_shell``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import zubax
import zubax.physics.dynamics
import zubax.physics.kinematics
import zubax.service.actuator
from pycyphal.application.heartbeat_publisher import Health

from servo_node.axis import Axis
from servo_node.axis._reports import feedback_message
from servo_node.node import ServoNode
from tests.node.test_shell import CLIENT, Client, servo_env

LEADER_DYNAMICS, LEADER_FEEDBACK = 3771, 3772
Leader = Callable[[float], Awaitable[None]]
"""Publishes one engaged leader's feedback and dynamics sample at a position."""


def _sample(position: float) -> zubax.physics.dynamics.DoF3rdTs_1_0:
    kin = zubax.physics.kinematics.DoF3rd_1_0(
        base=zubax.physics.kinematics.DoF2nd_1_0(position=position, velocity=0.0), acceleration=0.0
    )
    return zubax.physics.dynamics.DoF3rdTs_1_0(
        timestamp=zubax.Timestamp_1_0(microsecond=int(time.time() * 1e6)),
        value=zubax.physics.dynamics.DoF3rd_1_0(kinematics=kin),
    )


@asynccontextmanager
async def _follower(pinned: int, client: Client) -> AsyncIterator[tuple[Axis, Leader]]:
    """A follower axis (simulated loop clock) pinned to ``pinned``, and the client's (node CLIENT) publication of
    an engaged leader's streams at ``position``."""
    env = servo_env(
        UAVCAN__SUB__MIMIC_LEADER__ID=str(LEADER_DYNAMICS),
        UAVCAN__SUB__MIMIC_LEADER_FEEDBACK__ID=str(LEADER_FEEDBACK),
        SERVO__MIMIC__LEADER_NODE_ID=str(pinned),
    )
    dyn = client.node.make_publisher(zubax.physics.dynamics.DoF3rdTs_1_0, LEADER_DYNAMICS)
    fb = client.node.make_publisher(zubax.service.actuator.Feedback_1_0, LEADER_FEEDBACK)

    async def lead(position: float) -> None:
        await fb.publish(feedback_message(True, Health.NOMINAL, 0.0))
        await dyn.publish(_sample(position))

    try:
        async with ServoNode(None, env, loop_clock="simulated") as node:
            yield node.axis(), lead
    finally:
        dyn.close()
        fb.close()


async def _lead(pinned: int, client: Client) -> dict[str, object]:
    """The view of a follower pinned to ``pinned`` after the client published an engaged leader's streams."""
    async with _follower(pinned, client) as (axis, lead):
        for _ in range(200):  # The leader's streams until the follower has either ignored or followed them.
            await lead(2.0)
            view = axis.mimic()
            if view["foreign"] >= 10 or view["following"]:
                break
            await asyncio.sleep(0.02)
        axis.advance(0.3)  # Within the lost-leader deadman (0.5 s) of the last sample.
        view = axis.mimic()
        view["position"] = axis.loop.sample().position
        return view


async def test_a_pinned_leader_ignores_another_node_even_first() -> None:
    client = Client()
    try:
        view = await _lead(CLIENT + 1, client)  # Not the client: everything it sends is foreign.
        assert view["leader"] == CLIENT + 1 and view["foreign"] >= 10 and not view["following"]
        assert view["position"] == 0.0
        view = await _lead(CLIENT, client)  # The client is the leader: followed (the joint moves towards 2).
        assert view["leader"] == CLIENT and view["following"] and view["foreign"] == 0
        assert 0.0 < float(view["position"]) <= 2.0  # type: ignore[arg-type]
    finally:
        client.node.close()


async def test_a_lost_leader_is_stopped_by_the_loop_and_the_gate_only_backs_it_up() -> None:
    """The gate and the loop judge a lost leader by the same samples: when the gate's deadman is seen first, the
    loop's own stop (which says "lost leader") still comes first; the gate stops the loop itself only if that has
    not happened within LOST_LEADER_GRACE_S (a CI run saw the gate win that race and the reason lost)."""
    client = Client()
    try:
        async with _follower(CLIENT, client) as (axis, lead):
            async def follow() -> float:
                for _ in range(200):
                    await lead(0.5)
                    await asyncio.sleep(0.02)
                    axis.advance(0.01)  # The loop takes the mimic command at its next tick.
                    if axis.mimic()["following"]:
                        break
                assert axis.mimic()["following"], (axis.mimic(), axis.status())
                axis.advance(0.1)  # No sample after the last one: the deadman runs from its reception.
                return axis.now()

            t = await follow()
            ahead = t + 0.5  # Past the deadman (0.5 s) of a sample received at or before t.
            axis.now = lambda: ahead  # type: ignore[method-assign]
            axis.supervise()  # The gate expires before the loop has ticked past its deadman…
            del axis.now
            assert not axis.loop.sample().stopping  # …and leaves the stop to the loop,
            axis.advance(0.5)
            assert "lost leader" in axis.mimic()["stop"], axis.mimic()  # which says why.
            assert "lost leader" in axis.status()["servo"]["reason"]
            axis.advance(2.0)

            t = await follow()  # Following again; now the loop does not stop in time (its clock is held back).
            for late in (t + 0.5, t + 0.5 + 0.06):
                axis.now = lambda late=late: late  # type: ignore[method-assign,misc]
                axis.supervise()
            del axis.now
            axis.loop.advance(0.005)
            assert axis.loop.sample().stopping  # The gate's backstop stopped it.
    finally:
        client.node.close()
