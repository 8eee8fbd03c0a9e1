"""Start of a node process that loads numba kernels: keep numba from importing scipy, which no node uses.

numba imports scipy whenever it is installed: its version check on ``import numba``, and ``scipy.linalg``'s BLAS
on the first kernel it loads (for ``np.dot`` and friends), 0.13 s of every start on a 2-core machine. No kernel of
this project uses BLAS and no node process uses scipy, yet scipy is often installed beside it (yakut depends on
it). A node's entry point hides it, so numba starts as in an install without scipy.
"""

from __future__ import annotations

import sys


def hide_scipy() -> None:
    """Make ``import scipy`` fail in this process unless it was imported already; call before importing numba."""
    if "scipy" not in sys.modules:
        sys.modules["scipy"] = None  # type: ignore[assignment]  # import then raises ModuleNotFoundError
