"""Host overhead of one call on a tiny array: the bare TVM-FFI call, the public API, the PyTorch
custom op, a nanobind binding of the same CPU kernel, and the frameworks' own multiply.

    python benchmarks/bench_overhead.py            # builds the nanobind baseline first
    python benchmarks/bench_overhead.py --quick    # fewer repeats, no nanobind build

Each number is the median over repeats of (wall time of N back-to-back calls) / N, the
implementations taking turns. On CUDA the
calls are launched back to back and synchronised once per repeat, so the time is what the host
spends per call (the kernels are tiny).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402

import scale_lib  # noqa: E402

N_ELEMENTS = 16


def build_nanobind(build_dir: Path) -> Any:
    """Build and import the nanobind baseline (benchmarks/nanobind_baseline); None if it can't."""
    try:
        import nanobind
    except ImportError:
        print("nanobind is not installed: no nanobind baseline")
        return None
    cmakedir = subprocess.run(
        [sys.executable, "-m", "tvm_ffi.config", "--cmakedir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        [
            "cmake",
            "-S",
            str(HERE / "nanobind_baseline"),
            "-B",
            str(build_dir),
            *generator,
            f"-Dtvm_ffi_ROOT={cmakedir}",
            f"-Dnanobind_ROOT={nanobind.cmake_dir()}",
            f"-DPython_EXECUTABLE={sys.executable}",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build_dir)], check=True, capture_output=True)
    sys.path.insert(0, str(build_dir))
    import scale_nb

    return scale_nb


def per_call_us(
    impls: dict[str, Callable[[], Any]], number: int, repeats: int, sync: Callable[[], Any] | None = None
) -> dict[str, float]:
    """Median over ``repeats`` samples of (wall time of ``number`` calls) / ``number``, per impl.

    The implementations take turns sample by sample, so that drift of the machine (clock
    frequency, a neighbour) is shared by all of them instead of landing on whichever ran during
    it: the differences between columns are what this benchmark is about.
    """
    for fn in impls.values():
        for _ in range(number // 10 + 10):
            fn()
    if sync:
        sync()
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(repeats):
        for name, fn in impls.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            if sync:
                sync()
            samples[name].append((time.perf_counter() - t0) / number * 1e6)
    return {name: statistics.median(v) for name, v in samples.items()}


def cases(nb: Any) -> dict[str, dict[str, Callable[[], Any]]]:
    """group -> {impl: fn}."""
    import numpy as np
    import tvm_ffi

    raw = scale_lib.lib.scale
    groups: dict[str, dict[str, Callable[[], Any]]] = {}
    x = np.random.default_rng(0).standard_normal(N_ELEMENTS).astype(np.float32)
    o = np.empty_like(x)
    # NumPy has no C-level DLPack exchange API, so TVM-FFI exports each array per call through
    # ndarray.__dlpack__: "tvm_ffi raw, pre-converted" shows the call without that export.
    xt, ot = tvm_ffi.from_dlpack(x), tvm_ffi.from_dlpack(o)
    g = {
        "tvm_ffi raw": lambda: raw(o, x, 2.0),
        "tvm_ffi raw, pre-converted": lambda: raw(ot, xt, 2.0),
        # The export alone, as the raw call does it for its two arrays: with the row above, it
        # accounts for the raw call's time.
        "2x ndarray.__dlpack__()": lambda: (
            x.__dlpack__(max_version=(1, 1)),
            o.__dlpack__(max_version=(1, 1)),
        ),
        "scale_lib.scale": lambda: scale_lib.scale(x, 2.0, out=o),
        "numpy.multiply(out=)": lambda: np.multiply(x, np.float32(2.0), out=o),
    }
    if nb is not None:
        g["nanobind"] = lambda: nb.scale(o, x, 2.0)
    groups["numpy cpu"] = g
    try:
        import torch
    except ImportError:
        return groups
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() and scale_lib.cuda_available() else []):
        t = torch.randn(N_ELEMENTS, device=device)
        to = torch.empty_like(t)
        g = {
            "tvm_ffi raw": lambda t=t, to=to: raw(to, t, 2.0),
            "scale_lib.scale": lambda t=t, to=to: scale_lib.scale(t, 2.0, out=to),
            "torch.ops.scale_lib.scale_out": lambda t=t, to=to: torch.ops.scale_lib.scale_out(to, t, 2.0),
            "torch.mul(out=)": lambda t=t, to=to: torch.mul(t, 2.0, out=to),
        }
        if nb is not None and device == "cpu":
            g["nanobind"] = lambda t=t, to=to: nb.scale(to, t, 2.0)
        groups[f"torch {device}"] = g
    return groups


def main() -> None:
    args = common.parse_args(__doc__)
    nb = None if args.quick else build_nanobind(Path(os.environ.get("SCALE_NB_BUILD", "/tmp/scale_nb_build")))
    number, repeats = (2000, 3) if args.quick else (2000, args.repeats or 101)
    rows = []
    for group, impls in cases(nb).items():
        sync = None
        if group == "torch cuda":
            import torch

            sync = torch.cuda.synchronize
        timings = per_call_us(impls, number, repeats, sync)
        rows.append({"group": group, "us_per_call": timings})
    print(f"\nhost overhead, microseconds per call on {N_ELEMENTS}-element float32 arrays (median)")
    impls = list(dict.fromkeys(i for r in rows for i in r["us_per_call"]))
    print(f"{'':12s}" + "".join(f"{i:>32s}" for i in impls) + f"{'public - raw':>16s}")
    for r in rows:
        t = r["us_per_call"]
        cells = "".join(f"{t[i]:32.3f}" if i in t else f"{'-':>32s}" for i in impls)
        print(f"{r['group']:12s}{cells}{t['scale_lib.scale'] - t['tvm_ffi raw']:16.3f}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / "overhead.json"
    path.write_text(
        json.dumps(
            {"environment": common.environment(), "n": N_ELEMENTS, "rows": rows}, indent=1, default=str
        )
        + "\n"  # results get committed (docs/_static/perf): end-of-file hook
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
