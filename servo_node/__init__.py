"""cyphal-servo: a Cyphal node that turns setpoints into jerk-limited motion of a servo drive.

The data flow, one module each::

    setpoint_servo (zubax.telega.ServoCommand) ──► setpoint.py   validate, fill defaults from registers.py
    readiness (zubax.service.Readiness) ─────────► arming.py     readiness gate + deadman timeout
                                                        │
                                                        ▼ axis/ (one servo: ports, intake, follower, reports;
                                                        │        the node shell node.py hosts one or more axes)
                                         control/   ControlLoop: a numba nogil thread, fed through seqlocked arrays
                                           ├─ otg/              time-optimal jerk-limited trajectory (reference)
                                           ├─ control/_kernel   control law: velocity or computed torque
                                           └─ drive/            sim (embedded sim_plant joint) | cyphal (UDRAL drive)
                                                        │
    feedback, status, dynamics, sys.status ◄───────────┘

What the servo shares with the simulated drive (``sim-plant``) lives in :mod:`cyphal_common`: the DSDL and its
compiled cache (``cyphal_common.dsdl``), transports, UDRAL message helpers, the validating registry and the
``sim.*`` joint registers. ``cli/`` is the ``servo-node`` command. ``otg/``, ``control/`` kernels and
``sim_plant`` never import asyncio or pycyphal.

Importing this package does nothing: entry points (``cli``, ``tests/conftest.py``, the bench scripts) compile the
DSDL (:func:`cyphal_common.dsdl.ensure_compiled`) and drop stale numba caches
(:func:`servo_node._kernel_cache.invalidate_if_sources_changed`) before they import the node's modules.
"""
