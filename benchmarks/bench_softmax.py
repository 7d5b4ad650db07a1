"""softmax (the kernel compiled at run time): the NVRTC kernel specialised on the row length
against the library's ahead-of-time kernel for any row length, PyTorch's softmax and the copy
roofline; the first call's compile time; the host cost of a cached call.

    python benchmarks/bench_softmax.py            # full run (CUDA shapes if a GPU is present)
    python benchmarks/bench_softmax.py --quick    # seconds, CPU only: a smoke test for CI

Bytes moved = x read once + out written once; the roofline "copy" moves as many bytes. The
first-call times use a cache directory of their own (SCALE_LIB_CACHE_DIR): "compile" is a call
with nothing cached (NVRTC compiles, the CUBIN is written and loaded), "disk cache" a first call
in a new process that finds the CUBIN on disk. "Cached call" is the host time of one call with
the kernel loaded, through the bare ABI, against the ahead-of-time kernel's call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib
from scale_lib import _nvrtc

# The same 2^24 elements (64 MiB in float32, more than the L2) as rows of 128 to 32768, the
# longest row the runtime kernel keeps in registers; and a decode-sized batch.
GPU_SHAPES = [(131072, 128), (32768, 512), (16384, 1024), (4096, 4096), (2048, 8192), (1024, 16384)]
GPU_SHAPES += [(512, 32768), (8, 4096)]
CPU_SHAPES = [(64, 1024), (1024, 4096)]
COMPILE_COLS = [3001, 3003, 3005]  # row lengths no other measurement uses: compiled when first called


def _label(rows: int, cols: int) -> str:
    return f"{rows}x{cols}"


def _gpu_case(rows: int, cols: int, dtype_name: str, repeats: int) -> list[common.Result]:
    import torch

    dtype = getattr(torch, dtype_name)
    itemsize = torch.empty((), dtype=dtype).element_size()
    bytes_moved = 2 * rows * cols * itemsize
    sets = [
        (
            torch.randn(rows, cols, device="cuda").to(dtype),
            torch.empty(rows, cols, device="cuda", dtype=dtype),
            torch.empty(rows, cols, device="cuda", dtype=dtype),
        )
        for _ in range(common.rotation(bytes_moved))
    ]

    def pick(i: int):
        return sets[i % len(sets)]

    lib = scale_lib.lib
    impls = {
        "copy": lambda i: pick(i)[2].copy_(pick(i)[0]),
        "torch.softmax": lambda i: torch.softmax(pick(i)[0], dim=-1),
        "ahead of time": lambda i: lib.softmax_ahead_of_time(pick(i)[1], pick(i)[0]),
        "NVRTC": lambda i: lib.softmax(pick(i)[1], pick(i)[0]),
    }
    expected = torch.softmax(sets[0][0].double(), dim=-1)
    for name in ("NVRTC", "ahead of time"):  # a benchmark of right answers
        impls[name](0)
        torch.testing.assert_close(sets[0][1].double(), expected, rtol=2e-2, atol=1e-4, msg=name)
    return [
        common.Result("softmax", impl, "cuda", dtype_name, _label(rows, cols), us, bytes_moved)
        for impl, us in common.time_cuda(impls, repeats).items()
    ]


_FIRST_CALL = """
import sys, time, torch, scale_lib
x = torch.randn(4, int(sys.argv[1]), device="cuda", dtype=getattr(torch, sys.argv[2]))
scale_lib.lib.softmax_ahead_of_time(torch.empty_like(x), x)  # the process's other first-call costs
torch.cuda.synchronize()
t0 = time.perf_counter()
scale_lib.softmax(x)
torch.cuda.synchronize()
print((time.perf_counter() - t0) * 1e6)
"""


def _first_calls(dtype_name: str) -> list[common.Result]:
    """First calls in fresh processes: with an empty cache, then with the CUBIN on disk."""
    results = []
    with tempfile.TemporaryDirectory(prefix="scale_lib_bench_") as cache:
        env = {**os.environ, "SCALE_LIB_CACHE_DIR": cache}
        for cols in COMPILE_COLS:
            for impl in ("first call: compile", "first call: disk cache"):
                run = subprocess.run(
                    [sys.executable, "-c", _FIRST_CALL, str(cols), dtype_name],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                us = float(run.stdout.strip().splitlines()[-1])
                results.append(
                    common.Result("softmax_first_call", impl, "cuda", dtype_name, f"4x{cols}", us, 0)
                )
    return results


def _cached_call(dtype_name: str, calls: int = 20000) -> list[common.Result]:
    """Host microseconds per call of a tiny launch-bound softmax, the kernel already loaded."""
    import torch

    x = torch.randn(1, 128, device="cuda", dtype=getattr(torch, dtype_name))
    out = torch.empty_like(x)
    lib = scale_lib.lib
    results = []
    for impl, fn in (("NVRTC", lib.softmax), ("ahead of time", lib.softmax_ahead_of_time)):
        samples = []
        for _ in range(5):
            fn(out, x)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(out, x)
            samples.append((time.perf_counter() - t0) * 1e6 / calls)
            torch.cuda.synchronize()
        results.append(
            common.Result("softmax_cached_call", impl, "cuda", dtype_name, "1x128", min(samples), 0)
        )
    return results


def bench_gpu(shapes, dtypes, repeats) -> list[common.Result]:
    results = [r for dt in dtypes for rows, cols in shapes for r in _gpu_case(rows, cols, dt, repeats)]
    results += _first_calls("float32")
    results += _cached_call("float32")
    return results


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    """The straightforward NumPy implementation (float32 math for 16-bit inputs)."""
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    e = np.exp(xf - xf.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype, copy=False)


def bench_cpu(shapes, dtypes, repeats) -> list[common.Result]:
    results = []
    rng = np.random.default_rng(0)
    for dtype_name in dtypes:
        for rows, cols in shapes:
            x = rng.standard_normal((rows, cols)).astype(dtype_name)
            out, src, dst = np.empty_like(x), np.empty_like(x), np.empty_like(x)
            bytes_moved = x.nbytes + out.nbytes
            impls = {
                "copy": lambda i: np.copyto(dst, src),
                "numpy": lambda i: numpy_softmax(x),
                "scale_lib": lambda i: scale_lib.softmax(x, out=out),
            }
            for impl, fn in impls.items():
                us = common.time_host(fn, repeats)
                results.append(
                    common.Result("softmax", impl, "cpu", dtype_name, _label(rows, cols), us, bytes_moved)
                )
    return results


def bench_compile(arch: int, quick: bool) -> list[common.Result]:
    """NVRTC alone (no GPU needed): one specialisation compiled with nothing cached."""
    results = []
    if _nvrtc.nvrtc() is None:
        print("no NVRTC (pip install 'scale-lib[nvrtc]'): compile time not measured")
        return results
    source = (_nvrtc.SOURCES / "softmax.cu").read_text()
    with tempfile.TemporaryDirectory(prefix="scale_lib_bench_") as cache:
        os.environ["SCALE_LIB_CACHE_DIR"] = cache
        for cols in COMPILE_COLS[: 1 if quick else None]:
            defines = {
                "SCALE_LIB_COLS": str(cols),
                "SCALE_LIB_DTYPE": "2",
                "SCALE_LIB_THREADS_PER_ROW": "256",  # kernels/softmax/softmax.cu's choice for these rows
                "SCALE_LIB_ROWS_PER_BLOCK": "1",
                "SCALE_LIB_VEC": "1",
            }
            t0 = time.perf_counter()
            _nvrtc.compile_cached("softmax", source, defines, arch)
            us = (time.perf_counter() - t0) * 1e6
            results.append(
                common.Result("softmax_compile", "NVRTC", "cpu", "float32", f"sm_{arch} 4x{cols}", us, 0)
            )
        del os.environ["SCALE_LIB_CACHE_DIR"]
    return results


def main() -> None:
    args = common.parse_args(__doc__)
    results: list[common.Result] = []
    if args.device in ("cuda", "all") and not args.quick and common.cuda_available():
        if not scale_lib.cuda_available():
            sys.exit("bench_softmax: this scale_lib has no CUDA kernels")
        results += bench_gpu(GPU_SHAPES, ["float32", "bfloat16"], args.repeats or 50)
    if args.device in ("cpu", "all"):
        shapes = [(8, 256)] if args.quick else CPU_SHAPES
        results += bench_cpu(shapes, ["float32"], args.repeats or (3 if args.quick else 20))
        results += bench_compile(90, args.quick)
    throughput = [r for r in results if r.bench == "softmax"]
    common.print_table(throughput, "copy", "softmax")
    for r in results:
        if r.bench != "softmax":
            print(
                f"{r.bench:20s} {r.impl:24s} {r.device:5s} {r.dtype:9s} {r.size:>14s} {r.median_us:10.1f} us"
            )
    common.save(results, args.out_dir, "softmax")
    common.plot(throughput, args.out_dir, "softmax")


if __name__ == "__main__":
    main()
