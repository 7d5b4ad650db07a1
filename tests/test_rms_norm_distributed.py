"""rms_norm on distributed arrays: its backward ops, the examples built on it and its backward
on row shards under Paddle's ``local_map``.

The backward ops and examples/distributed_block.py (a block trained under FSDP2 and under tensor
+ sequence parallelism against the same model on one process) are checks
tests/test_distributed_torch.py runs (``SHARDED_TORCH_CHECKS``, 2 processes), each one a test
there; see tests/distributed_helpers.py. examples/distributed_jax.py runs as a script here. The
rules every row-wise op follows (rows kept sharded, the last dimension gathered, a weight used
whole and its gradient a partial sum over rows) are checked by the suites themselves."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed_helpers import assert_full_close, paddle_sharded, torch_data

import scale_lib

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT_S = 600


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


def _example() -> Any:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module("distributed_block")


def block_fsdp2(mesh: Any, device: Any) -> None:
    example = _example()
    data = example.make_data(3, device)
    result = example.compare(example.train_reference(data, device, 0.1), example.train_fsdp(data, mesh, 0.1))
    assert result["ok"], result


def block_tensor_sequence_parallel(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import DTensor, Shard

    example = _example()
    data = example.make_data(3, device)
    result = example.compare(
        example.train_reference(data, device, 0.1), example.train_tensor_parallel(data, mesh, 0.1)
    )
    assert result["ok"], result
    # The scale_lib ops of the parallelised block see and return sequence-sharded DTensors.
    model = example.parallelize(example.make_model(device), mesh)
    seen: list[tuple[str, Any]] = []

    def record(name: str) -> Any:
        return lambda module, args, out: seen.extend([(f"{name} in", args[0]), (f"{name} out", out)])

    model.blocks[0].norm.register_forward_hook(record("rms_norm"))
    model.blocks[0].register_forward_hook(record("block"))
    model(data[0][0])
    for name, t in seen:
        assert isinstance(t, DTensor) and t.placements == (Shard(1),), (
            name,
            type(t),
            getattr(t, "placements", None),
        )


SHARDED_TORCH_CHECKS = (rms_norm_backward_ops, block_fsdp2, block_tensor_sequence_parallel)


def test_example_runs() -> None:
    pytest.importorskip("jax_tvm_ffi")
    env = dict(os.environ)
    if os.environ.get("SCALE_LIB_TEST_DIST_BACKEND", "gloo") != "nccl":
        env["JAX_PLATFORMS"] = "cpu"
    example = EXAMPLES / "distributed_jax.py"
    child = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, env=env, timeout=TIMEOUT_S
    )
    assert child.returncode == 0, child.stdout + child.stderr[-3000:]
    assert "collectives in the compiled HLO: none" in child.stdout


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
