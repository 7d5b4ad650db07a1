"""scale: achieved bandwidth against the copy roofline and the frameworks' own multiply.

    python benchmarks/bench_scale.py            # full run (GPU sizes 2^12..2^28 if CUDA is present)
    python benchmarks/bench_scale.py --quick    # seconds, CPU only: a smoke test for CI

Bytes moved = n * itemsize read + n * itemsize written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib

FACTOR = 1.7


def _gpu_case(n: int, dtype_name: str, repeats: int) -> list[common.Result]:
    """One size and dtype; the buffers are freed when it returns."""
    import torch

    dtype = getattr(torch, dtype_name)
    bytes_moved = 2 * n * torch.empty((), dtype=dtype).element_size()
    sets = [
        (torch.randn(n, device="cuda").to(dtype), torch.empty(n, device="cuda", dtype=dtype))
        for _ in range(common.rotation(bytes_moved))
    ]

    def pick(i: int):
        return sets[i % len(sets)]

    impls = {
        "copy": lambda i: pick(i)[1].copy_(pick(i)[0]),
        "torch.mul(out=)": lambda i: torch.mul(pick(i)[0], FACTOR, out=pick(i)[1]),
        "scale_lib": lambda i: scale_lib.scale(pick(i)[0], FACTOR, out=pick(i)[1]),
    }
    size = common.size_label(n)
    return [
        common.Result("scale", impl, "cuda", dtype_name, size, us, bytes_moved)
        for impl, us in common.time_cuda(impls, repeats).items()
    ]


def bench_gpu(sizes, dtypes, repeats) -> list[common.Result]:
    return [r for dtype_name in dtypes for n in sizes for r in _gpu_case(n, dtype_name, repeats)]


def bench_jax_gpu(sizes, dtypes, repeats) -> list[common.Result]:
    """Jitted scale_lib.scale against jitted x * f, per application.

    A jitted call costs tens of microseconds of dispatch, more than the kernel at small sizes. So
    each program applies the op K times in a chain (optimization_barrier keeps XLA from fusing
    the multiplies into one pass), and the time per op is the difference between K = 33 and
    K = 1 programs, divided by 32: the dispatch cancels.

    Every intermediate is an output of the program, so each step writes a fresh buffer. Otherwise
    XLA runs its own multiply in place over the dead input, which a custom call cannot do; at
    n = 2^24 that halves the working set to about the size of the L2 cache, and the comparison
    measures cache hits instead of the kernels (see docs/performance.md).
    """
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return []
    if not any(d.platform == "gpu" for d in jax.devices()):
        return []

    def chain(op, k):
        def f(x):
            steps = []
            for _ in range(k):
                x = jax.lax.optimization_barrier(op(x))
                steps.append(x)
            return steps

        return jax.jit(f)

    impls = {
        "jnp x*f (jit)": lambda v: v * jnp.asarray(-1.0, v.dtype),  # -1: values stay bounded
        "scale_lib (jax.jit)": lambda v: scale_lib.scale(v, -1.0),
    }
    results = []
    for dtype_name in dtypes:
        for n in sizes:
            bytes_moved = 2 * n * jnp.dtype(dtype_name).itemsize
            x = jax.random.normal(jax.random.PRNGKey(0), (n,), dtype=dtype_name)
            for impl, op in impls.items():
                short, long_ = chain(op, 1), chain(op, 33)
                t1 = common.time_host(lambda i: short(x), repeats, sync=jax.block_until_ready)
                t33 = common.time_host(lambda i: long_(x), repeats, sync=jax.block_until_ready)
                us = max(t33 - t1, 1e-3) / 32
                results.append(
                    common.Result(
                        "scale-jax", impl, "cuda", dtype_name, common.size_label(n), us, bytes_moved
                    )
                )
    return results


def bench_cpu(sizes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        for n in sizes:
            dtype = np.dtype(dtype_name)
            bytes_moved = 2 * n * dtype.itemsize
            sets = [
                (rng.standard_normal(n).astype(dtype), np.empty(n, dtype))
                for _ in range(common.rotation(bytes_moved, budget=256 << 20, cache_bytes=32 << 20))
            ]
            impls = {
                "copy": lambda i: np.copyto(sets[i % len(sets)][1], sets[i % len(sets)][0]),
                "numpy.multiply(out=)": lambda i: np.multiply(
                    sets[i % len(sets)][0], dtype.type(FACTOR), out=sets[i % len(sets)][1]
                ),
                "scale_lib": lambda i: scale_lib.scale(
                    sets[i % len(sets)][0], FACTOR, out=sets[i % len(sets)][1]
                ),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                results.append(
                    common.Result("scale", impl, "cpu", dtype_name, common.size_label(n), us, bytes_moved)
                )
    return results


def main() -> None:
    args = common.parse_args(__doc__)
    results: list[common.Result] = []
    run_gpu = (
        args.device in ("cuda", "all")
        and not args.quick
        and common.cuda_available()
        and scale_lib.cuda_available()
    )
    if run_gpu:
        sizes = [1 << e for e in range(12, 29, 2)]
        dtypes = ["float32", "float16", "bfloat16"]
        results += bench_gpu(sizes, dtypes, args.repeats or 100)
        results += bench_jax_gpu([1 << 22, 1 << 24, 1 << 26], ["float32", "bfloat16"], args.repeats or 30)
    if args.device in ("cpu", "all"):
        sizes = [1 << 10, 1 << 14] if args.quick else [1 << e for e in range(12, 25, 2)]
        dtypes = ["float32"] if args.quick else ["float32", "float64", "float16"]
        results += bench_cpu(sizes, dtypes, args.repeats or (5 if args.quick else 50))
    common.print_table([r for r in results if r.bench == "scale"], "copy", "scale")
    jax_rows = [r for r in results if r.bench == "scale-jax"]
    if jax_rows:
        common.print_table(jax_rows, "jnp x*f (jit)", "scale under jax.jit (per op, dispatch cancelled)")
    common.save(results, args.out_dir, "scale")
    common.plot([r for r in results if r.bench == "scale"], args.out_dir, "scale")


if __name__ == "__main__":
    main()
