"""axpby: achieved bandwidth of a * x + b * y against the copy roofline and the frameworks' own.

    python benchmarks/bench_axpby.py            # full run (GPU sizes 2^16..2^26 if CUDA is present)
    python benchmarks/bench_axpby.py --quick    # seconds, CPU only: a smoke test for CI

Bytes moved = x and y read once + out written once (3 n itemsize); the roofline "copy" moves as
many bytes (a 3n/2-element copy).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib

A, B = 1.5, -0.5


def bench_gpu(sizes, dtypes, repeats) -> list[common.Result]:
    import torch

    results = []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for n in sizes:
            bytes_moved = 3 * n * torch.empty((), dtype=dtype).element_size()
            sets = [
                [torch.randn(n, device="cuda").to(dtype) for _ in range(3)]
                for _ in range(common.rotation(bytes_moved))
            ]
            flat = [
                (
                    torch.randn(3 * n // 2, device="cuda").to(dtype),
                    torch.empty(3 * n // 2, device="cuda", dtype=dtype),
                )
                for _ in sets
            ]

            def pick(i: int):
                return sets[i % len(sets)]

            impls = {
                "copy": lambda i: flat[i % len(flat)][1].copy_(flat[i % len(flat)][0]),
                "torch.add(alpha=, out=)": lambda i: torch.add(
                    pick(i)[0] * A, pick(i)[1], alpha=B, out=pick(i)[2]
                ),
                "scale_lib": lambda i: scale_lib.axpby(pick(i)[0], pick(i)[1], A, B, out=pick(i)[2]),
            }
            results += [
                common.Result("axpby", impl, "cuda", dtype_name, common.size_label(n), us, bytes_moved)
                for impl, us in common.time_cuda(impls, repeats).items()
            ]
    return results


def bench_cpu(sizes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        dtype = np.dtype(dtype_name)
        for n in sizes:
            bytes_moved = 3 * n * dtype.itemsize
            sets = [
                [rng.standard_normal(n).astype(dtype) for _ in range(3)]
                for _ in range(common.rotation(bytes_moved, budget=256 << 20, cache_bytes=32 << 20))
            ]
            a, b = dtype.type(A), dtype.type(B)
            impls = {
                "copy": lambda i: np.copyto(sets[i % len(sets)][2], sets[i % len(sets)][0]),
                "numpy a*x + b*y": lambda i: np.add(
                    a * sets[i % len(sets)][0], b * sets[i % len(sets)][1], out=sets[i % len(sets)][2]
                ),
                "scale_lib": lambda i: scale_lib.axpby(
                    sets[i % len(sets)][0], sets[i % len(sets)][1], A, B, out=sets[i % len(sets)][2]
                ),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                moved = 2 * n * dtype.itemsize if impl == "copy" else bytes_moved
                results.append(
                    common.Result("axpby", impl, "cpu", dtype_name, common.size_label(n), us, moved)
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
        results += bench_gpu([1 << e for e in range(16, 27, 2)], ["float32", "bfloat16"], args.repeats or 100)
    if args.device in ("cpu", "all"):
        sizes = [1 << 10, 1 << 14] if args.quick else [1 << e for e in range(12, 25, 2)]
        dtypes = ["float32"] if args.quick else ["float32", "float64"]
        results += bench_cpu(sizes, dtypes, args.repeats or (5 if args.quick else 50))
    common.print_table(results, "copy", "axpby")
    common.save(results, args.out_dir, "axpby")
    common.plot(results, args.out_dir, "axpby")


if __name__ == "__main__":
    main()
