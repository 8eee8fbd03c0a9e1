"""The arming gate on an injected clock: readiness gating and the deadman timeout."""

from servo_node.arming import ArmingGate, ServoState

T = 0.5


def test_ungated_engages_on_setpoint_and_expires() -> None:
    g = ArmingGate(False, T)
    assert g.update(0.0) is ServoState.STANDBY
    assert g.on_setpoint(1.0)
    assert g.update(1.0 + T) is ServoState.ENGAGED
    assert g.update(1.0 + T + 0.01) is ServoState.EXPIRED
    assert 0.5 < g.expired_after_s <= 0.52
    assert "deadman" in g.reason
    assert g.on_setpoint(3.0)  # A fresh setpoint moves again.
    assert g.update(3.0) is ServoState.ENGAGED


def test_gated_starts_in_standby_and_needs_engaged() -> None:
    g = ArmingGate(True, T)
    assert not g.on_setpoint(0.0)
    assert g.update(0.0) is ServoState.STANDBY
    for value in (0, 1, 2):  # SLEEP, invalid, STANDBY
        g.on_readiness(value, 0.1)
        assert not g.on_setpoint(0.1)
        assert g.update(0.1) is ServoState.STANDBY
    g.on_readiness(3, 0.2)
    assert g.on_setpoint(0.2)
    assert g.update(0.2) is ServoState.ENGAGED


def test_stale_readiness_counts_as_standby() -> None:
    g = ArmingGate(True, T)
    g.on_readiness(3, 0.0)
    assert g.on_setpoint(0.1)
    g.on_setpoint(0.55)  # Setpoints keep coming, readiness does not.
    assert g.update(0.55) is ServoState.STANDBY
    assert "older" in g.reason
    assert not g.on_setpoint(0.6)


def test_readiness_loss_disengages() -> None:
    g = ArmingGate(True, T)
    g.on_readiness(3, 0.0)
    g.on_setpoint(0.0)
    g.on_readiness(0, 0.1)
    assert g.update(0.1) is ServoState.STANDBY
    assert "SLEEP" in g.reason


def test_error_holds_until_fresh_setpoint() -> None:
    g = ArmingGate(False, T)
    g.on_setpoint(0.0)
    g.on_error("drive lost")
    assert g.update(0.1) is ServoState.ERROR
    assert g.update(5.0) is ServoState.ERROR
    assert g.on_setpoint(5.0)
    assert g.update(5.0) is ServoState.ENGAGED
