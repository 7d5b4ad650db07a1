"""Timing, tables, JSON and plots shared by the benchmark scripts.

GPU timings use CUDA events around each iteration, with the L2 cache flushed (a 256 MiB write)
before it and the inputs rotated among several buffers, and report the median. CPU timings use
``time.perf_counter`` around each iteration, also with rotated inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# JAX would take 75% of GPU memory at start; the benchmarks share the GPU with torch.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


@dataclass
class Result:
    bench: str  # e.g. "scale"
    impl: str  # e.g. "scale_lib", "torch.mul(out=)", "copy"
    device: str
    dtype: str
    size: str  # e.g. "2^24" or "8192x4096"
    median_us: float
    bytes_moved: int  # the fewest bytes the op must move: each input read once, output written once
    gbps: float = field(init=False)

    def __post_init__(self) -> None:
        self.gbps = self.bytes_moved / (self.median_us * 1e-6) / 1e9 if self.median_us > 0 else 0.0


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats: a smoke test")
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--repeats", type=int, default=None, help="timed iterations per case")
    if extra:
        extra(parser)
    return parser.parse_args()


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def time_cuda(
    fns: Mapping[str, Callable[[int], Any]], repeats: int, warmup: int = 10, rounds: int = 5
) -> dict[str, float]:
    """Median microseconds of each ``fn(i)`` (i = iteration number, for rotating inputs) on the
    current CUDA stream, timed with events, L2 flushed before each iteration.

    The implementations take turns, ``repeats / rounds`` iterations at a time, so that a slow
    spell of the machine (clocks, a neighbour) lands on all of them instead of deciding one
    comparison: timing each in one block let single cells of a table read 5x slow.
    """
    import torch

    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for fn in fns.values():
        for i in range(warmup):
            fn(i)
    torch.cuda.synchronize()
    per_round = max(1, -(-repeats // rounds))
    events: dict[str, list[tuple[Any, Any]]] = {name: [] for name in fns}
    for r in range(rounds):
        for name, fn in fns.items():
            for j in range(per_round):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                flush.zero_()
                start.record()
                fn(r * per_round + j)
                end.record()
                events[name].append((start, end))
    torch.cuda.synchronize()
    return {
        name: statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs) for name, pairs in events.items()
    }


def time_host(
    fn: Callable[[int], Any], repeats: int, warmup: int = 3, sync: Callable[[Any], Any] | None = None
) -> float:
    """Median microseconds of ``fn(i)`` by wall clock; ``sync(result)`` waits for async work."""
    for i in range(warmup):
        r = fn(i)
        if sync:
            sync(r)
    samples = []
    for i in range(repeats):
        t0 = time.perf_counter()
        r = fn(i)
        if sync:
            sync(r)
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def rotation(
    total_bytes_per_set: int, budget: int = 512 * 1024 * 1024, cache_bytes: int = 64 * 1024 * 1024
) -> int:
    """How many input/output sets to rotate so that they do not fit the cache, within budget."""
    if total_bytes_per_set <= 0:
        return 1
    want = max(1, -(-4 * cache_bytes // total_bytes_per_set))
    return max(1, min(want, budget // total_bytes_per_set, 64))


def size_label(n: int) -> str:
    exp = n.bit_length() - 1
    return f"2^{exp}" if n == 1 << exp else str(n)


def print_table(results: Sequence[Result], baseline: str, title: str) -> None:
    """One row per (device, dtype, size): each impl's GB/s, and its ratio to ``baseline``."""
    impls = list(dict.fromkeys(r.impl for r in results))
    keys = list(dict.fromkeys((r.device, r.dtype, r.size) for r in results))
    by = {(r.device, r.dtype, r.size, r.impl): r for r in results}
    print(f"\n{title}  (GB/s, and in brackets the ratio to {baseline})")
    header = f"{'device':6s} {'dtype':9s} {'size':>11s} " + " ".join(f"{i:>24s}" for i in impls)
    print(header)
    print("-" * len(header))
    for device, dtype, size in keys:
        base = by.get((device, dtype, size, baseline))
        cells = []
        for impl in impls:
            r = by.get((device, dtype, size, impl))
            if r is None:
                cells.append(f"{'-':>24s}")
                continue
            ratio = f"({r.gbps / base.gbps:.1%})" if base and base.gbps else ""
            cells.append(f"{r.gbps:8.1f} {ratio:>8s} {r.median_us:7.1f}us".rjust(24))
        print(f"{device:6s} {dtype:9s} {size:>11s} " + " ".join(cells))


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = props.name
            env["sms"] = props.multi_processor_count
    except ImportError:
        pass
    try:
        import scale_lib

        env["scale_lib"] = scale_lib.build_info()
    except ImportError:
        pass
    return env


def save(results: Sequence[Result], out_dir: Path, name: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(
        json.dumps(
            {"environment": environment(), "results": [asdict(r) for r in results]}, indent=1, default=str
        )
        + "\n"  # results get committed (docs/_static/perf): end-of-file hook
    )
    print(f"\nwrote {path}")
    return path


def plot(results: Sequence[Result], out_dir: Path, name: str, roofline: str = "copy") -> Path | None:
    """GB/s against size, one panel per (device, dtype), the copy bandwidth drawn as the roofline."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    panels = list(dict.fromkeys((r.device, r.dtype) for r in results))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (device, dtype) in zip(axes[0], panels, strict=True):
        rows = [r for r in results if (r.device, r.dtype) == (device, dtype)]
        sizes = list(dict.fromkeys(r.size for r in rows))
        for impl in dict.fromkeys(r.impl for r in rows):
            pts = {r.size: r.gbps for r in rows if r.impl == impl}
            style = {"color": "black", "linestyle": "--"} if impl == roofline else {"marker": "o"}
            ax.plot(range(len(sizes)), [pts.get(s, float("nan")) for s in sizes], label=impl, **style)
        ax.set_xticks(range(len(sizes)), sizes, rotation=45)
        ax.set_title(f"{name} {device} {dtype}")
        ax.set_ylabel("GB/s (bytes read + written)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out_dir / f"{name}.png"
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")
    return path
