"""cumsum (the scan pattern): achieved bandwidth against a device-to-device copy, ``torch.cumsum``
and ``jax.lax.cumsum``, float32, float64 and bfloat16 on CUDA (float32 on the CPU), from one row
of 2^24 elements to 65536 rows of 128.

    python benchmarks/bench_cumsum.py            # full run (CUDA shapes if a GPU is present)
    python benchmarks/bench_cumsum.py --quick    # seconds, CPU only: a smoke test for CI

Bytes moved = x read once + out written once (the copy moves as many). The CUDA implementations
run in the same process: the copy, ``torch.cumsum(out=)`` and ``scale_lib.cumsum(out=)`` timed
with CUDA events on PyTorch's stream, L2 flushed before each call; ``jax.lax.cumsum`` (jitted)
by wall clock to ``block_until_ready``, as it runs on JAX's own stream.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib

# Few long rows to many short ones. The first six are the targets' shapes; the last two sit at
# the edges of the launcher's schemes (kernels/scan.cuh).
GPU_SHAPES = [
    (1, 2**24),
    (16, 2**20),
    (64, 2**18),
    (65536, 128),
    (16384, 1024),
    (8192, 8192),
    (32768, 512),
    (512, 32768),
]
GPU_DTYPES = ("float32", "float64", "bfloat16")
# The largest error against a float64 cumsum, relative to the sum of magnitudes so far.
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 1e-2}
CPU_SHAPES = [(1, 2**20), (64, 4096), (4096, 128)]
LARGE_BYTES = 64 * 1024 * 1024  # the bandwidth target holds from inputs of this size


def label(rows: int, cols: int) -> str:
    return f"{rows}x{common.size_label(cols)}"


def _jax_time(rows: int, cols: int, dtype: str, repeats: int) -> float | None:
    try:
        import jax
        import jax.numpy as jnp

        if not any(d.platform == "gpu" for d in jax.devices()):
            return None
    except Exception:  # noqa: BLE001 - no JAX, or no JAX GPU: the column stays empty
        return None
    if dtype == "float64" and not jax.config.read("jax_enable_x64"):
        return None  # JAX would compute in float32
    x = np.random.default_rng(0).standard_normal((rows, cols), np.float32)
    x = jax.device_put(jnp.asarray(x).astype(dtype))
    fn = jax.jit(lambda a: jax.lax.cumsum(a, axis=1))
    return common.time_host(lambda i: fn(x), repeats, sync=lambda r: r.block_until_ready())


def _gpu_case(rows: int, cols: int, dtype: str, repeats: int) -> list[common.Result]:
    import torch

    kind = getattr(torch, dtype)
    bytes_moved = 2 * rows * cols * kind.itemsize
    sets = [
        (
            torch.randn(rows, cols, device="cuda").to(kind),
            torch.empty(rows, cols, device="cuda", dtype=kind),
            torch.empty(rows, cols, device="cuda", dtype=kind),
        )
        for _ in range(common.rotation(bytes_moved))
    ]

    def pick(i: int):
        return sets[i % len(sets)]

    impls = {
        "copy": lambda i: pick(i)[2].copy_(pick(i)[0]),
        "torch.cumsum": lambda i: torch.cumsum(pick(i)[0], -1, out=pick(i)[1]),
        "scale_lib": lambda i: scale_lib.cumsum(pick(i)[0], out=pick(i)[2]),
    }
    x = sets[0][0]
    got = scale_lib.cumsum(x)
    scale = torch.cumsum(x.abs().double(), -1)  # a running sum's error grows with what it added
    error = (got.double() - torch.cumsum(x.double(), -1)).abs() / scale.clamp_min(1)
    assert float(error.max()) < TOLERANCE[dtype], "a benchmark of a right answer"
    assert torch.equal(scale_lib.cumsum(x), got), "the same input gave other bits"
    size = label(rows, cols)
    results = [
        common.Result("cumsum", impl, "cuda", dtype, size, us, bytes_moved)
        for impl, us in common.time_cuda(impls, repeats).items()
    ]
    sets.clear()  # the GPU memory back before JAX takes its own
    jax_us = _jax_time(rows, cols, dtype, repeats)
    if jax_us is not None:
        results.append(common.Result("cumsum", "jax.lax.cumsum", "cuda", dtype, size, jax_us, bytes_moved))
    return results


def bench_cpu(shapes, repeats) -> list[common.Result]:
    import torch

    results = []
    rng = np.random.default_rng(0)
    for rows, cols in shapes:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        out, dst = np.empty_like(x), np.empty_like(x)
        tx, tout = torch.from_numpy(x), torch.empty(rows, cols)
        impls = {
            "copy": lambda i: np.copyto(dst, x),
            "numpy": lambda i: np.cumsum(x, axis=-1, out=dst),
            "torch.cumsum": lambda i: torch.cumsum(tx, -1, out=tout),
            "scale_lib": lambda i: scale_lib.cumsum(x, out=out),
        }
        for impl, fn in impls.items():
            us = common.time_host(fn, repeats)
            size = label(rows, cols)
            results.append(common.Result("cumsum", impl, "cpu", "float32", size, us, 2 * x.nbytes))
    return results


def main() -> None:
    args = common.parse_args(__doc__)
    results: list[common.Result] = []
    if args.device in ("cuda", "all") and not args.quick and common.cuda_available():
        if not scale_lib.cuda_available():
            sys.exit("bench_cumsum: this scale_lib was built without CUDA")
        for dtype in GPU_DTYPES:
            for rows, cols in GPU_SHAPES:
                results += _gpu_case(rows, cols, dtype, args.repeats or 50)
    if args.device in ("cpu", "all"):
        shapes = [(4, 256)] if args.quick else CPU_SHAPES
        results += bench_cpu(shapes, args.repeats or (3 if args.quick else 20))
    common.print_table(results, "copy", "cumsum")
    common.save(results, args.out_dir, "cumsum")
    common.plot(results, args.out_dir, "cumsum")


if __name__ == "__main__":
    main()
