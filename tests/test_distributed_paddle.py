"""scale_lib ops and Paddle auto-parallel tensors (``paddle.distributed.shard_tensor``).

Paddle runs an operator on distributed tensors through the operator's SPMD rule, which only
Paddle's own operators (and C++ custom operators built with Paddle) can declare. scale_lib ops
therefore refuse distributed tensors with a plain error, and run on each rank's shard under
``paddle.distributed.local_map``, which is checked here on a one-process mesh.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from backends import _module

import scale_lib

paddle = _module("paddle")
pytestmark = pytest.mark.skipif(paddle is None, reason="paddle is not installed")


def _sharded(a: np.ndarray, stop_gradient: bool = True) -> tuple[Any, Any]:
    dist = paddle.distributed
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    d = dist.shard_tensor(paddle.to_tensor(a), mesh, [dist.Shard(0)])
    d.stop_gradient = stop_gradient  # a leaf that collects its gradient when False
    return d, mesh


@pytest.mark.parametrize("stop_gradient", [True, False])
def test_distributed_tensor_is_refused(stop_gradient: bool) -> None:
    d, _ = _sharded(np.ones((4, 3), np.float32), stop_gradient)
    with pytest.raises(ValueError, match=r"x is a Paddle distributed tensor.*local_map"):
        scale_lib.scale(d, 2.0)
    # op: axpby
    plain = paddle.to_tensor(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"y is a Paddle distributed tensor"):
        scale_lib.axpby(plain, d)
    # /op: axpby


def test_local_map_keeps_placements() -> None:
    dist = paddle.distributed
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    dx, mesh = _sharded(x)
    rows = [dist.Shard(0)]
    cases: list[tuple[Any, tuple[Any, ...], np.ndarray]] = [(lambda a: scale_lib.scale(a, 3.0), (dx,), x * 3)]
    # op: axpby
    y = rng.standard_normal((4, 6)).astype(np.float32)
    dy, _ = _sharded(y)
    cases.append((lambda a, b: scale_lib.axpby(a, b, 2.0, -1.0), (dx, dy), 2 * x - y))
    # /op: axpby
    # op: rms_norm
    w = rng.standard_normal((6,)).astype(np.float32)
    cases.append(
        (
            lambda a: scale_lib.rms_norm(a, paddle.to_tensor(w)),
            (dx,),
            x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w,
        )
    )
    # /op: rms_norm
    for f, args, expected in cases:
        out = dist.local_map(f, out_placements=[rows], in_placements=[rows] * len(args), process_mesh=mesh)(
            *args
        )
        assert out.is_dist() and out.placements == rows
        np.testing.assert_allclose(out._local_value().numpy(), expected, rtol=1e-5, atol=1e-6)


# op: rms_norm
def test_local_map_autograd_rows() -> None:
    dist = paddle.distributed
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    dx, mesh = _sharded(x, stop_gradient=False)
    # [paddle_local_map_rows.begin]
    rows = [dist.Shard(0)]  # dx: a distributed tensor sharded by rows
    f = dist.local_map(
        lambda a: scale_lib.rms_norm(a), out_placements=[rows], in_placements=[rows], process_mesh=mesh
    )
    f(dx).sum().backward()  # each rank normalises its rows; dx.grad is sharded by rows
    # [paddle_local_map_rows.end]
    plain = paddle.to_tensor(x, stop_gradient=False)
    scale_lib.rms_norm(plain).sum().backward()
    assert dx.grad.placements == rows
    np.testing.assert_allclose(dx.grad._local_value().numpy(), plain.grad.numpy(), rtol=1e-5, atol=1e-6)


# /op: rms_norm
def test_local_map_autograd() -> None:
    dist = paddle.distributed
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    dx, mesh = _sharded(x, stop_gradient=False)
    # [paddle_local_map.begin]
    rows = [dist.Shard(0)]  # dx: a distributed tensor sharded by rows
    f = dist.local_map(
        lambda a: scale_lib.scale(a, 3.0), out_placements=[rows], in_placements=[rows], process_mesh=mesh
    )
    f(dx).sum().backward()  # each rank scales its rows; dx.grad is sharded by rows
    # [paddle_local_map.end]
    assert dx.grad.placements == rows
    np.testing.assert_allclose(dx.grad._local_value().numpy(), np.full((4, 6), 3.0, np.float32))
