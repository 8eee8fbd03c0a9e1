"""A node process hides scipy from numba: its kernels load and run without it, and scipy.linalg stays unloaded."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_SCRIPT = """
import json, sys
from cyphal_common.numba_start import hide_scipy
if {hide}:
    hide_scipy()
from servo_node.otg import plan
from sim_plant import Joint, JointParams
traj = plan(0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0)
joint = Joint(JointParams())
joint.set_position(1.0)
for _ in range(100):
    joint.step(0.001)
loaded = sorted(m for m, v in sys.modules.items() if m.split(".")[0] == "scipy" and v is not None)
print(json.dumps([traj.duration, traj.at(traj.duration)[0], joint.position, loaded]))
"""


def _run(hide: bool) -> list[object]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_SCRIPT.format(hide=hide))],
                         capture_output=True, text=True, timeout=120, check=True)
    return list(json.loads(out.stdout.splitlines()[-1]))


def test_kernels_load_and_run_with_scipy_hidden_and_scipy_linalg_is_never_imported() -> None:
    duration, end, position, loaded = _run(hide=True)
    assert loaded == []
    assert duration > 0 and abs(end - 1.0) < 1e-9 and position > 0  # type: ignore[operator]
    # Without hiding, numba loads scipy.linalg's BLAS (scipy is installed with the test extra, through yakut):
    # the cost hide_scipy() saves. Same results either way.
    duration2, end2, position2, loaded2 = _run(hide=False)
    assert "scipy.linalg" in loaded2  # type: ignore[operator]
    assert (duration2, end2, position2) == (duration, end, position)
