"""How the control tick's functions are compiled: :data:`tick_jit`."""

from __future__ import annotations

from numba import njit

tick_jit = njit(cache=True, nogil=True, _nrt=False)
"""The decorator of a function of the control tick: compiled once into the on-disk cache, run without the GIL, and
without numba's reference counting (NRT; functions it compiles for the first time inherit that).

A tick allocates nothing, so NRT has nothing to manage; with it, a function that took the loop's arrays
(``LoopArrays``, about twenty arrays) and called another counted a reference to every one of them on entry and on
exit, atomically, whether it used them or not: an idle tick took 2.1 µs with it and 0.46 µs without, a moving one
3.2 and 0.46 µs. And without NRT the compiler refuses an allocation in these functions and in what they call (the
drive's, the OTG's and the simulated joint's kernels), which is how "no allocation per tick" is kept."""


@tick_jit
def runtime(flag: bool) -> bool:
    """``flag`` as a value, not a constant: numba compiles a function once more for every constant argument it is
    called with (the OTG's solver, called with ``True``, ``False`` and a variable ``rule``, was compiled three times
    over, and everything it calls with it)."""
    return bool(flag)  # (returned as is, a constant would stay one)
