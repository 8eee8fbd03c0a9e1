"""Python face of the generator: ``plan`` returning a ``Trajectory``, and batch planning/sampling."""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

import numpy as np
import numpy.typing as npt
from numba import types

from ._kernels import plan_batch_into, plan_into, sample_batch_into, sample_into
from ._profile import COUNT, DURATION, PROFILE_SIZE, REPAIRED, STATUS
from ._velocity import plan_velocity_into

FloatArray = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike


def new_profile() -> FloatArray:
    """A zeroed profile buffer (C-contiguous float64, ``PROFILE_SIZE`` long) for ``plan_into``/``fast_plan_into``."""
    return np.zeros(PROFILE_SIZE)


_FAST_SIG = (types.float64,) * 10 + (types.float64[::1],)
_FAST_VELOCITY_SIG = (types.float64,) * 7 + (types.float64[::1],)
_fast: Callable[..., int] | None = None
_fast_velocity: Callable[..., int] | None = None


def fast_plan_into() -> Callable[..., int]:
    """``plan_into`` without numba's per-call type dispatch: the fastest way to plan from Python.

    Returns the compiled entry point of ``plan_into`` for ten floats and a C-contiguous float64 profile;
    calling it skips the argument type resolution a numba dispatcher repeats on every call (about 0.4 µs
    of the ~1 µs a plan costs from Python).  The caller guarantees the types: numbers for the ten scalars
    (ints are converted) and a profile from ``new_profile()`` (or any C-contiguous float64 array of at least
    ``PROFILE_SIZE``); anything else is undefined behaviour, exactly as for a C function.  Usage::

        plan_fast = fast_plan_into()
        profile = new_profile()
        status = plan_fast(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max, profile)
        duration = profile[3]            # or profile_duration(profile), Trajectory(profile).duration
    """
    global _fast
    if _fast is None:
        plan_into(0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 1.0, new_profile())  # compile or load from cache
        _fast = plan_into.overloads[_FAST_SIG].entry_point
    return _fast


def fast_plan_velocity_into() -> Callable[..., int]:
    """``plan_velocity_into`` without numba's per-call type dispatch (seven floats and a ``new_profile()``).

    The same contract as ``fast_plan_into``: the caller guarantees the types.
    """
    global _fast_velocity
    if _fast_velocity is None:
        plan_velocity_into(0.0, 0.0, 0.0, 1.0, -1.0, 1.0, 1.0, new_profile())  # compile or load from cache
        _fast_velocity = plan_velocity_into.overloads[_FAST_VELOCITY_SIG].entry_point
    return _fast_velocity


class Status(IntEnum):
    """Outcome of a plan: OK (possibly with a repaired vt), INFEASIBLE, NUMERICAL_FAILURE."""

    OK = 0
    INFEASIBLE = 1
    INFINITE = 1
    NUMERICAL_FAILURE = 2


class Trajectory:
    """One planned motion: duration, status and the profile that ``at`` samples (no re-planning)."""

    __slots__ = ("_out", "profile")

    def __init__(self, profile: FloatArray) -> None:
        self.profile = profile
        self._out = np.zeros(4)

    @property
    def status(self) -> Status:
        """0 ok, 1 infeasible/invalid input, 2 numerical failure."""
        return Status(int(self.profile[STATUS]))

    @property
    def repaired(self) -> bool:
        """True when the target velocity was moved to the nearest feasible value."""
        return bool(self.profile[REPAIRED] != 0.0)

    @property
    def duration(self) -> float:
        """Time to reach the target in seconds; after it v = vt and a = 0."""
        return float(self.profile[DURATION])

    @property
    def phase_count(self) -> int:
        """Number of constant-jerk phases (including brake phases)."""
        return int(self.profile[COUNT])

    def at(self, t: float) -> tuple[float, float, float, float]:
        """(p, v, a, j) at time t >= 0 after the plan start."""
        sample_into(self.profile, float(t), self._out)
        o = self._out
        return float(o[0]), float(o[1]), float(o[2]), float(o[3])

    def __repr__(self) -> str:
        return f"Trajectory(status={self.status.name}, duration={self.duration!r}, repaired={self.repaired})"


class Planner:
    """Reusable planner: the fastest way to plan from Python, returning a trajectory it owns and reuses.

    Like Ruckig's ``calculate(input, trajectory)``, every call writes into the same profile and returns the
    same ``Trajectory`` object (``planner.trajectory``): **the next ``plan``/``plan_velocity`` call overwrites
    it**.  Copy what you need to keep (``Trajectory(traj.profile.copy())`` is an independent trajectory).
    Per call it only invokes ``plan_into`` compiled for ten floats and a profile (no numba type dispatch, see
    ``fast_plan_into``) and creates no Python objects; the status is read from the profile when asked for.
    Arguments are numbers (ints are converted); anything else is undefined behaviour, as for ``fast_plan_into``.
    One planner per thread: the profile is shared by its calls.

        planner = Planner()
        traj = planner.plan(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max)
        if traj.status == Status.OK:
            p, v, a, j = traj.at(0.001)
    """

    __slots__ = ("_plan", "_plan_velocity", "_profile", "trajectory")

    def __init__(self) -> None:
        self._profile = new_profile()
        self._plan = fast_plan_into()
        self._plan_velocity = fast_plan_velocity_into()
        self.trajectory = Trajectory(self._profile)

    def plan(
        self, p0: float, v0: float, a0: float, pt: float, vt: float,
        v_min: float, v_max: float, a_min: float, a_max: float, j_max: float,
    ) -> Trajectory:
        """As ``plan()``: time-optimal motion to (pt, vt, 0); returns the planner's (reused) trajectory."""
        self._plan(p0, v0, a0, pt, vt, v_min, v_max, a_min, a_max, j_max, self._profile)
        return self.trajectory

    def plan_velocity(
        self, p0: float, v0: float, a0: float, vt: float, a_min: float, a_max: float, j_max: float,
    ) -> Trajectory:
        """As ``plan_velocity()``: time-optimal change to velocity vt; returns the planner's (reused) trajectory."""
        self._plan_velocity(p0, v0, a0, vt, a_min, a_max, j_max, self._profile)
        return self.trajectory


def plan(
    p0: float, v0: float, a0: float, pt: float, vt: float,
    v_min: float, v_max: float, a_min: float, a_max: float, j_max: float,
) -> Trajectory:
    """Time-optimal jerk-limited motion from (p0, v0, a0) to (pt, vt, 0) under direction-relative limits.

    Never raises for bad numbers: non-finite inputs or wrong-sign limits give status INFEASIBLE.
    """
    profile = new_profile()
    plan_into(float(p0), float(v0), float(a0), float(pt), float(vt),
              float(v_min), float(v_max), float(a_min), float(a_max), float(j_max), profile)
    return Trajectory(profile)


def plan_velocity(
    p0: float, v0: float, a0: float, vt: float, a_min: float, a_max: float, j_max: float,
) -> Trajectory:
    """Time-optimal jerk-limited change from (p0, v0, a0) to velocity vt with a = 0 (direction-relative limits).

    ``duration`` is the time to reach vt; sampling after it continues at v = vt, a = 0.  Never raises for bad
    numbers: non-finite inputs or wrong-sign limits give status INFEASIBLE.
    """
    profile = new_profile()
    plan_velocity_into(float(p0), float(v0), float(a0), float(vt), float(a_min), float(a_max), float(j_max), profile)
    return Trajectory(profile)


BatchPlan = tuple[FloatArray, FloatArray, npt.NDArray[np.int64], npt.NDArray[np.bool_]]
"""(profiles, durations, statuses, repaired) of ``plan_batch``."""


def plan_batch(
    p0: ArrayLike, v0: ArrayLike, a0: ArrayLike, pt: ArrayLike, vt: ArrayLike,
    v_min: ArrayLike, v_max: ArrayLike, a_min: ArrayLike, a_max: ArrayLike, j_max: ArrayLike,
    out: BatchPlan | None = None,
) -> BatchPlan:
    """Plan many independent problems (arrays broadcast together); return (profiles, durations, statuses, repaired).

    ``out``: what an earlier call returned, for as many problems: planned into again and returned, no new arrays.
    A batch planned over and over then costs no fresh memory (fresh pages fault in on first write: a 20 000-problem
    batch into new arrays took 2.5-7x as long on a virtual machine as into reused ones).
    """
    args = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (p0, v0, a0, pt, vt, v_min, v_max,
                                                                           a_min, a_max, j_max)))
    flat = [np.ascontiguousarray(x.reshape(-1)) for x in args]
    n = flat[0].shape[0]
    if out is None:
        out = (np.empty((n, PROFILE_SIZE)), np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.bool_))
    else:
        _check_batch_out(out, n)
    plan_batch_into(*flat, *out)  # plan_into writes each profile's header and the phases in use
    return out


def _check_batch_out(out: BatchPlan, n: int) -> None:
    """Raise ValueError unless ``out`` has the shapes and types ``plan_batch`` returns for ``n`` problems."""
    wanted = (((n, PROFILE_SIZE), np.float64), ((n,), np.float64), ((n,), np.int64), ((n,), np.bool_))
    if len(out) != 4 or any(
        not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous
        or not a.flags.writeable
        for a, (shape, dtype) in zip(out, wanted, strict=True)
    ):
        raise ValueError(f"out must be what plan_batch returned for {n} problems")


def sample_batch(profiles: FloatArray, times: ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Sample each profile at its times: ``times`` is (n,) or (n, k), or (k,) shared by all; returns p, v, a, j."""
    profiles = np.ascontiguousarray(profiles, dtype=np.float64).reshape(-1, PROFILE_SIZE)
    t = np.asarray(times, dtype=np.float64)
    n = profiles.shape[0]
    if t.ndim == 1 and t.shape[0] == n:
        shape: tuple[int, ...] = (n,)
        t2 = t.reshape(n, 1)
    elif t.ndim == 1:
        shape = (n, t.shape[0])
        t2 = np.broadcast_to(t, shape)
    else:
        shape = t.shape
        t2 = t
    t2 = np.ascontiguousarray(np.broadcast_to(t2, (n, t2.shape[1])))
    out = np.zeros((n, t2.shape[1], 4))
    sample_batch_into(profiles, t2, out)
    res = out.reshape((*shape, 4))
    return res[..., 0], res[..., 1], res[..., 2], res[..., 3]
