"""What every drive backend reports each tick, by name: the ``meas`` array a backend's ``measure`` fills and the
control loop reads (``control._layout`` re-exports these names as ``L.M_*``). The embedded joint fills the first
six and ``M_TAKING``; a drive on the bus all of them."""

M_P = 0
M_V = 1
M_A = 2
M_F = 3
M_FRESH = 4  # 1 while the drive's feedback is within the feedback timeout (0 silent too long, −1 not heard yet)
M_AGE = 5  # time since the measurement was received [second] (0 for the embedded joint)
# A drive on the bus also reports (NaN for the embedded joint):
M_COUNT = 6  # measurements received
M_RX_T = 7  # reception time of the latest [second, loop clock]
M_STAMP = 8  # the drive's timestamp of it [second, the drive's clock]; NaN: none
M_SENT_COUNT = 9  # commands the network side sent
M_SENT_T = 10  # when it sent the latest [second, loop clock]
M_SENT_V = 11  # that command's velocity
M_SENT_F = 12  # that command's force/torque
M_SENT_NEXT = 13  # when it plans to send the next one [second, loop clock]
M_T = 14  # when the drive was in the measured state [second, loop clock] (set by control._link; now if local)
M_NOT_FINITE = 15  # measurements received with NaN or infinity (a count: one overwritten before a tick still counts)
M_TAKING = 16  # 1 while the drive takes the commands it is sent (0: asked to enable, not enabled yet); 1 if local
N_MEAS = 17
