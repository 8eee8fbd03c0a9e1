"""The emulated drive latches its encoder at the SYNC's instant from the latest physics step: however late the
physics thread is, successive latches of one step never run backwards and never run ahead by more than the bound."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sim_plant_node._plant import Mode, Sample
from sim_plant_node.cia402._drive import MAX_LATCH_AGE_S, latch

finite = st.floats(-1e3, 1e3, allow_nan=False)


@given(position=finite, velocity=finite, first=st.floats(-1.0, 2.0), later=st.floats(0.0, 2.0))
def test_latches_of_one_step_are_monotone_and_bounded(position: float, velocity: float, first: float,
                                                      later: float) -> None:
    step = Sample(monotonic=100.0, sim_time=5.0, position=position, velocity=velocity, acceleration=0.0, force=0.0,
                  available_force=1.0, mode=Mode.VELOCITY)
    a, b = latch(step, 100.0 + first), latch(step, 100.0 + first + later)
    tol = 1e-9 * (1.0 + abs(position))
    assert velocity * (b.position - a.position) >= -tol * abs(velocity)  # Never back against the motion.
    assert a.monotonic <= b.monotonic <= 100.0 + MAX_LATCH_AGE_S + 1e-12
    assert abs(b.position - position) <= abs(velocity) * MAX_LATCH_AGE_S + tol
