"""cancel_and_wait ends a task even when it swallows a cancellation, as pycyphal's UDP send does, and even when it is
cancelled itself meanwhile."""

from __future__ import annotations

import asyncio

from cyphal_common.tasks import cancel_and_wait


async def test_a_task_that_swallows_cancellations_still_ends() -> None:
    swallowed = 0

    async def publisher_like() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(1.0)  # A "send" that drops the frame on cancellation and returns.
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 3:
                    raise

    task = asyncio.create_task(publisher_like())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait([task]), timeout=10.0)  # One cancel + gather would wait forever.
    assert task.done() and task.cancelled() and swallowed == 3


async def test_failures_are_retrieved_and_done_tasks_are_fine() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await cancel_and_wait([failed])
    await cancel_and_wait([])
    assert isinstance(failed.exception(), RuntimeError)



async def test_a_parent_cancelled_again_while_ending_its_child_still_ends_it() -> None:
    """A parent whose ``finally`` ends its child with cancel_and_wait, itself ended by cancel_and_wait (which cancels
    it again every retry): the child, which swallows its first cancellation as pycyphal's send does, must be ended
    too, never left running as an orphan (a coordinator's feeder repeating an old setpoint)."""
    children: list[asyncio.Task[None]] = []
    swallowed = 0

    async def feeder() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed > 1:
                    raise

    async def parent() -> None:
        children.append(asyncio.create_task(feeder()))
        try:
            await asyncio.Event().wait()
        finally:
            await cancel_and_wait(children, retry_s=0.2)  # Slower than the re-cancellations of the parent.

    task = asyncio.create_task(parent())
    await asyncio.sleep(0.05)
    await asyncio.wait_for(cancel_and_wait([task], retry_s=0.01), timeout=10.0)
    assert task.cancelled()
    assert children[0].done() and swallowed == 2  # Cancelled again after its first swallow: ended, no orphan.
