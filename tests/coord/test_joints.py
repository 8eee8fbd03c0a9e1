"""What the joints did, judged from their samples (``servo_node.coord._joints``): arrival, line, lost samples.

Samples are the nodes' own plans sampled at a dynamics rate (the OTG's exact motion), shifted in time or bent where
a test needs a joint that left its line; expectations are the closed forms of those shifts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from servo_node.coord._joints import ARRIVAL_BAND, Samples, arrival, gaps, line, measure
from servo_node.otg import plan

LIMITS = (-2.0, 2.0, -8.0, 6.0, 60.0)
"""One profile for every axis, scaled by its distance: the straight line of a phase-synchronised move."""


def _samples(distance: float, rate: float, t0: float = 0.0, until: float = 2.0, shift: float = 0.0) -> Samples:
    """An axis moving ``distance`` on the line from ``t0`` (its samples every 1/rate from 0), ``shift`` late."""
    traj = plan(0.0, 0.0, 0.0, 1.0, 0.0, *LIMITS)
    t = np.arange(0.0, until, 1.0 / rate)
    pv = np.array([traj.at(max(0.0, x - t0 - shift))[:2] for x in t])
    return Samples(t, distance * pv[:, 0], distance * pv[:, 1], 1.0 / rate)


def _band_entry(t0: float) -> float:
    """When the exact line enters ±ARRIVAL_BAND of the stroke for good (it approaches its target monotonically)."""
    traj = plan(0.0, 0.0, 0.0, 1.0, 0.0, *LIMITS)
    lo, hi = 0.0, traj.duration
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if abs(traj.at(mid)[0] - 1.0) > ARRIVAL_BAND else (lo, mid)
    return t0 + hi


@pytest.mark.parametrize("rate", [50.0, 250.0, 1000.0])
def test_arrival_is_the_last_entry_into_the_band_to_a_few_microseconds(rate: float) -> None:
    """At any usual dynamics rate the crossing, found on the Hermite curve of the samples around it, is where the
    exact motion crosses: the spread of three axes, one of them 1.5 ms late, is 1.5 ms."""
    axes = [_samples(3.0, rate, 0.1), _samples(-1.5, rate, 0.1), _samples(6.0, rate, 0.1, shift=0.0015)]
    expected = _band_entry(0.1)
    found = [arrival(s, 0.0, d, 0.05, 1.5)[0] for s, d in zip(axes, (3.0, -1.5, 6.0), strict=True)]
    print(rate, [(f - expected) * 1e6 for f in found])
    assert abs(found[0] - expected) < 20e-6 and abs(found[1] - expected) < 20e-6
    assert abs(found[2] - expected - 0.0015) < 20e-6
    j = measure(axes, [0.0] * 3, [3.0, -1.5, 6.0], [True] * 3, 0.05, 1.5)
    assert j.spread == pytest.approx(0.0015, abs=40e-6)
    assert j.verdict() == "ok" and not j.lost


def test_the_line_deviation_is_the_spread_of_progress_of_a_late_axis() -> None:
    """An axis 5 ms late is off the line by its progress over 5 ms at the worst instant; the others not at all."""
    rate = 500.0
    on = [_samples(3.0, rate, 0.1), _samples(-1.5, rate, 0.1)]
    late = _samples(6.0, rate, 0.1, shift=0.005)
    assert line(on, [0.0, 0.0], [3.0, -1.5], 0.05, 1.5).deviation < 1e-6
    traj = plan(0.0, 0.0, 0.0, 1.0, 0.0, *LIMITS)
    grid = np.arange(0.0, traj.duration + 0.01, 1e-4)
    worst = max(traj.at(x)[0] - traj.at(max(0.0, x - 0.005))[0] for x in grid)
    measured = line([*on, late], [0.0] * 3, [3.0, -1.5, 6.0], 0.05, 1.5)
    assert measured.deviation == pytest.approx(worst, rel=0.02)
    assert measured.unjudged == 0.0


def test_lost_samples_are_reported_and_never_judged_across() -> None:
    """A recording that lost 100 ms mid-move: the samples lost are counted, that stretch is not judged (however the
    joint moved in it), and an arrival inside such a gap is unknown, not interpolated."""
    rate = 500.0
    a, b = _samples(3.0, rate, 0.1), _samples(6.0, rate, 0.1)
    keep = (b.t < 0.3) | (b.t > 0.4)
    holed = Samples(b.t[keep], b.p[keep], b.v[keep], b.period)
    g = gaps(holed, 0.05, 1.5)
    assert g.lost == pytest.approx(51, abs=1) and g.longest == pytest.approx(0.104, abs=0.003)
    assert g.unjudged == pytest.approx(0.104, abs=0.003)
    measured = line([a, holed], [0.0, 0.0], [3.0, 6.0], 0.05, 1.5)
    assert measured.deviation < 1e-6 and measured.unjudged == pytest.approx(0.104, abs=0.003)
    j = measure([a, holed], [0.0, 0.0], [3.0, 6.0], [True, True], 0.05, 1.5)
    assert j.verdict() == "unjudged" and j.lost
    entry = _band_entry(0.1)
    late = (b.t < entry - 0.02) | (b.t > entry + 0.02)
    t, why = arrival(Samples(b.t[late], b.p[late], b.v[late], b.period), 0.0, 6.0, 0.05, 1.5)
    assert math.isnan(t) and "gap" in why
    assert math.isnan(measure([a, Samples(b.t[late], b.p[late], b.v[late], b.period)], [0.0, 0.0], [3.0, 6.0],
                              [True, True], 0.05, 1.5).spread)


def test_a_recording_that_ends_early_has_no_arrival() -> None:
    """Samples that stop before the window's end (a coordinator behind its sockets) give no arrival."""
    b = _samples(6.0, 500.0, 0.1, until=0.5)
    t, why = arrival(b, 0.0, 6.0, 0.05, 1.5)
    assert math.isnan(t) and why


def test_a_deviation_above_the_threshold_is_judged_even_with_samples_lost() -> None:
    """What was seen is a verdict: 3 % off the line in the samples there are is ``above``, lost samples or not."""
    rate = 500.0
    a, b = _samples(3.0, rate, 0.1), _samples(6.0, rate, 0.1, shift=0.03)
    keep = (b.t < 0.7) | (b.t > 0.8)
    j = measure([a, Samples(b.t[keep], b.p[keep], b.v[keep], b.period)], [0.0, 0.0], [3.0, 6.0], [True, True],
                0.05, 1.5)
    assert j.line.deviation > 0.03 and j.verdict(0.01) == "above"
    _, text, notes = j.describe(["a", "b"], 0.01)
    assert "WARNING" in text and any("lost" in n for n in notes)


@pytest.mark.parametrize("stamp_us", [0, 1, 1_795_860_019_547_653, (1 << 53) - 1])
def test_a_dynamics_payload_reads_as_the_dsdl_deserializer_reads_it(stamp_us: int) -> None:
    """The coordinator and the console decode ``DoF3rdTs.1.0`` with one struct call: bit for bit the generated
    deserializer's stamp, position, velocity, acceleration and force, for the whole payload, a shorter one
    (zero-extended) and a longer one (truncated)."""
    import pycyphal.dsdl
    import zubax
    import zubax.physics.dynamics
    import zubax.physics.kinematics

    from cyphal_common.dynamics_tap import DYNAMICS_SIZE, decode

    kin = zubax.physics.kinematics.DoF3rd_1_0(
        base=zubax.physics.kinematics.DoF2nd_1_0(position=-1.2345678, velocity=3.25e-5), acceleration=-17.5)
    msg = zubax.physics.dynamics.DoF3rdTs_1_0(timestamp=zubax.Timestamp_1_0(microsecond=stamp_us),
                                              value=zubax.physics.dynamics.DoF3rd_1_0(kinematics=kin, force=9.0))
    payload = b"".join(pycyphal.dsdl.serialize(msg))
    assert len(payload) == DYNAMICS_SIZE
    for data in (payload, payload[:15], payload + b"\x01\x02"):
        ref = pycyphal.dsdl.deserialize(zubax.physics.dynamics.DoF3rdTs_1_0, [memoryview(data)])
        assert ref is not None
        k = ref.value.kinematics
        expected = (ref.timestamp.microsecond * 1e-6, float(k.base.position), float(k.base.velocity),
                    float(k.acceleration), float(ref.value.force))
        assert decode(data) == expected
