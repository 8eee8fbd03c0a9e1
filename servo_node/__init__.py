"""cyphal-servo: a Cyphal node that turns setpoints into jerk-limited motion of a servo drive.

The data flow, one module each::

    setpoint_servo (zubax.telega.ServoCommand) ──► setpoint.py   validate, fill defaults from registers.py
    readiness (zubax.service.Readiness) ─────────► arming.py     readiness gate + deadman timeout
                                                        │
                                                        ▼ axis.py (one servo: ports, intake.py, reports.py; the
                                                        │          node shell node.py hosts one or more axes)
                                         control/   ControlLoop: a numba nogil thread, fed through seqlocked arrays
                                           ├─ otg/              time-optimal jerk-limited trajectory (reference)
                                           ├─ control/_kernel   control law: velocity or computed torque
                                           └─ drive/            sim (embedded sim_plant joint) | cyphal (UDRAL drive)
                                                        │
    feedback, status, dynamics, sys.status ◄───────────┘

``_dsdl.py`` compiles the project's own DSDL (``dsdl/``) once into a content-keyed cache; ``cli/`` is the
``servo-node`` command. ``otg/``, ``control/`` kernels and ``sim_plant`` never import asyncio or pycyphal.
"""

from ._kernel_cache import invalidate_if_sources_changed as _invalidate_stale_kernels

_invalidate_stale_kernels()  # Before any kernel module loads its numba cache.
