"""A motion waits for a drive that does not take commands yet.

When the loop engages, a bus drive is asked to enable (ODrive: CLOSED_LOOP_CONTROL; CiA 402: Operation Enabled),
and until its state says so it ignores what it is sent (``M_TAKING`` 0, from the backend). Planning on would run
the reference away from a joint that cannot follow (odrive-can's mock takes 0.5 s to change state: the following
error stopped the move before the drive moved). So while the drive does not take commands the plan's time stands
still and the following error is not judged; once it does, the motion is planned again from the measured state,
since any of the reference that ran before the drive said no was not followed. The backend bounds the wait: an
enable not confirmed within its timeout is a drive fault, and the stop takes over.
"""

from __future__ import annotations

import numpy as np

from .._jit import tick_jit
from . import _layout as L
from ._layout import LoopArrays
from ._stages import plan_motion


@tick_jit
def await_drive(now: float, dt: float, A: LoopArrays) -> None:
    """Hold the active plan's time while the drive does not take commands; re-plan from the measured state once it
    does (see the module docstring). Stops, mimic and a disengaged loop are not held."""
    st, m = A.st, A.meas
    mode = st[L.ST_MODE]
    if st[L.ST_ENGAGED] == 0.0 or (mode != L.MODE_POSITION and mode != L.MODE_VELOCITY):
        st[L.ST_DRIVE_WAIT] = 0.0
        return
    if m[L.M_TAKING] == 0.0 or (st[L.ST_DRIVE_WAIT] != 0.0 and m[L.M_FRESH] != 1.0):
        if st[L.ST_DRIVE_WAIT] == 0.0:
            st[L.ST_DRIVE_WAIT] = 1.0
            st[L.ST_DRIVE_WAITED] = 0.0
        st[L.ST_T0] += dt  # The reference stands where it is.
        st[L.ST_DRIVE_WAITED] += dt
        st[L.ST_FE_SINCE] = np.nan
        return
    if st[L.ST_DRIVE_WAIT] != 0.0:
        st[L.ST_DRIVE_WAIT] = 0.0
        plan_motion(now, A, m[L.M_P], m[L.M_V], 0.0)
