"""rms_norm on distributed arrays: its backward ops and its backward on row shards under
Paddle's ``local_map``.

The backward ops are a check tests/test_distributed_torch.py runs (``SHARDED_TORCH_CHECKS``, 2
processes), a test there; see tests/distributed_helpers.py. The examples built on rms_norm are
tests/test_distributed_examples.py's. The rules every row-wise op follows (rows kept sharded,
the last dimension gathered, a weight used whole and its gradient a partial sum over rows) are
checked by the suites themselves."""

from __future__ import annotations

from typing import Any

import numpy as np
from distributed_helpers import assert_full_close, paddle_sharded, torch_data

import scale_lib


def rms_norm_backward_ops(mesh: Any, device: Any) -> None:
    # The ops rms_norm's vjp composes have sharding strategies of their own.
    import torch
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    ops = torch.ops.scale_lib
    x, w = torch_data(6, 8, device=device), torch_data(8, seed=1, device=device)
    g = torch_data(6, 8, seed=2, device=device)
    rstd = ops.rms_norm_rstd(x, 1e-6)
    dx, dg = distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(g, mesh, [Shard(0)])
    dw = distribute_tensor(w, mesh, [Replicate()])
    d_rstd = ops.rms_norm_rstd(dx, 1e-6)
    assert d_rstd.placements == (Shard(0),)
    assert_full_close(d_rstd, rstd)
    back = ops.rms_norm_backward(dg, dx, dw, d_rstd)
    assert back.placements == (Shard(0),)
    assert_full_close(back, ops.rms_norm_backward(g, x, w, rstd))
    wg = ops.rms_norm_weight_grad(dg, dx, d_rstd)
    assert wg.placements == (Partial("sum"),)
    assert_full_close(wg, ops.rms_norm_weight_grad(g, x, rstd))


SHARDED_TORCH_CHECKS = (rms_norm_backward_ops,)


def test_local_map_autograd_rows() -> None:
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    dx, mesh = paddle_sharded(x, stop_gradient=False)
    import paddle

    dist = paddle.distributed
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
