"""Test-session entry point: drop stale numba caches, then compile the project's DSDL; isolate xdist workers.

Both happen before any test module is imported: kernel modules load their numba caches when imported, and
``pycyphal.application`` (imported by most test modules) imports the ``uavcan`` namespace. A pytest-xdist worker
moves onto a network of its own first (``tests/isolation.py``), so parallel workers never hear each other.
"""

import os

import pytest

from cyphal_common import dsdl
from servo_node._kernel_cache import invalidate_if_sources_changed
from tests import isolation


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            isolation.isolate()
        except OSError as ex:
            pytest.exit(f"a parallel run needs each worker on a network of its own (root): {ex}; run with -n 0", 2)


invalidate_if_sources_changed()
dsdl.ensure_compiled()
