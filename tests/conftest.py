"""Test-session entry point: drop stale numba caches, then compile the project's DSDL; isolate xdist workers.

Both happen before any test module is imported: kernel modules load their numba caches when imported, and
``pycyphal.application`` (imported by most test modules) imports the ``uavcan`` namespace. A pytest-xdist worker
moves onto a network of its own first (``tests/isolation.py``), so parallel workers never hear each other.
"""

import os
import signal

import pytest

from cyphal_common import dsdl
from servo_node._kernel_cache import invalidate_if_sources_changed
from tests import isolation, procs

BUS_SCENARIOS = (
    "tests/system/",
    "tests/coord/test_system.py",
    "tests/cyphal_common/test_timesync.py",
    "tests/hanoi/test_run.py",
    "tests/hostile/test_trust.py",
    "tests/mimic/test_processes.py",
    "tests/multihost/",
    "tests/node/test_udral_face.py",
    "tests/scope/",
    "tests/sim_plant_node/test_arm_node.py",
    "tests/sim_plant_node/test_bus.py",
    "tests/sim_plant_node/test_cia402_faults.py",
    "tests/sim_plant_node/test_cia402_modes.py",
    "tests/sim_plant_node/test_quick_stop.py",
    "tests/sim_plant_node/test_units.py",
)
"""Tests whose verdicts depend on real processes keeping real time (servo nodes, drives, tracking over the bus,
stops to rest; ``test_trust``'s drive is a thread of the test process that integrates the servo's commands: stalled
beside the timing stream, it fell behind and the servo rightly saw a following error). They run one at a time, on one
worker (xdist group ``bus``), from the start of the run, their nodes real-time where permitted, while the other
worker runs the tests that only compute or whose processes only need to answer, not to keep time (broken register
files, refused writes, frames across processes): two bus scenarios at once beside the computing tests starved each
other's real-time nodes (a dozen timing verdicts failed with three free workers on two cores)."""

LATE_BUS_SCENARIOS = (
    "tests/fuzz/",
    "tests/hanoi/test_run.py::test_out_of_reach_is_refused_before_anything_moves",
    "tests/hostile/test_poison_frame.py",
    "tests/hostile/test_setpoint_subject.py",
    "tests/node/test_many_axes.py",
    "tests/node/test_yakut_workflow.py",
    "tests/sim_plant_node/test_cia402_eds.py",
    "tests/sim_plant_node/test_cia402_interop.py",
    "tests/sim_plant_node/test_cia402_nmt.py",
    "tests/sim_plant_node/test_bus.py::test_invalid_register_is_a_clear_startup_error",
    "tests/sim_plant_node/test_cia402_process_fault.py",
    "tests/system/test_cia402.py::test_a_fixed_mapping_without_a_needed_object_is_a_clear_error",
    "tests/system/test_cia402.py::test_absent_drive_or_wrong_node_id_is_a_clear_error",
)
"""Scenarios with real processes whose verdicts are what the nodes count, refuse, answer or report (hostile peers,
the fuzzing campaign's invariants, the yakut workflow, CANopen objects and NMT), with generous heartbeat bounds,
not tracking. They too run one at a time (xdist group ``bus-late``), but last: a worker takes them once the
computing tests are done, beside the ``bus`` group, whose time goes to motion, start-ups and answers more than to the
CPU (earlier idle figures quoted here came from runs whose ``y pub`` ignored SIGINT; see :func:`_default_sigint`). Their
nodes do not run real-time (``procs.realtime_permitted``): a fuzzed or flooded node would compete at the same FIFO
priority with the timing stream's nodes. A test named here is taken out of a module of :data:`BUS_SCENARIOS` (its
verdict is an error report, not timing)."""

SCENARIOS = BUS_SCENARIOS + LATE_BUS_SCENARIOS


def _stream(item: pytest.Item) -> str | None:
    """The item's xdist group of scenarios: ``bus``, ``bus-late`` (which wins: it names single tests of ``bus``
    modules), or None for a test that only computes."""
    if item.nodeid.startswith(LATE_BUS_SCENARIOS):
        return "bus-late"
    return "bus" if item.nodeid.startswith(BUS_SCENARIOS) else None


def _run_order(item: pytest.Item) -> int:
    """The ``bus`` group first (the longest stream), then the packaging tests (the longest computing one), the
    computing tests, and the ``bus-late`` group last: pytest-xdist hands out the groups in this order
    (``--no-loadscope-reorder``)."""
    stream = _stream(item)
    if stream is not None:
        return 0 if stream == "bus" else 3
    return 1 if item.nodeid.startswith("tests/packaging/") else 2


COMPUTE_NICE = 15
"""A parallel worker runs the tests that only compute at this niceness (and bus scenarios at 0): when both run at
once, the scenario's processes get the cores they need (CFS weights about 1:30), the computing ones the rest."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    procs.realtime_permitted = _stream(item) == "bus"  # Only timing verdicts need real-time nodes.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0 if item.nodeid.startswith(SCENARIOS) else COMPUTE_NICE)
        except OSError:  # Lowering the niceness again needs root: then everything stays as it is.
            pass


@pytest.hookimpl(tryfirst=True)  # Before pytest-xdist's own hook turns the groups into node-ID suffixes.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_run_order)  # stable: within each part, the collection's order
    for item in items:
        stream = _stream(item)
        if stream is not None:
            item.add_marker(pytest.mark.xdist_group(stream))


def _default_sigint() -> None:
    """Take SIGINT's default handling back if this process inherited it ignored.

    A shell starts a background job (``make test &``, a CI runner's) with SIGINT ignored, and every process started
    from it inherits that through ``exec``. A command that installs no handler of its own (``y pub``) then never ends
    on the SIGINT that stops it: each stop waited 10 s for SIGKILL, and the scenario tests took 2–3 times as long.
    A Python handler is reset at ``exec``, so the processes the tests start begin with the default again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    _default_sigint()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            isolation.isolate()
        except OSError as ex:
            pytest.exit(f"a parallel run needs each worker on a network of its own (root): {ex}; run with -n 0", 2)


invalidate_if_sources_changed()
dsdl.ensure_compiled()
