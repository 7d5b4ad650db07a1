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

# These tests (and the examples they run) use the template's example ops: a library made from the
# template without them skips them, naming what it lacks.
_MISSING = [op for op in ("scale", "axpby", "rms_norm", "l2_norm") if not hasattr(scale_lib, op)]
if _MISSING:
    pytest.skip(f"needs the example ops {', '.join(_MISSING)}", allow_module_level=True)

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
    plain = paddle.to_tensor(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"y is a Paddle distributed tensor"):
        scale_lib.axpby(plain, d)


def test_local_map_keeps_placements() -> None:
    dist = paddle.distributed
    rng = np.random.default_rng(0)
    x, y, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (4, 6), (6,)))
    dx, mesh = _sharded(x)
    dy, _ = _sharded(y)
    rows = [dist.Shard(0)]
    for f, args, expected in (
        (lambda a: scale_lib.scale(a, 3.0), (dx,), x * 3),
        (lambda a, b: scale_lib.axpby(a, b, 2.0, -1.0), (dx, dy), 2 * x - y),
        (
            lambda a: scale_lib.rms_norm(a, paddle.to_tensor(w)),
            (dx,),
            x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w,
        ),
    ):
        out = dist.local_map(f, out_placements=[rows], in_placements=[rows] * len(args), process_mesh=mesh)(
            *args
        )
        assert out.is_dist() and out.placements == rows
        np.testing.assert_allclose(out._local_value().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_local_map_autograd() -> None:
    dist = paddle.distributed
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    dx, mesh = _sharded(x, stop_gradient=False)
    # [paddle_local_map.begin]
    rows = [dist.Shard(0)]  # dx: a distributed tensor sharded by rows
    f = dist.local_map(
        lambda a: scale_lib.rms_norm(a), out_placements=[rows], in_placements=[rows], process_mesh=mesh
    )
    f(dx).sum().backward()  # each rank normalises its rows; dx.grad is sharded by rows
    # [paddle_local_map.end]
    plain = paddle.to_tensor(x, stop_gradient=False)
    scale_lib.rms_norm(plain).sum().backward()
    assert dx.grad.placements == rows
    np.testing.assert_allclose(dx.grad._local_value().numpy(), plain.grad.numpy(), rtol=1e-5, atol=1e-6)
