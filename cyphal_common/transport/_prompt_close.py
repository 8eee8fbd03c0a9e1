"""Prompt close of pycyphal's Cyphal/UDP input sessions: a wake-up socket in each reader thread's ``select``.

Why: in pycyphal 1.27 every UDP input session has a reader thread that polls its socket with
``select.select([socket], [], [], 0.1)`` (``pycyphal/transport/udp/_session/_input.py``; its own TODO asks for "a
dedicated socket for aborting the select call"). ``close()`` sets a flag and joins that thread, so each close waits
for the next poll: up to 0.1 s per session, one session after another. A servo node closes a dozen sessions and took
0.65–0.9 s to exit on SIGINT, a one-shot client the same; every idle session also wakes its thread ten times a
second, each time taking the GIL from the event loop.

What: :func:`install` replaces the ``select`` module that pycyphal's UDP input module reads with one whose
``select`` adds a wake-up socket of the calling thread to the readable set, and waits at most :data:`POLL_S` (the
reader's other exits — a closed socket or event loop — are still seen, later); ``close()`` is wrapped to wake the
session's thread before pycyphal joins it. Nothing else changes: the reader loop, its frames and its errors stay
pycyphal's. The patch is written against pycyphal 1.27 (pinned); :func:`install` checks what it relies on and raises
:class:`PromptCloseError` if pycyphal changed underneath (``tests/transport/test_prompt_close.py`` fails the same way).
"""

from __future__ import annotations

import functools
import select as _select
import socket
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from pycyphal.transport.udp._session import _input
from pycyphal.transport.udp._session._input import UDPInputSession

__all__ = ["POLL_S", "PromptCloseError", "install", "installed"]

POLL_S = 1.0
"""Longest wait of a reader thread's ``select`` (pycyphal's own: 0.1 s). Only the exits that do not go through
``close()`` (its socket or event loop closed underneath) wait for it; ``close()`` wakes the thread at once."""

_MARK = "_cyphal_servo_prompt_close"
_lock = threading.Lock()
_wakers: dict[int, tuple[socket.socket, socket.socket]] = {}
"""Per reader thread (by ident): the socket its ``select`` also waits on, and the one ``close()`` writes to."""


class PromptCloseError(RuntimeError):
    """pycyphal's UDP input session no longer has the shape this patch was written against."""


def _waker(ident: int) -> tuple[socket.socket, socket.socket]:
    """The thread's wake-up pair (the end its ``select`` waits on, the end ``close()`` writes to), made if new."""
    with _lock:
        pair = _wakers.get(ident)
        if pair is None:
            pair = socket.socketpair()
            for s in pair:
                s.setblocking(False)
            _wakers[ident] = pair
    return pair


def _wake(ident: int) -> None:
    """Make the thread's next (or current) ``select`` return at once; its socket is made here if the thread has
    not polled yet, so a wake-up sent before its first poll is not lost."""
    try:
        _waker(ident)[1].send(b"\0")
    except OSError:  # Full (already woken) or closed underneath: the thread wakes either way.
        pass


def _forget(ident: int | None) -> None:
    with _lock:
        pair = _wakers.pop(ident, None) if ident is not None else None
    if pair is not None:
        for s in pair:
            s.close()


class _WakeableSelect(ModuleType):
    """The ``select`` module as pycyphal's UDP input module sees it once installed."""

    def __init__(self) -> None:
        super().__init__("select", "select with a per-thread wake-up socket (cyphal_common.transport)")

    def __getattr__(self, name: str) -> Any:
        return getattr(_select, name)

    @staticmethod
    def select(rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any],
               timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
        wake = _waker(threading.get_ident())[0]
        wait = POLL_S if timeout is None else max(timeout, POLL_S)
        ready, writable, exceptional = _select.select([*rlist, wake], wlist, xlist, wait)
        if wake in ready:
            ready.remove(wake)
            try:
                while wake.recv(64):
                    pass
            except OSError:  # Drained.
                pass
        return ready, writable, exceptional


def installed() -> bool:
    """True once :func:`install` has patched pycyphal's UDP input sessions in this process."""
    return bool(getattr(UDPInputSession.close, _MARK, False))


def _check_contract() -> None:
    reader = getattr(UDPInputSession, "_reader_thread", None)
    code = getattr(reader, "__code__", None)
    if vars(_input).get("select") is not _select or code is None or "select" not in code.co_names:
        raise PromptCloseError("pycyphal's UDP input session no longer polls with select.select in _reader_thread: "
                               "cyphal_common.transport._prompt_close needs updating for this pycyphal")
    if any("close" in vars(cls) for cls in UDPInputSession.__subclasses__()):
        raise PromptCloseError("a pycyphal UDP input session class overrides close(): "
                               "cyphal_common.transport._prompt_close needs updating for this pycyphal")
    if "_thread" not in UDPInputSession.__init__.__code__.co_names:
        raise PromptCloseError("pycyphal's UDP input session no longer keeps its reader as self._thread: "
                               "cyphal_common.transport._prompt_close needs updating for this pycyphal")


def install() -> None:
    """Patch pycyphal's Cyphal/UDP input sessions to close at once; idempotent, thread-safe.

    :raises PromptCloseError: pycyphal's reader changed; the patch refuses to guess — pin or update it.
    """
    with _lock:
        if installed():
            return
        _check_contract()
        original = UDPInputSession.close

        @functools.wraps(original)
        def close(self: UDPInputSession) -> None:
            thread = getattr(self, "_thread", None)
            ident = thread.ident if thread is not None else None
            self._closed = True  # What pycyphal's close sets first; set here so that the woken reader sees it.
            if ident is not None:
                _wake(ident)
            try:
                original(self)
            finally:
                if thread is None or not thread.is_alive():
                    _forget(ident)

        setattr(close, _MARK, True)
        vars(_input)["select"] = _WakeableSelect()
        UDPInputSession.close = close  # type: ignore[method-assign]
