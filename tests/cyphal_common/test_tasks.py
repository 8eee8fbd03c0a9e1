"""cancel_and_wait ends a task even when it swallows a cancellation, as pycyphal's UDP send does."""

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
