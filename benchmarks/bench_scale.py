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
import common  # noqa: E402

import scale_lib  # noqa: E402

FACTOR = 1.7


def bench_gpu(sizes, dtypes, repeats) -> list[common.Result]:
    import torch

    results = []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for n in sizes:
            itemsize = torch.empty((), dtype=dtype).element_size()
            bytes_moved = 2 * n * itemsize
            sets = [
                (torch.randn(n, device="cuda").to(dtype), torch.empty(n, device="cuda", dtype=dtype))
                for _ in range(common.rotation(bytes_moved))
            ]
            impls = {
                "copy": lambda i: sets[i % len(sets)][1].copy_(sets[i % len(sets)][0]),
                "torch.mul(out=)": lambda i: torch.mul(sets[i % len(sets)][0], FACTOR, out=sets[i % len(sets)][1]),
                "scale_lib": lambda i: scale_lib.scale(sets[i % len(sets)][0], FACTOR, out=sets[i % len(sets)][1]),
            }
            for impl, fn in impls.items():
                us = common.time_cuda(fn, repeats)
                results.append(common.Result("scale", impl, "cuda", dtype_name, common.size_label(n), us, bytes_moved))
            del sets
    return results


def bench_jax_gpu(sizes, dtypes, repeats) -> list[common.Result]:
    """jitted scale_lib.scale against jitted x * f, both timed by wall clock to completion."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return []
    if not any(d.platform == "gpu" for d in jax.devices()):
        return []
    results = []
    ours = jax.jit(lambda x: scale_lib.scale(x, FACTOR))
    theirs = jax.jit(lambda x: x * jnp.asarray(FACTOR, x.dtype))
    for dtype_name in dtypes:
        for n in sizes:
            itemsize = jnp.dtype(dtype_name).itemsize
            bytes_moved = 2 * n * itemsize
            key = jax.random.PRNGKey(0)
            xs = [jax.random.normal(jax.random.fold_in(key, k), (n,), dtype=dtype_name) for k in range(common.rotation(bytes_moved))]
            for impl, fn in (("jnp x*f (jit)", theirs), ("scale_lib (jax.jit)", ours)):
                us = common.time_host(lambda i: fn(xs[i % len(xs)]), repeats, sync=lambda r: r.block_until_ready())
                results.append(common.Result("scale-jax", impl, "cuda", dtype_name, common.size_label(n), us, bytes_moved))
    return results


def bench_cpu(sizes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        for n in sizes:
            dtype = np.dtype(dtype_name)
            bytes_moved = 2 * n * dtype.itemsize
            sets = [(rng.standard_normal(n).astype(dtype), np.empty(n, dtype)) for _ in range(common.rotation(bytes_moved, budget=256 << 20, cache_bytes=32 << 20))]
            impls = {
                "copy": lambda i: np.copyto(sets[i % len(sets)][1], sets[i % len(sets)][0]),
                "numpy.multiply(out=)": lambda i: np.multiply(sets[i % len(sets)][0], dtype.type(FACTOR), out=sets[i % len(sets)][1]),
                "scale_lib": lambda i: scale_lib.scale(sets[i % len(sets)][0], FACTOR, out=sets[i % len(sets)][1]),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                results.append(common.Result("scale", impl, "cpu", dtype_name, common.size_label(n), us, bytes_moved))
    return results


def main() -> None:
    args = common.parse_args(__doc__)
    results: list[common.Result] = []
    run_gpu = args.device in ("cuda", "all") and not args.quick and common.cuda_available() and scale_lib.cuda_available()
    if run_gpu:
        sizes = [1 << e for e in range(12, 29, 2)]
        dtypes = ["float32", "float16", "bfloat16"]
        results += bench_gpu(sizes, dtypes, args.repeats or 100)
        results += bench_jax_gpu([1 << 20, 1 << 24, 1 << 26], ["float32", "bfloat16"], args.repeats or 50)
    if args.device in ("cpu", "all"):
        sizes = [1 << 10, 1 << 14] if args.quick else [1 << e for e in range(12, 25, 2)]
        dtypes = ["float32"] if args.quick else ["float32", "float64", "float16"]
        results += bench_cpu(sizes, dtypes, args.repeats or (5 if args.quick else 50))
    common.print_table([r for r in results if r.bench == "scale"], "copy", "scale")
    jax_rows = [r for r in results if r.bench == "scale-jax"]
    if jax_rows:
        common.print_table(jax_rows, "jnp x*f (jit)", "scale under jax.jit (wall clock)")
    common.save(results, args.out_dir, "scale")
    common.plot([r for r in results if r.bench == "scale"], args.out_dir, "scale")


if __name__ == "__main__":
    main()
