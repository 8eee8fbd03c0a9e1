"""Seqlocked float64 arrays: one writer, any number of readers, nobody blocks (numba ``nogil``).

Slot 0 is the sequence number: the writer makes it odd (:func:`begin_write`), writes, makes it even
(:func:`end_write`); :func:`read_seqlocked` copies until it saw an even, unchanged sequence number.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def read_seqlocked(src: np.ndarray, dst: np.ndarray) -> None:
    """Copy a seqlocked array consistently (retries while the writer is mid-update)."""
    while True:
        s0 = src[0]
        dst[:] = src
        if s0 == src[0] and (int(s0) & 1) == 0:
            return


@njit(cache=True, nogil=True)
def begin_write(a: np.ndarray) -> None:
    """Mark ``a`` as being written (odd sequence number)."""
    a[0] += 1.0


@njit(cache=True, nogil=True)
def end_write(a: np.ndarray) -> None:
    """Publish the fields written since :func:`begin_write` (even sequence number)."""
    a[0] += 1.0
