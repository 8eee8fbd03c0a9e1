"""The numba half of a drive on the bus: two seqlocked arrays between the network side and the loop.

``rx`` (written only by the network side, all from its one asyncio thread): the latest measured state with its
reception time and the drive's own timestamp, and the latest command the network side actually *sent* (its send
time, values, and when it plans the next send). ``tx`` (written only by the loop): the command the network side
publishes at the drive rate, and the reference at the command's effect time (what a drive that closes its own
position loop is given).

The send record is what makes the link measurable: the loop learns exactly what the drive was told and when, and
fits the drive's response to it (:mod:`servo_node.control._link`).
"""

from __future__ import annotations

import numpy as np

from .._jit import tick_jit
from .._seqlock import begin_write, end_write, try_read_seqlocked
from ._base import DriveArrays
from ._measurement import (
    M_A,
    M_AGE,
    M_COUNT,
    M_F,
    M_FRESH,
    M_NOT_FINITE,
    M_P,
    M_RX_T,
    M_SENT_COUNT,
    M_SENT_F,
    M_SENT_NEXT,
    M_SENT_T,
    M_SENT_V,
    M_STAMP,
    M_TAKING,
    M_V,
)

RX_SEQ = 0
RX_P = 1
RX_V = 2
RX_A = 3
RX_F = 4
RX_T = 5  # reception time of the last measurement [second, monotonic]; 0 = none yet
RX_COUNT = 6  # measurements received
RX_STAMP = 7  # the drive's timestamp of that measurement [second, the drive's clock]; NaN if it sends none
RX_SENT_T = 8  # time the network side last sent a command [second, monotonic]
RX_SENT_V = 9  # its velocity (NaN: none)
RX_SENT_F = 10  # its force/torque (NaN: none)
RX_SENT_COUNT = 11  # commands sent
RX_SENT_NEXT = 12  # when the network side plans to send the next one [second, monotonic]
RX_NOT_FINITE = 13  # measurements received with NaN or infinity in them (each one judged, even if overwritten)
RX_TAKING = 14  # 1 while the drive takes the commands sent (0: asked to enable, its state not there yet)
N_RX = 15

TX_SEQ = 0
TX_ENABLE = 1  # 1 while the loop commands the drive (readiness ENGAGED), else 0 (STANDBY)
TX_V = 2  # velocity command; NaN when not commanded
TX_F = 3  # force/torque: the command (torque law) or the limit beside a velocity; NaN when not commanded
TX_T = 4  # loop time of the command [second]
TX_P = 5  # the reference at the command's effect time: position (a position-mode drive's target)…
TX_VREF = 6  # …velocity…
TX_AREF = 7  # …and acceleration (its feed-forwards)
TX_P_NEXT = 8  # the reference position one drive period later (compensated) or one loop period later
N_TX = 9


def new_link() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rx, tx, scratch) for one remote drive."""
    tx = np.zeros(N_TX)
    tx[TX_V] = np.nan
    tx[TX_F] = np.nan
    tx[TX_P:TX_P_NEXT + 1] = np.nan
    rx = np.zeros(N_RX)
    rx[RX_STAMP] = np.nan
    rx[RX_SENT_V] = np.nan
    rx[RX_SENT_F] = np.nan
    rx[RX_SENT_NEXT] = np.nan
    rx[RX_TAKING] = 1.0  # A backend that cannot tell: taken as taking.
    return rx, tx, np.zeros(N_RX)


@tick_jit
def measure(d: DriveArrays, now: float, started: float, feedback_timeout: float, meas: np.ndarray) -> None:
    """The latest measurement and send record; fresh while its reception is within ``feedback_timeout`` of ``now``.

    ``meas`` is laid out as :mod:`._measurement` names it.
    """
    rx = d.scratch
    if try_read_seqlocked(d.rx, rx):  # Else the node is writing the next one: the last stays this tick's.
        meas[M_P] = rx[RX_P]
        meas[M_V] = rx[RX_V]
        meas[M_A] = rx[RX_A]
        meas[M_F] = rx[RX_F]
        meas[M_COUNT] = rx[RX_COUNT]
        meas[M_RX_T] = rx[RX_T]
        meas[M_STAMP] = rx[RX_STAMP]
        meas[M_SENT_COUNT] = rx[RX_SENT_COUNT]
        meas[M_SENT_T] = rx[RX_SENT_T]
        meas[M_SENT_V] = rx[RX_SENT_V]
        meas[M_SENT_F] = rx[RX_SENT_F]
        meas[M_SENT_NEXT] = rx[RX_SENT_NEXT]
        meas[M_NOT_FINITE] = rx[RX_NOT_FINITE]
        meas[M_TAKING] = rx[RX_TAKING]
    count = meas[M_COUNT]
    last = meas[M_RX_T] if count > 0.0 else started
    meas[M_FRESH] = 1.0 if (now - last <= feedback_timeout and count > 0.0) else 0.0
    if count == 0.0 and now - started <= feedback_timeout:
        meas[M_FRESH] = -1.0  # Not heard yet, still within the grace period after start.
    meas[M_AGE] = now - last


@tick_jit
def command(d: DriveArrays, now: float, engaged: bool, v_cmd: float, f_cmd: float, ref: np.ndarray) -> None:
    """Publish the loop's command for the network side, with the reference (p, v, a, j) at its effect time and
    (p, …) one hold later."""
    tx = d.tx
    begin_write(tx)
    tx[TX_ENABLE] = 1.0 if engaged else 0.0
    tx[TX_V] = v_cmd
    tx[TX_F] = f_cmd
    tx[TX_T] = now
    tx[TX_P] = ref[0]
    tx[TX_VREF] = ref[1]
    tx[TX_AREF] = ref[2]
    tx[TX_P_NEXT] = ref[4]
    end_write(tx)
