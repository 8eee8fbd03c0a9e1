"""What every drive on a bus shares: the link shape ``DRIVE_REMOTE`` and the defaults that follow from it.

A bus drive's network side writes ``rx`` (measurements and a record of each command it sent) and reads ``tx``
(the loop's command) through the seqlocked arrays of :mod:`._remote_link`; the loop models that link
(:mod:`servo_node.control._link`). Its envelope comes from the default profile (``servo.profile.*``) and
``servo.torque_limit``, not from a model of the joint.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .._seqlock import begin_write, end_write
from . import _remote_link as link
from ._base import DRIVE_REMOTE, Drive, DriveArrays, placeholder

if TYPE_CHECKING:
    from cyphal_common.registers import RegisterReader

VELOCITY_GAIN_PREDICT = 40.0
"""Position gain of the velocity law [1/s] with the link model (``servo.drive.compensation`` = predict): the
feedback acts on the position predicted over the measured delay, so the delay is outside the loop and the gain is
bounded by the drive period T_d instead (k·T_d = 0.2 at 200 Hz; a delay misjudged by δ leaves k·δ of phase, 0.4
rad for δ = 10 ms)."""
VELOCITY_GAIN_OFF = 5.0
"""…without it (``off``) the loop closes through the round trip; a pure delay τ in this loop rings once k·τ nears
π/2, so it gets a gain that tolerates about 0.2 s (scheduling stalls of a loaded host included)."""


class BusDrive(Drive):
    """A drive on a bus: ``rx``/``tx`` link arrays (the joint fields are unused placeholders)."""

    kind = DRIVE_REMOTE

    def __init__(self) -> None:
        rx, tx, scratch = link.new_link()
        self._arrays = DriveArrays(placeholder(), placeholder(), rx, tx, scratch)

    @property
    def arrays(self) -> DriveArrays:
        """``rx``/``tx`` link arrays."""
        return self._arrays

    @classmethod
    def derived_envelope(cls, reg: RegisterReader) -> tuple[float, float, float]:
        """The default profile's largest |v| and |a|, and ``servo.torque_limit``."""
        v_lim, a_lim = reg.reals("servo.profile.velocity"), reg.reals("servo.profile.acceleration")
        return max(map(abs, v_lim)), max(map(abs, a_lim)), reg.real("servo.torque_limit")

    @classmethod
    def default_velocity_gain(cls, reg: RegisterReader, compensation: bool) -> float:
        """:data:`VELOCITY_GAIN_PREDICT` with the link model, else :data:`VELOCITY_GAIN_OFF`."""
        return VELOCITY_GAIN_PREDICT if compensation else VELOCITY_GAIN_OFF

    @classmethod
    def command_rate(cls, reg: RegisterReader) -> float:
        """``servo.drive.rate``: each command is held at the drive for one period of it."""
        return reg.real("servo.drive.rate")

    def record_send(self, sent_at: float, v: float, f: float, next_at: float) -> None:
        """Tell the loop what the drive was told and when, and when the next send is due (the link model)."""
        rx = self._arrays.rx
        begin_write(rx)
        rx[link.RX_SENT_T] = sent_at
        rx[link.RX_SENT_V] = v
        rx[link.RX_SENT_F] = f
        rx[link.RX_SENT_NEXT] = max(next_at, sent_at)
        rx[link.RX_SENT_COUNT] += 1.0
        end_write(rx)

    def record_taking(self, taking: bool) -> None:
        """Whether the drive takes the commands it is sent (False: asked to enable, its state not there yet); the
        loop's plan waits for it (:mod:`servo_node.control._drive_wait`)."""
        rx = self._arrays.rx
        if (rx[link.RX_TAKING] != 0.0) != taking:
            begin_write(rx)
            rx[link.RX_TAKING] = 1.0 if taking else 0.0
            end_write(rx)

    def record_measurement(self, p: float, v: float, a: float, f: float, received_at: float, stamp: float) -> None:
        """A measured state, received at ``received_at`` (monotonic) and stamped ``stamp`` by the drive's clock.
        A non-finite one is also counted: the loop judges the latest sample of each tick, and a NaN the drive's next
        frame overwrote before the tick (a busy host) must still be distrusted."""
        rx = self._arrays.rx
        bad = not (math.isfinite(p) and math.isfinite(v) and math.isfinite(a) and math.isfinite(f))
        begin_write(rx)
        rx[link.RX_P] = p
        rx[link.RX_V] = v
        rx[link.RX_A] = a
        rx[link.RX_F] = f
        rx[link.RX_T] = received_at
        rx[link.RX_STAMP] = stamp
        rx[link.RX_COUNT] += 1.0
        if bad:
            rx[link.RX_NOT_FINITE] += 1.0
        end_write(rx)
