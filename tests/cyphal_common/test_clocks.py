"""The system-minus-monotonic offset survives a preemption between the two clock reads."""

from __future__ import annotations

import time

import pytest

from cyphal_common import clocks


def test_a_preempted_read_is_not_the_one_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    real_time = time.time
    calls = 0

    def preempted_once() -> float:
        nonlocal calls
        calls += 1
        if calls == 1:
            t = real_time()
            time.sleep(0.02)  # Descheduled between the reads: a naive pair would be 20 ms off.
            return t
        return real_time()

    expected = real_time() - time.monotonic()
    monkeypatch.setattr(clocks.time, "time", preempted_once)
    got = clocks.system_minus_monotonic_s()
    assert calls >= 2
    assert abs(got - expected) < 2e-3, (got - expected)
