"""l2_norm: achieved read bandwidth of sqrt(sum(x**2)) against the frameworks' own norm.

    python benchmarks/bench_l2_norm.py            # full run (GPU sizes 2^12..2^28 if CUDA is present)
    python benchmarks/bench_l2_norm.py --quick    # seconds, CPU only: a smoke test for CI

Bytes moved = x read once (the result is one element); the roofline "copy" moves as many bytes
(an n/2-element copy).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib


def bench_gpu(sizes, dtypes, repeats) -> list[common.Result]:
    import torch

    results = []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for n in sizes:
            bytes_moved = n * torch.empty((), dtype=dtype).element_size()
            xs = [torch.randn(n, device="cuda").to(dtype) for _ in range(common.rotation(bytes_moved))]
            half = [
                (
                    torch.randn(max(n // 2, 1), device="cuda").to(dtype),
                    torch.empty(max(n // 2, 1), device="cuda", dtype=dtype),
                )
                for _ in xs
            ]
            impls = {
                "copy": lambda i: half[i % len(half)][1].copy_(half[i % len(half)][0]),
                "torch.linalg.vector_norm": lambda i: torch.linalg.vector_norm(xs[i % len(xs)]),
                "scale_lib": lambda i: scale_lib.l2_norm(xs[i % len(xs)]),
            }
            results += [
                common.Result("l2_norm", impl, "cuda", dtype_name, common.size_label(n), us, bytes_moved)
                for impl, us in common.time_cuda(impls, repeats).items()
            ]
    return results


def bench_cpu(sizes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        dtype = np.dtype(dtype_name)
        for n in sizes:
            bytes_moved = n * dtype.itemsize
            xs = [
                rng.standard_normal(n).astype(dtype)
                for _ in range(common.rotation(bytes_moved, budget=256 << 20, cache_bytes=32 << 20))
            ]
            impls = {
                "numpy.linalg.norm": lambda i: np.linalg.norm(xs[i % len(xs)]),
                "scale_lib": lambda i: scale_lib.l2_norm(xs[i % len(xs)]),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                results.append(
                    common.Result("l2_norm", impl, "cpu", dtype_name, common.size_label(n), us, bytes_moved)
                )
    return results


def main() -> None:
    args = common.parse_args(__doc__)
    results: list[common.Result] = []
    if (
        args.device in ("cuda", "all")
        and not args.quick
        and common.cuda_available()
        and scale_lib.cuda_available()
    ):
        results += bench_gpu([1 << e for e in range(12, 29, 2)], ["float32", "bfloat16"], args.repeats or 100)
    if args.device in ("cpu", "all"):
        sizes = [1 << 10, 1 << 14] if args.quick else [1 << e for e in range(12, 25, 2)]
        dtypes = ["float32"] if args.quick else ["float32", "float64"]
        results += bench_cpu(sizes, dtypes, args.repeats or (5 if args.quick else 50))
    gpu, cpu = [r for r in results if r.device == "cuda"], [r for r in results if r.device == "cpu"]
    if gpu:
        common.print_table(gpu, "copy", "l2_norm, CUDA")
    if cpu:
        common.print_table(cpu, "numpy.linalg.norm", "l2_norm, CPU")
    common.save(results, args.out_dir, "l2_norm")
    common.plot(results, args.out_dir, "l2_norm")


if __name__ == "__main__":
    main()
