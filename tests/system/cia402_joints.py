"""What the CiA 402 scenarios with in-process emulated drives share: a private udpmc bus, and the drive's own
readings of its joint (position, velocity, state machine) sampled beside the test, so that motion is judged from the
joint itself, never from the servo's view alone and never by wall-clock speed."""

from __future__ import annotations

import random
import threading
import time

from sim_plant_node.cia402 import Emulator
from sim_plant_node.cia402._statemachine import State

REST_V = 1e-3
"""|velocity| of a joint at rest [unit/s]."""


def private_iface() -> str:
    """A udpmc CAN bus of its own (a random group and port)."""
    r = random.Random()
    return f"udpmc:239.{r.randint(1, 254)}.{r.randint(1, 254)}.{r.randint(1, 254)}:{r.randint(20000, 60000)}"


class Readings:
    """An emulated drive's own readings at 100 Hz: (monotonic, joint position, joint velocity, drive state)."""

    def __init__(self, emulator: Emulator) -> None:
        self.samples: list[tuple[float, float, float, State]] = []
        self._emulator = emulator
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        em = self._emulator
        while not self._stop.wait(0.01):
            assert em.plant is not None and em.drive is not None
            s = em.plant.sample()
            self.samples.append((time.monotonic(), s.position, s.velocity, em.drive.state))

    def since_enabled(self) -> list[tuple[float, float, float, State]]:
        """The samples from the first in OPERATION ENABLED on (none if it never was)."""
        k = next((k for k, s in enumerate(self.samples) if s[3] is State.OPERATION_ENABLED), len(self.samples))
        return self.samples[k:]

    def moving_unpowered(self) -> list[tuple[float, float, float, State]]:
        """Samples since enabled where the joint moved while the drive was not in OPERATION ENABLED (a stop that
        disabled the drive before the joint was at rest)."""
        return [s for s in self.since_enabled() if s[3] is not State.OPERATION_ENABLED and abs(s[2]) > REST_V]

    def last(self, seconds: float) -> list[tuple[float, float, float, State]]:
        """The samples of the last ``seconds``."""
        return [s for s in self.samples if s[0] >= self.samples[-1][0] - seconds] if self.samples else []

    def close(self) -> None:
        """Stop sampling (idempotent)."""
        self._stop.set()
        self._thread.join(5.0)
