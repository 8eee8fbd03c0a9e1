"""A monotonic clock, an absolute-deadline sleep and a wake-able idle wait, callable from numba ``nogil`` code (POSIX,
via libc).

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
_poll = types.ExternalFunction("poll", types.int32(types.voidptr, types.uint64, types.int32))
_read = types.ExternalFunction("read", types.intp(types.int32, types.voidptr, types.uintp))
_POLLIN = 1


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


@njit(cache=True, nogil=True)
def wait_or_wake(fd: int, deadline_ns: int, timespec: np.ndarray, pollfd: np.ndarray, scratch: np.ndarray) -> bool:
    """Sleep until CLOCK_MONOTONIC reaches ``deadline_ns`` (rounded up to the millisecond) or the eventfd ``fd`` is
    written; True if woken by ``fd`` (then drained). ``pollfd`` is int32[2] scratch (a ``struct pollfd``),
    ``scratch`` uint64[1]. A failed wait (an interruption included) sleeps to the deadline instead: never a spin."""
    remaining = deadline_ns - monotonic_ns(timespec)
    if remaining <= 0:
        return False
    pollfd[0] = fd
    pollfd[1] = _POLLIN  # events POLLIN, revents 0 (little-endian halves of the second word)
    ready = _poll(pollfd.ctypes, 1, (remaining + 999_999) // 1_000_000)
    if ready > 0 and (pollfd[1] >> 16) & _POLLIN:
        _read(fd, scratch.ctypes, 8)
        return True
    if ready != 0:  # Failed or interrupted, or the fd is not readable but in error (POLLNVAL, POLLERR).
        sleep_until_ns(deadline_ns, timespec)
    return False
