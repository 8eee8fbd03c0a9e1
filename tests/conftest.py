"""Test-session entry point: drop stale numba caches, then compile the project's DSDL.

Both happen before any test module is imported: kernel modules load their numba caches when imported, and
``pycyphal.application`` (imported by most test modules) imports the ``uavcan`` namespace.
"""

from cyphal_common import dsdl
from servo_node._kernel_cache import invalidate_if_sources_changed

invalidate_if_sources_changed()
dsdl.ensure_compiled()
