"""A monotonic clock and an absolute-deadline sleep callable from numba ``nogil`` code (POSIX, via libc).

Binding the libc symbols as numba external functions (rather than ctypes pointers) keeps the kernels cacheable.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

_CLOCK_MONOTONIC = 1
_TIMER_ABSTIME = 1

_clock_gettime = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.voidptr))
_clock_nanosleep = types.ExternalFunction(
    "clock_nanosleep", types.int32(types.int32, types.int32, types.voidptr, types.voidptr)
)


@njit(cache=True, nogil=True)
def monotonic_ns(timespec: np.ndarray) -> int:
    """CLOCK_MONOTONIC [nanosecond]; ``timespec`` is a caller-owned int64[2] scratch array."""
    _clock_gettime(_CLOCK_MONOTONIC, timespec.ctypes)
    return int(timespec[0] * 1_000_000_000 + timespec[1])


@njit(cache=True, nogil=True)
def sleep_until_ns(deadline_ns: int, timespec: np.ndarray) -> None:
    """Sleep until CLOCK_MONOTONIC reaches ``deadline_ns`` (returns at once if it has passed)."""
    timespec[0] = deadline_ns // 1_000_000_000
    timespec[1] = deadline_ns % 1_000_000_000
    while _clock_nanosleep(_CLOCK_MONOTONIC, _TIMER_ABSTIME, timespec.ctypes, timespec.ctypes) != 0:
        pass  # EINTR: sleep again toward the same absolute deadline.
