"""scale_lib ops and Paddle auto-parallel tensors (``paddle.distributed.shard_tensor``).

Paddle runs an operator on distributed tensors through the operator's SPMD rule, which only
Paddle's own operators (and C++ custom operators built with Paddle) can declare. scale_lib ops
therefore refuse distributed tensors with a plain error, and run on each rank's shard under
``paddle.distributed.local_map``, which is checked here on a one-process mesh for every declared
op (its ``CASE``'s call, tests/cases.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from backends import _module
from cases import OpCase, declared_cases
from distributed_helpers import paddle_sharded, per_feature, sharded_cases

import scale_lib

paddle = _module("paddle")
pytestmark = pytest.mark.skipif(paddle is None, reason="paddle is not installed")


@pytest.mark.parametrize("stop_gradient", [True, False])
def test_distributed_tensor_is_refused(stop_gradient: bool) -> None:
    for case in declared_cases("cpu"):
        arrays = {n: np.ones(s, np.float32) for n, s in case.shapes().items()}
        for name in case.arrays:  # each array argument in turn distributed, the others not
            d, _ = paddle_sharded(arrays[name], stop_gradient)
            args = [d if n == name else paddle.to_tensor(a) for n, a in arrays.items()]
            with pytest.raises(ValueError, match=rf"{name} is a Paddle distributed tensor.*local_map"):
                case.call(*args)


def test_local_map_keeps_placements() -> None:
    # Ops that keep row shards, on row shards; per-feature inputs (a weight) whole.
    dist = paddle.distributed
    rows = [dist.Shard(0)]
    rng = np.random.default_rng(0)
    for spec, case in sharded_cases("elementwise", "rows", device="cpu"):
        whole = per_feature(spec)
        arrays = {n: rng.standard_normal(s).astype(np.float32) for n, s in case.shapes((4, 6)).items()}
        sharded = {n: paddle_sharded(a) for n, a in arrays.items() if not whole[n]}
        mesh = next(iter(sharded.values()))[1]

        def f(*args: Any, sharded: dict = sharded, arrays: dict = arrays, case: OpCase = case) -> Any:
            given = dict(zip(sharded, args, strict=True))
            return case.call(*(given[n] if n in given else paddle.to_tensor(a) for n, a in arrays.items()))

        out = dist.local_map(
            f, out_placements=[rows], in_placements=[rows] * len(sharded), process_mesh=mesh
        )(*(d for d, _ in sharded.values()))
        assert out.is_dist() and out.placements == rows, spec.name
        expected = case.call(*(paddle.to_tensor(a) for a in arrays.values())).numpy()
        np.testing.assert_allclose(
            out._local_value().numpy(), expected, rtol=1e-5, atol=1e-6, err_msg=spec.name
        )


def test_local_map_autograd() -> None:
    dist = paddle.distributed
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    dx, mesh = paddle_sharded(x, stop_gradient=False)
    # [paddle_local_map.begin]
    rows = [dist.Shard(0)]  # dx: a distributed tensor sharded by rows
    f = dist.local_map(
        lambda a: scale_lib.scale(a, 3.0), out_placements=[rows], in_placements=[rows], process_mesh=mesh
    )
    f(dx).sum().backward()  # each rank scales its rows; dx.grad is sharded by rows
    # [paddle_local_map.end]
    assert dx.grad.placements == rows
    np.testing.assert_allclose(dx.grad._local_value().numpy(), np.full((4, 6), 3.0, np.float32))
