"""Tests of the transport package: udp_multicast CAN media, the register-driven factory, yakut interop."""
