"""Every CPU op against PyTorch's own and NumPy's own, at decode sizes and large sizes.

    python benchmarks/bench_cpu.py --out-dir benchmarks/results   # a few minutes
    python benchmarks/bench_cpu.py --quick                        # a smoke test
    python benchmarks/bench_cpu.py --threads 1                    # every library on one thread
    python benchmarks/bench_cpu.py --threads 1 --simd avx2        # as on a CPU without AVX-512

Writes ``cpu.json``, ``cpu.png`` (with matplotlib) and ``cpu.md``, the report that marks the
target met or missed: every op no slower than PyTorch's own at every size measured.

Method: the implementations take turns, sample by sample; a sample is the wall time of N
back-to-back calls divided by N (N chosen so that a sample takes about two milliseconds), after
one untimed call; each case keeps the median over the samples. Every call allocates its result
(PyTorch's and NumPy's expressions do). The frameworks use their default thread counts, the
library its own (``SCALE_LIB_NUM_THREADS``), unless ``--threads`` sets both. ``--simd`` caps the
instruction set of the library's loops (``SCALE_LIB_CPU_SIMD``) and PyTorch's kernels
(``ATEN_CPU_CAPABILITY``; NumPy's stays its own): each level is compiled into the library and
picked at run time, and a slow loop at one level shows only where that level runs. Rows of ``HIDDEN``
elements (of ``CPU_ROW`` for an op whose file says so); NumPy in float32 only (its bfloat16 is an
extension type without its own arithmetic).

The cases come from the library's list of declared ops (``scale_lib.ops.OPS``): every public op
with CPU kernels, with its attributes and PyTorch's and NumPy's own equivalents from its file
``benchmarks/overhead/<op>.py``, the one bench_overhead.py reads. A public op without one is not
measured, and the run says so.
"""

from __future__ import annotations

import json
import os
import runpy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import scale_lib
from scale_lib._spec import OpSpec
from scale_lib.ops import OPS

HIDDEN = 4096
DECODE_ROWS = (1, 8, 64)
LARGE_ROWS = (1024,)
DTYPES = ("float32", "bfloat16")
# --simd: the library's levels below the widest (SCALE_LIB_CPU_SIMD) and PyTorch's names for them.
# No "avx512": PyTorch takes ATEN_CPU_CAPABILITY=avx512 without asking the CPU, and the widest is
# what both run uncapped.
SIMD_LEVELS = {"avx2": "avx2", "baseline": "default"}
# Each op's attributes and PyTorch's and NumPy's own ways to compute it: the file of
# bench_overhead.py's cases, benchmarks/overhead/<op>.py (its "own" entries, the allocating ones),
# with CPU_ROW where the op's rows are not HIDDEN elements long.
CASES = Path(__file__).resolve().parent / "overhead"


def op_files() -> dict[str, tuple[OpSpec, dict[str, Any]]]:
    """op -> (its declaration, its benchmarks/overhead/<op>.py) for every public op with CPU
    kernels; an op without the file is not measured, and the run says so."""
    files = {}
    for spec in OPS:
        if not spec.public or "cpu" not in spec.devices:
            continue
        path = CASES / f"{spec.name}.py"
        module = runpy.run_path(str(path)) if path.is_file() else {}
        if "own_torch" not in module:
            print(
                f"note: {spec.name} is not measured: write its attributes and own_torch (own_numpy) "
                f"in benchmarks/overhead/{spec.name}.py (as in scale.py there)",
                file=sys.stderr,
            )
            continue
        files[spec.name] = (spec, module)
    return files


def _own(equivalents: dict[str, tuple[str, Callable[[], Any]]]) -> tuple[str, Callable[[], Any]]:
    """(label, call) of a framework's allocating equivalent, from an own_<framework>'s entries."""
    return next((label, fn) for label, (role, fn) in equivalents.items() if role == "own")


def op_case(
    spec: OpSpec, module: dict[str, Any], rows: int, dtype: str, g: Any
) -> tuple[dict[str, Callable[[], Any]], dict[str, str]]:
    """({implementation: call}, {framework: its equivalent's label}) for one op at ``rows`` rows
    of ``dtype``; "numpy" in float32 only."""
    import torch

    shape = (rows, module.get("CPU_ROW", HIDDEN))
    tensors = []
    for i in spec.inputs:
        t = torch.randn(shape if i.shape is None else tuple(i.shape(shape)), generator=g)
        t = t.to(getattr(torch, dtype))
        if spec.output.allocated_by_library:  # half the elements zero: an output sized by the data
            t.view(-1)[::2] = 0
        tensors.append(t)
    attrs = tuple(module["ATTRS"])
    public = getattr(scale_lib, spec.name)
    label, own = _own(module["own_torch"](tuple(tensors), attrs, public(*tensors, *attrs)))
    impls, labels = {"scale_lib": lambda: public(*tensors, *attrs), "torch": own}, {"torch": label}
    if dtype == "float32" and "own_numpy" in module:
        arrays = tuple(t.numpy() for t in tensors)  # the same memory
        labels["numpy"], impls["numpy"] = _own(module["own_numpy"](arrays, attrs, public(*arrays, *attrs)))
    return impls, labels


def cases(
    rows: int, dtype: str, files: dict[str, tuple[OpSpec, dict[str, Any]]]
) -> dict[str, tuple[dict[str, Callable[[], Any]], dict[str, str]]]:
    """op -> ({implementation: call}, {framework: label}) for (rows, HIDDEN) inputs of ``dtype``."""
    import torch

    g = torch.Generator().manual_seed(rows)
    return {name: op_case(spec, module, rows, dtype, g) for name, (spec, module) in files.items()}


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
    files = op_files()
    for dtype in DTYPES:
        for rows in rows_list:
            for op, (impls, labels) in cases(rows, dtype, files).items():
                check(op, impls)
                us = per_call_us(impls, samples)
                results.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        "rows": rows,
                        "shape": [rows, files[op][1].get("CPU_ROW", HIDDEN)],
                        "size": "large" if rows in LARGE_ROWS else "decode",
                        "us": us,
                        "labels": labels,
                    }
                )
                cells = "  ".join(f"{k} {v:9.1f}" for k, v in us.items())
                print(f"{op:13s} {dtype:9s} {rows:5d}  {cells}", flush=True)
    return results


def report(data: dict[str, Any]) -> list[str]:
    longer = {r["op"]: r["shape"][-1] for r in data["results"] if r["shape"][-1] != HIDDEN}
    own = {r["op"]: r.get("labels", {}) for r in data["results"]}
    out = [
        "### CPU ops against PyTorch's own and NumPy's own",
        "",
        f"Microseconds per call (median), rows of {HIDDEN} elements"
        + "".join(f", `{op}`'s of {n}" for op, n in longer.items())
        + f"; torch {data['environment'].get('torch', '?')} on {data['threads']} threads, scale_lib on "
        f"{data['scale_lib_threads']}"
        + (
            f"; instruction sets: scale_lib {data['simd']['scale_lib']}, torch {data['simd']['torch']}"
            if "simd" in data
            else ""
        )
        + ". The frameworks' own: "
        + "; ".join(
            f"`{op}` " + ", ".join(f"`{label}`" for label in labels.values())
            for op, labels in own.items()
            if labels
        )
        + ".",
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


def _add_options(parser: Any) -> None:
    parser.add_argument("--threads", type=int, default=None, help="PyTorch's and the library's")
    parser.add_argument(
        "--simd", choices=SIMD_LEVELS, default=None, help="the widest instruction set, both libraries'"
    )


def main() -> None:
    import torch

    args = common.parse_args(
        __doc__,
        _add_options,
    )
    if args.simd:
        # Both are read once, at the first kernel call, which has not happened yet.
        os.environ["SCALE_LIB_CPU_SIMD"] = args.simd
        os.environ["ATEN_CPU_CAPABILITY"] = SIMD_LEVELS[args.simd]
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
        # The library's cap (it runs the lower of the cap and the CPU's widest); PyTorch's level.
        "simd": {"scale_lib": args.simd or "widest", "torch": torch.backends.cpu.get_cpu_capability()},
        "results": results,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    suffix = (f"_threads{args.threads}" if args.threads else "") + (f"_{args.simd}" if args.simd else "")
    (args.out_dir / f"cpu{suffix}.json").write_text(json.dumps(data, indent=1) + "\n")
    text = "\n".join(report(data)) + "\n"
    (args.out_dir / f"cpu{suffix}.md").write_text(text)
    plot(data, args.out_dir, suffix)
    print("\n" + text)


if __name__ == "__main__":
    main()
