"""silu_and_mul (the Triton op): achieved bandwidth against the copy roofline, PyTorch's eager
``F.silu(x[..., :d]) * x[..., d:]`` and its ``torch.compile``d form.

    python benchmarks/bench_silu_and_mul.py            # full run (CUDA shapes if a GPU is present)
    python benchmarks/bench_silu_and_mul.py --quick    # seconds, CPU only: a smoke test for CI

Bytes moved = x read once (rows x 2d) + out written once (rows x d). The roofline "copy" moves as
many bytes: a (rows, 3d/2) tensor copied into another.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib

# Decode (one to a few tokens) to a large prefill batch, at LLaMA-3-8B's intermediate size.
D = 14336
GPU_SHAPES = [(1, D), (8, D), (64, D), (512, D), (4096, D), (16384, D), (65536, D)]
CPU_SHAPES = [(1, 4096), (64, 4096), (1024, 4096)]
LARGE = {"16384x2x14336", "65536x2x14336"}


def _label(rows: int, d: int) -> str:
    return f"{rows}x2x{d}"


def _eager(x):
    import torch.nn.functional as F

    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def _gpu_case(rows: int, d: int, dtype_name: str, repeats: int) -> list[common.Result]:
    import torch
    import torch.nn.functional as F

    # A fresh compilation for this shape and dtype (PyTorch stops recompiling a function after
    # a few shapes and would silently run it eagerly).
    torch._dynamo.reset()
    compiled = torch.compile(_eager, dynamic=False)

    dtype = getattr(torch, dtype_name)
    itemsize = torch.empty((), dtype=dtype).element_size()
    bytes_moved = 3 * rows * d * itemsize
    sets = [
        (
            torch.randn(rows, 2 * d, device="cuda").to(dtype),
            torch.empty(rows, d, device="cuda", dtype=dtype),
            torch.empty(rows, 3 * d // 2, device="cuda", dtype=dtype),
            torch.empty(rows, 3 * d // 2, device="cuda", dtype=dtype),
        )
        for _ in range(common.rotation(bytes_moved))
    ]

    def pick(i: int):
        return sets[i % len(sets)]

    impls = {
        "copy": lambda i: pick(i)[3].copy_(pick(i)[2]),
        "torch eager": lambda i: _eager(pick(i)[0]),
        "torch.compile": lambda i: compiled(pick(i)[0]),
        "scale_lib": lambda i: scale_lib.silu_and_mul(pick(i)[0], out=pick(i)[1]),
    }
    expected = F.silu(sets[0][0][..., :d].float()) * sets[0][0][..., d:].float()
    got = scale_lib.silu_and_mul(sets[0][0]).float()
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=1e-2)  # a benchmark of a right answer
    return [
        common.Result("silu_and_mul", impl, "cuda", dtype_name, _label(rows, d), us, bytes_moved)
        for impl, us in common.time_cuda(impls, repeats).items()
    ]


def bench_gpu(shapes, dtypes, repeats) -> list[common.Result]:
    return [r for dt in dtypes for rows, d in shapes for r in _gpu_case(rows, d, dt, repeats)]


def numpy_silu_and_mul(x: np.ndarray) -> np.ndarray:
    """The straightforward NumPy implementation (float32 math for 16-bit inputs)."""
    d = x.shape[-1] // 2
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    a, b = xf[..., :d], xf[..., d:]
    return (a / (1 + np.exp(-a)) * b).astype(x.dtype, copy=False)


def bench_cpu(shapes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        for rows, d in shapes:
            x = rng.standard_normal((rows, 2 * d)).astype(dtype_name)
            out = np.empty((rows, d), dtype_name)
            src, dst = np.empty((rows, 3 * d // 2), dtype_name), np.empty((rows, 3 * d // 2), dtype_name)
            bytes_moved = x.nbytes + out.nbytes
            impls = {
                "copy": lambda i: np.copyto(dst, src),
                "numpy": lambda i: numpy_silu_and_mul(x),
                "scale_lib": lambda i: scale_lib.silu_and_mul(x, out=out),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                results.append(
                    common.Result("silu_and_mul", impl, "cpu", dtype_name, _label(rows, d), us, bytes_moved)
                )
    return results


def main() -> None:
    args = common.parse_args(__doc__)
    results: list[common.Result] = []
    if args.device in ("cuda", "all") and not args.quick and common.cuda_available():
        if not (scale_lib.cuda_available() and scale_lib.build_info()["triton"]):
            sys.exit("bench_silu_and_mul: this scale_lib has no Triton kernels (build with Triton)")
        results += bench_gpu(GPU_SHAPES, ["bfloat16", "float16", "float32"], args.repeats or 50)
    if args.device in ("cpu", "all"):
        shapes = [(8, 256)] if args.quick else CPU_SHAPES
        results += bench_cpu(shapes, ["float32"], args.repeats or (3 if args.quick else 20))
    common.print_table(results, "copy", "silu_and_mul")
    common.save(results, args.out_dir, "silu_and_mul")
    common.plot(results, args.out_dir, "silu_and_mul")


if __name__ == "__main__":
    main()
