"""Every CPU op against PyTorch's own and NumPy's own, at decode sizes and large sizes.

    python benchmarks/bench_cpu.py --out-dir benchmarks/results   # a few minutes
    python benchmarks/bench_cpu.py --quick                        # a smoke test
    python benchmarks/bench_cpu.py --threads 1                    # every library on one thread

Writes ``cpu.json``, ``cpu.png`` (with matplotlib) and ``cpu.md``, the report that marks the
target met or missed: every op no slower than PyTorch's own at every size measured.

Method: the implementations take turns, sample by sample; a sample is the wall time of N
back-to-back calls divided by N (N chosen so that a sample takes about two milliseconds), after
one untimed call; each case keeps the median over the samples. Every call allocates its result
(PyTorch's and NumPy's expressions do). The frameworks use their default thread counts, the
library its own (``SCALE_LIB_NUM_THREADS``), unless ``--threads`` sets both. Rows of ``HIDDEN``
elements (an op whose rows hold two halves, a gate's: 2 x ``HIDDEN``, ``HALVES``); NumPy in float32 only (its
bfloat16 is an extension type without its own arithmetic).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib

HIDDEN = 4096
DECODE_ROWS = (1, 8, 64)
LARGE_ROWS = (1024,)
DTYPES = ("float32", "bfloat16")
EPS = 1e-6
# Ops whose input rows hold two halves of HIDDEN elements each (a gated activation's).
HALVES: set[str] = set()


# op: silu_and_mul
HALVES.add("silu_and_mul")


def _numpy_silu_and_mul(x: np.ndarray) -> np.ndarray:
    d = x.shape[-1] // 2
    a, b = x[..., :d], x[..., d:]
    return a / (1 + np.exp(-a)) * b


# /op: silu_and_mul
# op: rms_norm
def _numpy_rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + EPS) * w


# /op: rms_norm
def cases(rows: int, dtype: str) -> dict[str, dict[str, Callable[[], Any]]]:
    """op -> {implementation: call} for (rows, HIDDEN) inputs of ``dtype``; "numpy" in float32."""
    import torch

    g = torch.Generator().manual_seed(rows)

    def make(*shape: int) -> tuple[Any, Any]:
        t = torch.randn(*shape, generator=g).to(getattr(torch, dtype))
        return t, (t.numpy() if dtype == "float32" else None)

    ops: dict[str, dict[str, Callable[[], Any]]] = {}
    x, xn = make(rows, HIDDEN)
    ops["scale"] = {
        "scale_lib": lambda: scale_lib.scale(x, 2.0),
        "torch": lambda: x * 2.0,
        "numpy": lambda: np.multiply(xn, 2.0),
    }
    # op: axpby
    y, yn = make(rows, HIDDEN)
    ops["axpby"] = {
        "scale_lib": lambda: scale_lib.axpby(x, y, 0.5, 2.0),
        "torch": lambda: 0.5 * x + 2.0 * y,
        "numpy": lambda: 0.5 * xn + 2.0 * yn,
    }
    # /op: axpby
    # op: rms_norm
    w, wn = make(HIDDEN)
    ops["rms_norm"] = {
        "scale_lib": lambda: scale_lib.rms_norm(x, w, EPS),
        "torch": lambda: torch.nn.functional.rms_norm(x, (HIDDEN,), w, EPS),
        "numpy": lambda: _numpy_rms_norm(xn, wn),
    }
    # /op: rms_norm
    # op: l2_norm
    ops["l2_norm"] = {
        "scale_lib": lambda: scale_lib.l2_norm(x),
        "torch": lambda: torch.linalg.vector_norm(x),
        "numpy": lambda: np.linalg.norm(xn),
    }
    # /op: l2_norm
    # op: flatnonzero
    sparse, sparse_n = make(rows, HIDDEN)
    sparse.view(-1)[::2] = 0  # half the elements zero (the NumPy array shares the memory)
    ops["flatnonzero"] = {
        "scale_lib": lambda: scale_lib.flatnonzero(sparse),
        "torch": lambda: torch.nonzero(sparse.view(-1)),
        "numpy": lambda: np.flatnonzero(sparse_n),
    }
    # /op: flatnonzero
    # op: silu_and_mul
    gate, gate_n = make(rows, 2 * HIDDEN)
    ops["silu_and_mul"] = {
        "scale_lib": lambda: scale_lib.silu_and_mul(gate),
        "torch": lambda: torch.nn.functional.silu(gate[:, :HIDDEN]) * gate[:, HIDDEN:],
        "numpy": lambda: _numpy_silu_and_mul(gate_n),
    }
    # /op: silu_and_mul
    if dtype != "float32":
        for impls in ops.values():
            del impls["numpy"]
    return ops


def check(op: str, impls: dict[str, Callable[[], Any]]) -> None:
    """The library's result matches PyTorch's: a benchmark of a right answer."""
    import torch

    ours, theirs = impls["scale_lib"](), impls["torch"]()
    if ours.dtype != theirs.dtype:  # positions (an index result) against torch.nonzero's (n, 1)
        ours, theirs = ours.to(torch.int64), theirs.to(torch.int64)
    torch.testing.assert_close(ours.reshape(theirs.shape).to(theirs.dtype), theirs, rtol=2e-2, atol=2e-2)


def per_call_us(
    impls: dict[str, Callable[[], Any]], samples: int, sample_s: float = 2e-3
) -> dict[str, float]:
    """Median microseconds per call of each implementation, the implementations taking turns."""
    calls = {}
    for name, fn in impls.items():
        fn()
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, int(sample_s / max(time.perf_counter() - t0, 1e-7)))
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(samples):
        for name, fn in impls.items():
            n = calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def run(rows_list: tuple[int, ...], samples: int) -> list[dict[str, Any]]:
    results = []
    for dtype in DTYPES:
        for rows in rows_list:
            for op, impls in cases(rows, dtype).items():
                check(op, impls)
                us = per_call_us(impls, samples)
                results.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        "rows": rows,
                        "shape": [rows, 2 * HIDDEN if op in HALVES else HIDDEN],
                        "size": "large" if rows in LARGE_ROWS else "decode",
                        "us": us,
                    }
                )
                cells = "  ".join(f"{k} {v:9.1f}" for k, v in us.items())
                print(f"{op:13s} {dtype:9s} {rows:5d}  {cells}", flush=True)
    return results


def report(data: dict[str, Any]) -> list[str]:
    out = [
        "### CPU ops against PyTorch's own and NumPy's own",
        "",
        f"Microseconds per call (median), rows of {HIDDEN} ({', '.join(sorted(HALVES)) or 'none'} "
        f"of two halves: 2 x {HIDDEN}); "
        f"torch {data['environment'].get('torch', '?')} on {data['threads']} threads, scale_lib on "
        f"{data['scale_lib_threads']}.",
        "",
        "| op | dtype | rows | scale_lib | torch | numpy | vs torch | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    met = []
    for r in data["results"]:
        us = r["us"]
        ratio = us["scale_lib"] / us["torch"]
        met.append(ratio <= 1.0)
        numpy = f"{us['numpy']:.1f}" if "numpy" in us else "-"
        out.append(
            f"| {r['op']} | {r['dtype']} | {r['rows']} | {us['scale_lib']:.1f} | {us['torch']:.1f} "
            f"| {numpy} | {ratio:.2f}x | {'met' if ratio <= 1.0 else 'MISSED'} |"
        )
    out += [
        "",
        f"- Target every op no slower than PyTorch's own at every size measured: "
        f"{'met' if all(met) else 'MISSED'} ({sum(met)} of {len(met)} rows).",
    ]
    return out


def plot(data: dict[str, Any], out_dir: Path, suffix: str = "") -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    ops = list(dict.fromkeys(r["op"] for r in data["results"]))
    fig, axes = plt.subplots(
        len(DTYPES), len(ops), figsize=(3.2 * len(ops), 3.2 * len(DTYPES)), squeeze=False
    )
    for i, dtype in enumerate(DTYPES):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            rows = [r for r in data["results"] if r["op"] == op and r["dtype"] == dtype]
            for impl in ("scale_lib", "torch", "numpy"):
                pts = [(r["rows"], r["us"][impl]) for r in rows if impl in r["us"]]
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", label=impl)
            ax.set(xscale="log", yscale="log", title=f"{op} {dtype}", xlabel="rows", ylabel="us per call")
            ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / f"cpu{suffix}.png"
    fig.savefig(path, dpi=100)
    return path


def main() -> None:
    import torch

    args = common.parse_args(
        __doc__,
        lambda p: p.add_argument("--threads", type=int, default=None, help="PyTorch's and the library's"),
    )
    if args.threads:
        # Read by the library at its first parallel call, which has not happened yet.
        os.environ["SCALE_LIB_NUM_THREADS"] = str(args.threads)
        torch.set_num_threads(args.threads)
    rows_list = (1, 64) if args.quick else DECODE_ROWS + LARGE_ROWS
    results = run(rows_list, args.repeats or (5 if args.quick else 15))
    data = {
        "environment": common.environment(),
        "threads": torch.get_num_threads(),
        "scale_lib_threads": os.environ.get("SCALE_LIB_NUM_THREADS", "default"),
        "results": results,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    suffix = f"_threads{args.threads}" if args.threads else ""
    (args.out_dir / f"cpu{suffix}.json").write_text(json.dumps(data, indent=1) + "\n")
    text = "\n".join(report(data)) + "\n"
    (args.out_dir / f"cpu{suffix}.md").write_text(text)
    plot(data, args.out_dir, suffix)
    print("\n" + text)


if __name__ == "__main__":
    main()
