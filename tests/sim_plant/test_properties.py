"""Hypothesis: random parameters and command sequences never give NaN, pass a stop or exceed the motor force."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_plant import JointArray, JointParams
from sim_plant import _kernels as k

finite = st.floats(-50.0, 50.0, allow_nan=False)
positive = st.floats(0.0, 200.0, allow_nan=False)


@st.composite
def joint_params(draw: st.DrawFn) -> JointParams:
    """Valid random joint parameters, hard stops on or off."""
    stops = draw(st.booleans())
    min_stop = -draw(st.floats(0.01, 2.0)) if stops else 0.0
    max_stop = draw(st.floats(0.01, 2.0)) if stops else 0.0
    lo = draw(st.floats(-3.0, 3.0))
    soft = draw(st.booleans())
    return JointParams(
        kind=draw(st.sampled_from(["rotational", "linear"])),
        inertia=draw(st.floats(1e-3, 10.0)),
        max_velocity=draw(st.floats(0.0, 50.0)),
        max_force=draw(positive),
        control_p=draw(st.floats(0.0, 500.0)),
        acceleration=draw(st.one_of(st.just(-1.0), st.floats(0.0, 500.0))),
        position=draw(st.floats(min_stop, max_stop)) if stops else draw(st.floats(-2.0, 2.0)),
        min_position=lo if soft else 0.0,
        max_position=lo + draw(st.floats(0.0, 3.0)) if soft else 0.0,
        min_stop=min_stop,
        max_stop=max_stop,
        spring_constant=draw(st.floats(0.0, 1e4)),
        damping_constant=draw(st.floats(0.0, 100.0)),
        static_friction=draw(st.floats(0.0, 50.0)),
        load=draw(finite),
        gravity_load=draw(finite),
    )


OUTPUTS = [k.S_POSITION, k.S_VELOCITY, k.S_ACCELERATION, k.S_MOTOR_FORCE_FEEDBACK, k.S_VC]

command = st.tuples(
    st.sampled_from(["position", "velocity", "inf", "acceleration", "motor_force", "control_p", "force", "none"]),
    st.floats(-100.0, 100.0, allow_nan=False),
    st.sampled_from([1e-4, 1e-3, 1e-2, 0.05]),
)


def apply(arr: JointArray, i: int, name: str, x: float) -> None:
    """Send one random command to joint i."""
    if name == "position":
        arr.set_position(i, x)
    elif name == "velocity":
        arr.set_velocity(i, x)
    elif name == "inf":
        arr.set_position(i, math.copysign(math.inf, x))
    elif name == "acceleration":
        arr.set_acceleration(i, abs(x) if x > -50.0 else -1.0)
    elif name == "motor_force":
        arr.set_motor_force(i, abs(x))
    elif name == "control_p":
        arr.set_control_p(i, abs(x))
    elif name == "force":
        arr.set_force(i, x)


@settings(max_examples=60, deadline=None)
@given(
    joints=st.lists(joint_params(), min_size=1, max_size=2),
    chain=st.booleans(),
    commands=st.lists(st.tuples(st.integers(0, 1), command), min_size=1, max_size=25),
)
def test_random_commands_stay_finite_within_stops_and_motor_force(
    joints: list[JointParams], chain: bool, commands: list[tuple[int, tuple[str, float, float]]]
) -> None:
    parents = [-1, 0] if chain and len(joints) == 2 else None
    arr = JointArray(joints, parents)
    for index, (name, x, dt) in commands:
        i = index % len(joints)
        apply(arr, i, name, x)
        for _ in range(3):
            arr.step(dt)
            assert np.all(np.isfinite(arr.state[:, OUTPUTS]))
            for j, p in enumerate(joints):
                q = arr.positions[j]
                if p.min_stop != 0.0 or p.max_stop != 0.0:
                    assert p.min_stop <= q <= p.max_stop
                fm = arr.state[j, k.S_MOTOR_FORCE]
                assert fm <= p.max_force
                assert abs(arr.motor_force_feedbacks[j]) <= fm


@settings(max_examples=40, deadline=None)
@given(params=joint_params(), force=st.floats(-1e6, 1e6), dt=st.sampled_from([1e-3, 0.02]))
def test_no_force_passes_a_hard_stop(params: JointParams, force: float, dt: float) -> None:
    arr = JointArray([params])
    arr.set_motor_force(0, params.max_force)
    arr.set_force(0, force)
    for _ in range(50):
        arr.step(dt)
        q = float(arr.positions[0])
        assert math.isfinite(q)
        if params.min_stop != 0.0 or params.max_stop != 0.0:
            assert params.min_stop <= q <= params.max_stop
