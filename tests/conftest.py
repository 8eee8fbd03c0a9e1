"""Test-session entry point: drop stale numba caches, then compile the project's DSDL; isolate xdist workers.

Both happen before any test module is imported: kernel modules load their numba caches when imported, and
``pycyphal.application`` (imported by most test modules) imports the ``uavcan`` namespace. A pytest-xdist worker
moves onto a network of its own first (``tests/isolation.py``), so parallel workers never hear each other.
"""

import os
import signal
import time

import pytest

from cyphal_common import dsdl
from servo_node._kernel_cache import invalidate_if_sources_changed
from tests import isolation, procs

BUS_SCENARIOS = (
    "tests/system/",
    "tests/coord/test_scenario.py",
    "tests/coord/test_system.py",
    "tests/hanoi/test_run.py",
    "tests/hostile/test_canopen_trust.py",
    "tests/hostile/test_poison_frame.py",
    "tests/hostile/test_trust.py",
    "tests/mimic/test_processes.py",
    "tests/console/test_server.py",
    "tests/odrive/test_system.py",
    "tests/odrive/test_their_mock.py",
    "tests/sim_plant_node/test_cia402_process_fault.py",
    "tests/multihost/",
)
"""Tests whose verdicts depend on real processes keeping real time (servo nodes, drives, tracking over the bus, stops to
rest; ``test_trust``'s drive is a thread of the test process that integrates the servo's commands). They run one at
a time, on one worker (xdist group ``bus``), from the start of the run, as a deployment runs a machine's motion
processes: the nodes under SCHED_FIFO (``procs.realtime``), the test's own process and what it starts (a
coordinator, a scope, yakut, a drive) just below them (``procs.scenario_realtime``), where permitted (root). The
other workers, and whatever else the machine runs, then take the cores only when the scenario does not need them.
The stream's tests that run the control loop's kernels wait for the warm-up to compile them
(:data:`WITHOUT_LOOP_KERNELS`); the ``sim-plant`` scenarios of :data:`LIGHT_BUS_SCENARIOS`, which do not, go first.

Never two heavy streams side by side: two real-time scenarios at once (three servo nodes at 1 kHz each take most of
a core of a slow machine) took the cores from each other and from everything else, and their verdicts then depended
on how fast the machine was (issue 50: 13 failures on an idle 2-core machine, most of them two scenarios at once).
The one real-time stream beside it is :data:`CANOPEN_SCENARIOS`, light and late."""

CANOPEN_SCENARIOS = (
    "tests/system/test_cia402.py",
    "tests/system/test_cia402_bus.py",
    "tests/system/test_cia402_drives.py",
)
"""The CiA 402 scenarios: one servo node and its emulated drives on a CAN bus each, under half a core on average
(measured alone, idle 2-core machine: 0.39–0.56 cores busy over each module), and about 140 s of the ``bus``
stream's 570. They are a real-time stream of their own (xdist group ``bus-canopen``, SCHED_FIFO as ``bus``), handed
out last, when the computing tests are done and the ``bus`` stream, at about 1 core at most, has the machine to
itself otherwise: its second core was idle for the last 300 s of the run. A test named in
:data:`LATE_BUS_SCENARIOS` stays there."""

LIGHT_BUS_SCENARIOS = (
    "tests/cyphal_common/test_timesync.py",
    "tests/node/test_udral_face.py",
    "tests/scope/",
    "tests/sim_plant_node/test_arm_node.py",
    "tests/sim_plant_node/test_bus.py",
    "tests/sim_plant_node/test_cia402_faults.py",
    "tests/sim_plant_node/test_cia402_modes.py",
    "tests/sim_plant_node/test_quick_stop.py",
    "tests/sim_plant_node/test_units.py",
    "tests/system/test_signals.py",
)
"""Timing scenarios that spend their time waiting (a deadman, a control timeout, a time-sync period, a coasting,
quick-stopping or gravity-loaded joint of ``sim-plant``, the emulated CiA 402 drive's stops and mode changes, a
signal's safe stop on the stepped clock, a recording, the UDRAL face's moves), not computing much: under 0.7
core-seconds per second of their own (the UDRAL face, with its yakut processes, is the heaviest; when every node start
cost a second of CPU, it slowed the coordination scenarios beside it from 14 s to 21 s). They are part of the ``bus``
stream, real-time where permitted as its others are; those without the loop's kernels first, while the warm-up
compiles them."""

LATE_BUS_SCENARIOS = (
    "tests/console/test_browser.py",
    "tests/fuzz/",
    "tests/hanoi/test_run.py::test_out_of_reach_is_refused_before_anything_moves",
    "tests/hostile/test_setpoint_subject.py",
    "tests/node/test_many_axes.py",
    "tests/node/test_yakut_workflow.py",
    "tests/sim_plant_node/test_cia402_eds.py",
    "tests/sim_plant_node/test_cia402_interop.py",
    "tests/sim_plant_node/test_cia402_nmt.py",
    "tests/sim_plant_node/test_bus.py::test_invalid_register_is_a_clear_startup_error",
    "tests/system/test_cia402.py::test_a_fixed_mapping_without_a_needed_object_is_a_clear_error",
    "tests/system/test_cia402.py::test_absent_drive_or_wrong_node_id_is_a_clear_error",
)
"""Scenarios with real processes whose verdicts are what the nodes count, refuse, answer or report (hostile peers,
the fuzzing campaign's invariants, the yakut workflow, CANopen objects and NMT, the console's page in the browser),
with generous heartbeat bounds,
not tracking. They too run one at a time (xdist group ``bus-late``), on the worker free once the warm-up is done
(:func:`_run_order`), beside the ``bus`` group, whose time goes to motion, start-ups and answers more than to the
CPU (earlier idle figures quoted here came from runs whose ``y pub`` ignored SIGINT; see :func:`_default_sigint`). Their
nodes do not run real-time (``procs.realtime_permitted``): a fuzzed or flooded node would compete at the same FIFO
priority with the timing stream's nodes. A test named here is taken out of a module of :data:`BUS_SCENARIOS` (its
verdict is an error report, not timing)."""

SCENARIOS = BUS_SCENARIOS + LIGHT_BUS_SCENARIOS + LATE_BUS_SCENARIOS
REALTIME_STREAMS = ("bus", "bus-canopen")


def _stream(item: pytest.Item) -> str | None:
    """The item's xdist group of scenarios: ``bus`` or ``bus-canopen`` (real-time), ``bus-late`` (which wins: it
    names single tests of the others' modules), or None for a test that only computes."""
    if item.nodeid.startswith(LATE_BUS_SCENARIOS):
        return "bus-late"
    if item.nodeid.startswith(CANOPEN_SCENARIOS):
        return "bus-canopen"
    return "bus" if item.nodeid.startswith(BUS_SCENARIOS + LIGHT_BUS_SCENARIOS) else None


WITHOUT_LOOP_KERNELS = (
    "tests/cyphal_common/",
    "tests/dsdl/",
    "tests/otg/",
    "tests/packaging/",
    "tests/sim_plant/",
    "tests/sim_plant_node/",
    "tests/test_architecture.py",
    "tests/test_layering.py",
    "tests/transport/",
)
"""Tests that run none of the control loop's kernels (the last and longest the warm-up compiles, after the OTG's
and the joint's): ``make test`` starts pytest before that compilation ends, and these run meanwhile."""
WITH_LOOP_KERNELS = ("tests/sim_plant_node/test_quick_stop.py",)
"""Exceptions within :data:`WITHOUT_LOOP_KERNELS` (a servo node drives the plant)."""


def _needs_loop_kernels(item: pytest.Item) -> bool:
    """True if the test runs the control loop's kernels (a servo node, in-process or started)."""
    return item.nodeid.startswith(WITH_LOOP_KERNELS) or not item.nodeid.startswith(WITHOUT_LOOP_KERNELS)


def _run_order(item: pytest.Item) -> tuple[int, bool]:
    """pytest-xdist hands out the groups in this order (``--no-loadscope-reorder``), one to each worker first: the
    ``bus`` group (the longest stream), then the computing tests without the control loop's kernels, the ``bus-late``
    group, the packaging tests, the computing tests with those kernels and the ``bus-canopen`` group, to whichever
    worker is free (the last when the computing tests are done: :data:`CANOPEN_SCENARIOS`): the
    ``bus-late`` group, a stream of its own, starts about when the warm-up is done (it would wait for it anyway)
    rather than last; the packaging tests (the longest computing part, most of it numba compiling the kernels again
    in a new venv) after it, not beside the warm-up, whose compilation the ``bus`` stream waits for. Within each
    group, the tests without the control loop's kernels first (they need not wait for the warm-up to compile them:
    :func:`_await_warm_up`)."""
    kernels = _needs_loop_kernels(item)
    stream = _stream(item)
    if stream is not None:
        return {"bus": 0, "bus-late": 4, "bus-canopen": 7}[stream], kernels
    if item.nodeid.startswith("tests/packaging/"):
        return 5, kernels
    return (6 if kernels else 3), kernels


WARM_UP_STATUS = "SERVO_WARMUP_STATUS"
"""Names the file where a warm-up running beside pytest puts its exit status when it ends (``make test``: written
aside, then renamed into place)."""
_warm = False
WARM_UP_WAIT_S = 900
"""How long the first test of a process that runs the control loop's kernels waits for the warm-up to end."""


def _await_warm_up(item: pytest.Item) -> None:
    """Before the first test of this process that runs the control loop's kernels, wait for the warm-up to end (it
    compiles them once; a test would compile its own copy meanwhile); a failed warm-up ends the run."""
    global _warm
    status_file = os.environ.get(WARM_UP_STATUS)
    if _warm or not status_file or not _needs_loop_kernels(item):
        return
    deadline = time.monotonic() + WARM_UP_WAIT_S
    while not os.path.exists(status_file):
        if time.monotonic() > deadline:
            pytest.exit(f"the warm-up did not end within {WARM_UP_WAIT_S} s ({status_file} not written)", 2)
        time.sleep(0.1)
    with open(status_file) as f:
        status = f.read().strip()
    if status != "0":
        pytest.exit(f"the warm-up failed (status {status}): the kernels are not compiled", 2)
    _warm = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # When and where each test started, in the JUnit XML beside its time (``make test``: .venv/pytest.xml): the
    # suite's wall time is its longest stream's, and which one that is shows only on a timeline.
    item.user_properties += [("started", f"{time.time():.2f}"), ("worker", os.environ.get("PYTEST_XDIST_WORKER", ""))]
    _await_warm_up(item)
    # Only timing verdicts need real-time processes: the scenario's nodes (procs.realtime), and the test's own
    # process with what it starts (procs.scenario_realtime). Everything else runs as the user's other work does.
    procs.realtime_permitted = _stream(item) in REALTIME_STREAMS
    procs.scenario_realtime(procs.realtime_permitted)


@pytest.hookimpl(tryfirst=True)  # Before pytest-xdist's own hook turns the groups into node-ID suffixes.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_run_order)  # stable: within each part, the collection's order
    for item in items:
        stream = _stream(item)
        if stream is not None:
            item.add_marker(pytest.mark.xdist_group(stream))
        if os.environ.get(WARM_UP_STATUS) and _needs_loop_kernels(item) and item.get_closest_marker("timeout") is None:
            # Its setup may wait for the warm-up (up to WARM_UP_WAIT_S), inside pytest-timeout's guard: ci37's
            # console test waited 264 s of the default 300 s. A guard against a hang, not a verdict on speed.
            item.add_marker(pytest.mark.timeout(int(config.getini("timeout") or 300) + WARM_UP_WAIT_S))


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
