# op-file: rms_norm
"""A transformer-style block built on scale_lib ops, trained on two processes with FSDP2
(``fully_shard``) and with tensor + sequence parallelism (``parallelize_module``), and checked
against the same model trained on one process.

    python examples/distributed_block.py                    # 2 CPU processes, gloo
    python examples/distributed_block.py --backend nccl     # 2 GPUs, NCCL

Prints one JSON line per run with the losses and the largest gradient differences, and exits
non-zero if the distributed runs do not match the single-process one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import scale_lib

DIM, HIDDEN, BATCH, SEQ = 16, 32, 4, 8


# [block.begin]
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_lib.rms_norm(x, self.weight, self.eps)


class Block(nn.Module):
    """x + residual_scale * down(silu(up(rms_norm(x))))."""

    def __init__(self, dim: int, hidden: int, residual_scale: float = 0.5) -> None:
        super().__init__()
        self.norm = RMSNorm(dim)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.residual_scale = residual_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.silu(self.up(self.norm(x)))
        return x + scale_lib.scale(self.down(h), self.residual_scale)


# [block.end]


class Model(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(DIM, HIDDEN) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def make_model(device: torch.device) -> Model:
    torch.manual_seed(0)
    model = Model().to(device)
    with torch.no_grad():  # a weight other than ones, so that its gradient path matters
        for block in model.blocks:
            block.norm.weight.uniform_(0.5, 1.5)
    return model


def make_data(steps: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(BATCH, SEQ, DIM, generator=g).to(device),
            torch.randn(BATCH, SEQ, DIM, generator=g).to(device),
        )
        for _ in range(steps)
    ]


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def _step(model: nn.Module, x: torch.Tensor, target: torch.Tensor, lr: float) -> tuple[float, dict[str, Any]]:
    from torch.distributed.tensor import DTensor

    out = model(x)
    if isinstance(out, DTensor):
        # Tensor parallel: the loss on the whole output. (In PyTorch 2.13 the mean of a sharded
        # DTensor is a Partial("avg") scalar whose backward doubles every gradient on 2 ranks.)
        out = out.full_tensor()
    loss = nn.functional.mse_loss(out, target)
    loss.backward()
    grads = {name: _full(p.grad) for name, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad  # plain SGD, written out: the same on DTensor and Tensor
            p.grad = None
    return float(_full(loss)), grads


def train_reference(data: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device, lr: float) -> Any:
    model = make_model(device)
    return [_step(model, x, t, lr) for x, t in data]


# [fsdp.begin]
def train_fsdp(data: list[tuple[torch.Tensor, torch.Tensor]], mesh: Any, lr: float) -> Any:
    """Data parallel with sharded parameters: each rank trains on its half of every batch."""
    from torch.distributed.fsdp import fully_shard

    model = make_model(torch.device(mesh.device_type))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    rank, world = mesh.get_local_rank(), mesh.size()
    results = []
    for x, target in data:
        rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        loss, grads = _step(model, x[rows], target[rows], lr)
        mean_loss = torch.tensor(loss / world, device=x.device)
        dist.all_reduce(mean_loss)  # the loss of the whole batch, for comparison
        results.append((float(mean_loss), grads))
    return results


# [fsdp.end]


# [tp.begin]
def parallelize(model: Model, mesh: Any) -> Model:
    """Tensor parallel linears, sequence parallel norm and residual: the activations between
    the linears are DTensors sharded along the sequence (Shard(1)), which rms_norm and scale
    keep; the linears' inputs and outputs are redistributed by DTensor."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    plan = {
        "norm": SequenceParallel(),  # rms_norm on Shard(1) activations, weight replicated
        "up": ColwiseParallel(input_layouts=Shard(1)),  # all-gathers the sequence
        "down": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),  # reduce-scatter
    }
    for block in model.blocks:
        parallelize_module(block, mesh, plan)  # the residual adds two Shard(1) DTensors
    parallelize_module(
        model,
        mesh,
        PrepareModuleInput(input_layouts=Replicate(), desired_input_layouts=Shard(1), use_local_output=False),
    )
    return model


# [tp.end]


def train_tensor_parallel(data: list[tuple[torch.Tensor, torch.Tensor]], mesh: Any, lr: float) -> Any:
    model = parallelize(make_model(torch.device(mesh.device_type)), mesh)
    return [_step(model, x, target, lr) for x, target in data]


def compare(reference: Any, other: Any, rtol: float = 1e-4, atol: float = 1e-5) -> dict[str, Any]:
    """Losses of both runs and the largest gradient difference; ``ok`` if all are close."""
    ok, worst = True, 0.0
    for (loss_ref, grads_ref), (loss, grads) in zip(reference, other, strict=True):
        ok &= abs(loss - loss_ref) <= atol + rtol * abs(loss_ref)
        for name, g_ref in grads_ref.items():
            g = grads[name].to(g_ref.device)
            ok &= bool(torch.allclose(g, g_ref, rtol=rtol, atol=atol))
            worst = max(worst, float((g - g_ref).abs().max()))
    return {
        "ok": bool(ok),
        "losses": [loss for loss, _ in other],
        "reference_losses": [loss for loss, _ in reference],
        "max_grad_diff": worst,
    }


def init(rank: int, world_size: int, backend: str, port: int) -> Any:
    """Join the process group on loopback and return a 1-D device mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    if backend == "gloo" and sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    device_type = "cuda" if backend == "nccl" else "cpu"
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    return init_device_mesh(device_type, (world_size,))


def run(rank: int, world_size: int, backend: str, port: int, steps: int) -> dict[str, Any]:
    mesh = init(rank, world_size, backend, port)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        data = make_data(steps, device)
        reference = train_reference(data, device, lr=0.1)
        return {
            "fsdp": compare(reference, train_fsdp(data, mesh, lr=0.1)),
            "tensor_parallel": compare(reference, train_tensor_parallel(data, mesh, lr=0.1)),
        }
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world_size: int, backend: str, port: int, steps: int, result_path: str) -> None:
    result = run(rank, world_size, backend, port, steps)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(result, f)


def main() -> int:
    import tempfile

    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        mp.spawn(_worker, args=(2, args.backend, free_port(), args.steps, path), nprocs=2)
        with open(path) as f:
            result = json.load(f)
    for name, r in result.items():
        print(json.dumps({"run": name, "backend": args.backend, **r}))
    return 0 if all(r["ok"] for r in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
