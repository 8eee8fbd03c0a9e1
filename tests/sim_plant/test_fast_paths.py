"""The lean serial loop and the parallel kernel give bit-for-bit the results of the general path, on a random mix."""

from __future__ import annotations

import numpy as np

from sim_plant import JointArray, JointParams, _joint
from sim_plant import _kernels as k

N_JOINTS = 3 * k.PARALLEL_BLOCK + 37  # several parallel blocks, the last one partial


def _random_mix(rng: np.random.Generator) -> tuple[list[JointParams], list[int]]:
    """Random joints (springs, dampers, friction, loads, gravity, stops, soft limits, stiff/slow) and some chains."""
    joints = []
    for _ in range(N_JOINTS):
        stops = rng.random() < 0.3
        soft = rng.random() < 0.3
        lo = rng.uniform(-2.0, 1.0)
        min_stop = -rng.uniform(0.1, 2.0) if stops else 0.0
        max_stop = rng.uniform(0.1, 2.0) if stops else 0.0
        joints.append(
            JointParams(
                kind="linear" if rng.random() < 0.5 else "rotational",
                inertia=float(10.0 ** rng.uniform(-3, 1)),
                max_velocity=rng.uniform(0.0, 20.0),
                max_force=0.0 if rng.random() < 0.15 else rng.uniform(0.0, 50.0),
                control_p=float(10.0 ** rng.uniform(-1, 3)),  # up to 1000: P·h > 0.1 forces substeps at 1 ms
                acceleration=-1.0 if rng.random() < 0.5 else rng.uniform(0.0, 200.0),
                position=rng.uniform(min_stop, max_stop) if stops else rng.uniform(-1.0, 1.0),
                min_position=lo if soft else 0.0,
                max_position=lo + rng.uniform(0.0, 2.0) if soft else 0.0,
                min_stop=min_stop,
                max_stop=max_stop,
                spring_constant=0.0 if rng.random() < 0.4 else float(10.0 ** rng.uniform(-1, 4)),
                damping_constant=0.0 if rng.random() < 0.4 else rng.uniform(0.0, 20.0),
                static_friction=0.0 if rng.random() < 0.5 else rng.uniform(0.0, 5.0),
                load=0.0 if rng.random() < 0.6 else rng.uniform(-5.0, 5.0),
                gravity_load=0.0 if rng.random() < 0.7 else rng.uniform(-5.0, 5.0),
            )
        )
    # chains: a root with one child, partners far apart so that chains cross parallel blocks
    parents = [-1] * N_JOINTS
    order = rng.permutation(N_JOINTS)
    for a, b in zip(order[0:60:2], order[1:60:2], strict=True):
        parents[int(b)] = int(a)
    return joints, parents


def _command(arrays: list[JointArray], rng: np.random.Generator) -> None:
    """The same random commands to a random subset of joints of every array."""
    for i in rng.choice(N_JOINTS, size=N_JOINTS // 5, replace=False):
        what = rng.integers(6)
        x = rng.uniform(-3.0, 3.0)
        for arr in arrays:
            if what == 0:
                arr.set_position(int(i), x)
            elif what == 1:
                arr.set_position(int(i), np.inf if x > 0 else -np.inf)
                arr.set_velocity(int(i), x)
            elif what == 2:
                arr.set_force(int(i), 10.0 * x)
            elif what == 3:
                arr.set_motor_force(int(i), abs(x) if x > -2.0 else 0.0)
            elif what == 4:
                arr.set_control_p(int(i), 10.0 ** abs(x))
            else:
                arr.set_acceleration(int(i), -1.0 if x < 0.0 else 50.0 * x)


def test_lean_and_parallel_paths_match_general_path_bit_for_bit() -> None:
    rng = np.random.default_rng(20261122)
    joints, parents = _random_mix(rng)
    general, lean, parallel = (JointArray(joints, parents) for _ in range(3))
    steppers = [
        (general, k.step_joints_general),
        (lean, k.step_joints),
        (parallel, k.step_joints_parallel),
    ]
    dts = [1e-3] * 40 + [2e-3, 1e-3, 5e-4, 1e-3, 0.0, 1e-2] + [1e-3] * 40
    for n, dt in enumerate(dts):
        if n % 7 == 0:
            _command([general, lean, parallel], rng)
        for arr, step in steppers:
            step(arr.params, arr.state, dt)
        np.testing.assert_array_equal(lean.state, general.state, err_msg=f"lean path, step {n}")
        np.testing.assert_array_equal(parallel.state, general.state, err_msg=f"parallel path, step {n}")
    outputs = [k.S_POSITION, k.S_VELOCITY, k.S_ACCELERATION, k.S_MOTOR_FORCE_FEEDBACK, k.S_VC]
    assert np.all(np.isfinite(general.state[:, outputs]))
    # the mix took both paths: lean joints (cache valid for 1 ms) and general ones (gravity, chains, substeps)
    lean_ok = [
        params[k.P_PARENT] < 0 and params[k.P_CHILD] < 0 and params[k.P_GRAVITY_LOAD] == 0 for params in general.params
    ]
    assert 100 < sum(lean_ok) < N_JOINTS


def test_joint_array_step_uses_parallel_kernel_for_large_arrays() -> None:
    joints, parents = _random_mix(np.random.default_rng(7))
    small = JointArray(joints, parents)
    assert len(small) < _joint.PARALLEL_MIN_JOINTS and not small._parallel
    reference = JointArray(joints, parents)
    big = JointArray(joints, parents)
    big._parallel = True  # as chosen automatically from PARALLEL_MIN_JOINTS joints on
    for arr in (small, big):
        arr.set_position(3, 0.5)
        for _ in range(20):
            arr.step(1e-3)
    reference.set_position(3, 0.5)
    for _ in range(20):
        k.step_joints_general(reference.params, reference.state, 1e-3)
    np.testing.assert_array_equal(small.state, reference.state)
    np.testing.assert_array_equal(big.state, reference.state)
