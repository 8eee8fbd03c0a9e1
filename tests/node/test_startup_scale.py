"""Start-up cost per axis: the registry work of bringing a node up grows linearly with its axes.

Every backend lookup (``get``) and every name listed (``keys``) during :meth:`ServoNode.start` is counted, for 2, 4
and 8 axes. Creating each register must cost a bounded number of operations: an existence check that lists every
register (as the registry's create path once did) makes the count grow with the square of the axes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from servo_node.node import ServoNode

NODE = 3741


class _Counting:
    """Wraps a registry backend; counts lookups and listed names."""

    def __init__(self, backend: Any, counter: list[int]) -> None:
        self._b, self._n = backend, counter

    def get(self, name: str) -> Any:
        self._n[0] += 1
        return self._b.get(name)

    def keys(self) -> Iterator[str]:
        for k in self._b.keys():
            self._n[0] += 1
            yield k

    def __getattr__(self, name: str) -> Any:
        return getattr(self._b, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._b)

    def __setitem__(self, k: str, v: Any) -> None:
        self._b[k] = v

    def __delitem__(self, k: str) -> None:
        del self._b[k]


async def _operations(axes: int) -> int:
    names = [f"a{k}" for k in range(axes)]
    env = {"UAVCAN__UDP__IFACE": "127.0.0.1", "UAVCAN__NODE__ID": str(NODE), "SERVO__AXES": " ".join(names)}
    node = ServoNode(None, env, loop_clock="simulated")
    counter = [0]
    reg: Any = node.registry  # pycyphal's SimpleRegistry: its static (file) and dynamic backends.
    reg._backend_static = _Counting(reg._backend_static, counter)
    reg._backend_dynamic = _Counting(reg._backend_dynamic, counter)
    async with node:
        assert [a.names.axis for a in node.axes] == names
    return counter[0]


@pytest.mark.parametrize("axes", [(2, 4, 8)])
async def test_registry_work_at_start_grows_linearly_with_axes(axes: tuple[int, ...]) -> None:
    ops = {n: await _operations(n) for n in axes}
    per_axis = [(ops[b] - ops[a]) / (b - a) for a, b in itertools.pairwise(axes)]
    print(f"registry operations at start: {ops}; per added axis {per_axis}")
    # Linear: each added axis costs the same (within 25 %); quadratic would double the increment from 2→4 to 4→8.
    assert max(per_axis) <= 1.25 * min(per_axis), ops
