"""flatnonzero: time to find the non-zero elements, against the frameworks' own.

    python benchmarks/bench_flatnonzero.py            # full run (GPU sizes 2^12..2^26 if CUDA is present)
    python benchmarks/bench_flatnonzero.py --quick    # seconds, CPU only: a smoke test for CI

Half the elements are non-zero, at random places. Bytes moved = x read once + the int64 indices
written once (the output's size depends on the data, so the library allocates it: the time
includes that allocation, as the frameworks' own does).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib


def _data(rng: np.random.Generator, n: int, dtype: np.dtype) -> np.ndarray:
    return (rng.standard_normal(n) * (rng.random(n) < 0.5)).astype(dtype)


def bench_gpu(sizes, dtypes, repeats) -> list[common.Result]:
    import torch

    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        for n in sizes:
            host = _data(rng, n, np.dtype(dtype_name))
            bytes_moved = host.nbytes + 8 * int(np.count_nonzero(host))
            xs = [torch.from_numpy(host).cuda() for _ in range(common.rotation(bytes_moved))]
            impls = {
                "torch.nonzero": lambda i: torch.nonzero(xs[i % len(xs)]).view(-1),
                "scale_lib": lambda i: scale_lib.flatnonzero(xs[i % len(xs)]),
            }
            results += [
                common.Result("flatnonzero", impl, "cuda", dtype_name, common.size_label(n), us, bytes_moved)
                for impl, us in common.time_cuda(impls, repeats).items()
            ]
    return results


def bench_cpu(sizes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        for n in sizes:
            host = _data(rng, n, np.dtype(dtype_name))
            bytes_moved = host.nbytes + 8 * int(np.count_nonzero(host))
            xs = [
                host.copy()
                for _ in range(common.rotation(bytes_moved, budget=256 << 20, cache_bytes=32 << 20))
            ]
            impls = {
                "numpy.flatnonzero": lambda i: np.flatnonzero(xs[i % len(xs)]),
                "scale_lib": lambda i: scale_lib.flatnonzero(xs[i % len(xs)]),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                results.append(
                    common.Result(
                        "flatnonzero", impl, "cpu", dtype_name, common.size_label(n), us, bytes_moved
                    )
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
        results += bench_gpu([1 << e for e in range(12, 27, 2)], ["float32"], args.repeats or 100)
    if args.device in ("cpu", "all"):
        sizes = [1 << 10, 1 << 14] if args.quick else [1 << e for e in range(12, 25, 2)]
        results += bench_cpu(sizes, ["float32"], args.repeats or (5 if args.quick else 50))
    gpu, cpu = [r for r in results if r.device == "cuda"], [r for r in results if r.device == "cpu"]
    if gpu:
        common.print_table(gpu, "torch.nonzero", "flatnonzero, CUDA")
    if cpu:
        common.print_table(cpu, "numpy.flatnonzero", "flatnonzero, CPU")
    common.save(results, args.out_dir, "flatnonzero")
    common.plot(results, args.out_dir, "flatnonzero")


if __name__ == "__main__":
    main()
