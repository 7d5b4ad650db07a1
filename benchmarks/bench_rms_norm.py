"""rms_norm: achieved bandwidth against the copy roofline and torch.nn.functional.rms_norm.

    python benchmarks/bench_rms_norm.py            # full run (CUDA shapes if a GPU is present)
    python benchmarks/bench_rms_norm.py --quick    # seconds, CPU only: a smoke test for CI

Bytes moved = x read once + out written once (the weight is a single row, cache resident).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib

EPS = 1e-6
GPU_SHAPES = [(65536, 128), (16384, 1024), (8192, 4096), (32768, 8192), (4096, 16384)]
CPU_SHAPES = [(4096, 128), (1024, 1024), (256, 4096)]


def _gpu_case(rows: int, hidden: int, dtype_name: str, repeats: int) -> list[common.Result]:
    """One shape and dtype; the buffers are freed when it returns."""
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    bytes_moved = 2 * rows * hidden * torch.empty((), dtype=dtype).element_size()
    sets = [
        (
            torch.randn(rows, hidden, device="cuda").to(dtype),
            torch.empty(rows, hidden, device="cuda", dtype=dtype),
        )
        for _ in range(common.rotation(bytes_moved))
    ]
    weight = torch.randn(hidden, device="cuda").to(dtype)

    def pick(i: int):
        return sets[i % len(sets)]

    impls = {
        "copy": lambda i: pick(i)[1].copy_(pick(i)[0]),
        "F.rms_norm": lambda i: F.rms_norm(pick(i)[0], (hidden,), weight, EPS),
        "scale_lib": lambda i: scale_lib.rms_norm(pick(i)[0], weight, EPS, out=pick(i)[1]),
    }
    size = f"{rows}x{hidden}"
    return [
        common.Result("rms_norm", impl, "cuda", dtype_name, size, us, bytes_moved)
        for impl, us in common.time_cuda(impls, repeats).items()
    ]


def bench_gpu(shapes, dtypes, repeats) -> list[common.Result]:
    return [
        r
        for dtype_name in dtypes
        for rows, hidden in shapes
        for r in _gpu_case(rows, hidden, dtype_name, repeats)
    ]


def numpy_rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """The straightforward NumPy implementation (float32 math for 16-bit inputs)."""
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    y = xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + eps) * weight
    return y.astype(x.dtype, copy=False)


def bench_cpu(shapes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        dtype = np.dtype(dtype_name)
        for rows, hidden in shapes:
            x = rng.standard_normal((rows, hidden)).astype(dtype)
            w = rng.standard_normal(hidden).astype(dtype)
            out = np.empty_like(x)
            bytes_moved = 2 * x.nbytes
            impls = {
                "copy": lambda i: np.copyto(out, x),
                "numpy": lambda i: numpy_rms_norm(x, w, EPS),
                "scale_lib": lambda i: scale_lib.rms_norm(x, w, EPS, out=out),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                results.append(
                    common.Result("rms_norm", impl, "cpu", dtype_name, f"{rows}x{hidden}", us, bytes_moved)
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
        results += bench_gpu(GPU_SHAPES, ["float16", "bfloat16"], args.repeats or 50)
    if args.device in ("cpu", "all"):
        shapes = [(64, 128)] if args.quick else CPU_SHAPES
        dtypes = ["float32"] if args.quick else ["float32", "float16"]
        results += bench_cpu(shapes, dtypes, args.repeats or (3 if args.quick else 20))
    common.print_table(results, "copy", "rms_norm")
    common.save(results, args.out_dir, "rms_norm")
    common.plot(results, args.out_dir, "rms_norm")


if __name__ == "__main__":
    main()
