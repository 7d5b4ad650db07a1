"""rms_norm on rows sharded over 2 devices: the sharding rules (each device normalises its own
rows) against the all-gathering behaviour of an op without rules (every device gathers the
whole input, normalises all of it and holds a replicated output).

    python benchmarks/bench_rms_norm_distributed.py            # 2 GPUs: torch (NCCL) and JAX
    python benchmarks/bench_rms_norm_distributed.py --quick    # seconds, CPU: gloo and 2 host devices

PyTorch: a DTensor sharded Shard(0), forward and forward+backward ("step"), timed on rank 0
(CUDA events; wall clock on the CPU). JAX: jax.jit over an array sharded P("b", None) on a
2-device mesh; "all-gather" constrains the input to be replicated first, which is what XLA
does for an FFI call without a partitioning rule. Bytes moved = the whole x read + out written.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

# 2 host devices for the JAX part on the CPU; set before JAX starts (ignored for GPUs).
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib

GPU_SHAPES = [(16384, 4096), (65536, 4096), (32768, 8192)]
CPU_SHAPES = [(4096, 1024)]
QUICK_SHAPES = [(256, 128)]
EPS = 1e-6


def _torch_rank(
    rank: int,
    backend: str,
    port: int,
    shapes: list[tuple[int, int]],
    dtype_name: str,
    repeats: int,
    path: str,
) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    mesh = init_device_mesh("cuda" if cuda else "cpu", (2,))
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dtype = getattr(torch, dtype_name)
    rows_out = []
    for rows, hidden in shapes:
        torch.manual_seed(0)
        x = distribute_tensor(torch.randn(rows, hidden, device=device, dtype=dtype), mesh, [Shard(0)])
        g = distribute_tensor(torch.randn(rows, hidden, device=device, dtype=dtype), mesh, [Shard(0)])
        w = distribute_tensor(torch.randn(hidden, device=device, dtype=dtype), mesh, [Replicate()])
        xg = x.detach().requires_grad_()
        g_whole = g.redistribute(placements=[Replicate()])  # the gradient of a replicated output

        def gathered(t: Any) -> Any:  # what an op without sharding rules makes of x
            return t.redistribute(placements=[Replicate()])

        impls = {
            "forward, sharded": lambda i: scale_lib.rms_norm(x, w, EPS),
            "forward, all-gather": lambda i: scale_lib.rms_norm(gathered(x), w, EPS),
            "step, sharded": lambda i: scale_lib.rms_norm(xg, w, EPS).backward(g),
            "step, all-gather": lambda i: scale_lib.rms_norm(gathered(xg), w, EPS).backward(g_whole),
        }
        if cuda:
            times = common.time_cuda(impls, repeats)
        else:
            times = {}
            for name, fn in impls.items():
                dist.barrier()
                times[name] = common.time_host(fn, repeats)
        rows_out += [(f"torch {name}", rows, hidden, us) for name, us in times.items()]
    if rank == 0:  # before the teardown, which is torch's and can fail on its own (see bench_torch)
        Path(path + ".part").write_text(json.dumps(rows_out))
        os.replace(path + ".part", path)  # whole or absent
    dist.barrier()
    dist.destroy_process_group()


def bench_torch(
    shapes: list[tuple[int, int]], dtype_name: str, repeats: int, cuda: bool
) -> list[common.Result]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "torch.json")
        backend = "nccl" if cuda else "gloo"
        try:
            mp.spawn(_torch_rank, args=(backend, port, shapes, dtype_name, repeats, path), nprocs=2)
        except mp.ProcessExitedException as e:
            # A rank that died of a signal (an exception in a rank is ProcessRaisedException and
            # propagates): gloo's process-group teardown occasionally aborts ("terminate called
            # without an active exception") after rank 0 has written every measurement.
            if not os.path.exists(path):
                raise
            print(f"torch: a rank failed after the measurements ({e}); results kept")
        rows = json.loads(Path(path).read_text())
    itemsize = 2 if dtype_name in ("float16", "bfloat16") else 4
    return [
        common.Result(
            "distributed_rms_norm",
            impl,
            "cuda" if cuda else "cpu",
            dtype_name,
            f"{r}x{h}",
            us,
            2 * r * h * itemsize,
        )
        for impl, r, h, us in rows
    ]


def bench_jax(
    shapes: list[tuple[int, int]], dtype_name: str, repeats: int, cuda: bool
) -> list[common.Result]:
    try:
        import jax
        from jax.sharding import NamedSharding, PartitionSpec
    except ImportError:
        print("JAX is not installed: no JAX rows")
        return []

    devices = [d for d in jax.devices() if (d.platform == "gpu") == cuda][:2]
    if len(devices) < 2:
        print(f"JAX sees fewer than 2 {'GPUs' if cuda else 'CPU devices'}: no JAX rows")
        return []
    mesh = jax.sharding.Mesh(devices, ("b",))
    rows_sharded = NamedSharding(mesh, PartitionSpec("b", None))
    whole = NamedSharding(mesh, PartitionSpec())
    results = []
    for rows, hidden in shapes:
        x = jax.device_put(
            jax.random.normal(jax.random.PRNGKey(0), (rows, hidden)).astype(dtype_name), rows_sharded
        )
        w = jax.device_put(jax.random.normal(jax.random.PRNGKey(1), (hidden,)).astype(dtype_name), whole)
        fns = {
            "jax forward, sharded": jax.jit(lambda a, b: scale_lib.rms_norm(a, b, EPS)),
            "jax forward, all-gather": jax.jit(
                lambda a, b: scale_lib.rms_norm(jax.lax.with_sharding_constraint(a, whole), b, EPS)
            ),
        }
        for name, f in fns.items():
            us = common.time_host(lambda i, f=f: f(x, w), repeats, sync=lambda r: r.block_until_ready())
            itemsize = x.dtype.itemsize
            results.append(
                common.Result(
                    "distributed_rms_norm",
                    name,
                    "cuda" if cuda else "cpu",
                    dtype_name,
                    f"{rows}x{hidden}",
                    us,
                    2 * rows * hidden * itemsize,
                )
            )
    return results


def main() -> None:
    if not hasattr(scale_lib, "rms_norm"):  # a library made from the template without it
        print("this library has no rms_norm: nothing to measure")
        return
    args = common.parse_args(__doc__)
    gpus = 0
    if (
        not args.quick
        and args.device in ("cuda", "all")
        and common.cuda_available()
        and scale_lib.cuda_available()
    ):
        import torch

        gpus = torch.cuda.device_count()
    results: list[common.Result] = []
    if gpus >= 2:
        repeats = args.repeats or 50
        results += bench_torch(GPU_SHAPES, "bfloat16", repeats, cuda=True)
        results += bench_jax(GPU_SHAPES, "bfloat16", repeats, cuda=True)
    elif args.device in ("cpu", "all"):
        shapes = QUICK_SHAPES if args.quick else CPU_SHAPES
        repeats = args.repeats or (5 if args.quick else 20)
        results += bench_torch(shapes, "float32", repeats, cuda=False)
        results += bench_jax(shapes, "float32", repeats, cuda=False)
    common.print_table(results, "torch forward, all-gather", "rms_norm on rows sharded over 2 devices")
    common.save(results, args.out_dir, "distributed")


if __name__ == "__main__":
    main()
