"""Seqlocked float64 arrays: one writer, any number of readers, nobody blocks (numba ``nogil``).

Slot 0 is the sequence number: the writer makes it odd (:func:`begin_write`), writes, makes it even
(:func:`end_write`); :func:`read_seqlocked` copies until it saw an even, unchanged sequence number. Memory fences
keep the compiler (and a weakly ordered CPU) from moving the data's loads and stores across the sequence number's.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from numba import types
from numba.extending import intrinsic

from ._jit import tick_jit

TRY_READS = 64
"""Attempts of :func:`try_read_seqlocked`: a writer running on another core finishes its update within a few."""


@intrinsic
def _fence(typingctx: Any, ordering: Any) -> Any:
    """A memory fence of ``ordering`` (a literal string: ``"acquire"`` or ``"release"``)."""
    if not isinstance(ordering, types.StringLiteral):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        builder.fence(ordering.literal_value)
        return context.get_dummy_value()

    return types.void(ordering), codegen


@tick_jit
def try_read_seqlocked(src: np.ndarray, dst: np.ndarray) -> bool:
    """Copy a seqlocked array if the writer is not mid-update within :data:`TRY_READS` attempts; False otherwise,
    and ``dst`` may then hold a torn copy. For a reader that must not wait for a writer (the control loop, which may
    run at real-time priority above it: a writer preempted mid-update would be waited for until it ran again)."""
    for _ in range(TRY_READS):
        s0 = src[0]
        _fence("acquire")
        if (int(s0) & 1) != 0:
            continue
        for k in range(src.size):
            dst[k] = src[k]
        _fence("acquire")
        if s0 == src[0]:
            return True
    return False


def read_seqlocked(src: np.ndarray, dst: np.ndarray) -> None:
    """Copy a seqlocked array consistently, retrying for as long as the writer is mid-update (for a reader whose
    writer is the control loop, which finishes within a tick). Between attempts the reader yields its core: under
    SCHED_FIFO a reader that spun would hold the core the preempted writer waits for at the same priority (a node
    started at real-time priority, as a deployment or a timing test starts it), until the kernel's real-time
    throttling gave the rest 5 % of a second."""
    while not try_read_seqlocked(src, dst):
        os.sched_yield()


@tick_jit
def begin_write(a: np.ndarray) -> None:
    """Mark ``a`` as being written (odd sequence number)."""
    a[0] += 1.0
    _fence("release")


@tick_jit
def end_write(a: np.ndarray) -> None:
    """Publish the fields written since :func:`begin_write` (even sequence number)."""
    _fence("release")
    a[0] += 1.0
