"""The report section of bench_cumsum.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from bench_cumsum import LARGE_BYTES
from report import _by, _mark, _row


def section(data: dict) -> list[str]:
    rows = data.get("results", [])
    table = _by(rows, "device", "dtype", "size")
    out = [
        "### `cumsum` (a scan), CUDA",
        "",
        "GB/s counting `x` read once and `out` written once; median of 50 runs, L2 flushed, every "
        "column from one process. `jax.lax.cumsum` (jitted) is timed by wall clock, as it runs on "
        "JAX's own stream. Targets: at least 60% of copy's bandwidth for inputs of 64 MB and more, "
        "whatever the row count; no slower than `torch.cumsum` at any shape measured.",
        "",
        "| dtype | shape | copy | `torch.cumsum` | `jax.lax.cumsum` | scale_lib | scale_lib / copy "
        "| vs `torch.cumsum` | targets |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    roofline_ok, faster = [], []
    for (device, dtype, size), impl in table.items():
        if device != "cuda":
            continue
        copy, torch_, ours = impl["copy"]["gbps"], impl["torch.cumsum"]["gbps"], impl["scale_lib"]["gbps"]
        jax = impl.get("jax.lax.cumsum", {}).get("gbps")
        large = impl["scale_lib"]["bytes_moved"] // 2 >= LARGE_BYTES
        marks = []
        if large:
            roofline_ok.append(ours / copy >= 0.60)
            marks.append(f"≥ 60% of copy {_mark(roofline_ok[-1])}")
        faster.append(ours >= torch_)
        marks.append(f"vs torch {_mark(faster[-1])}")
        out.append(
            _row(
                dtype,
                size,
                f"{copy:.0f}",
                f"{torch_:.0f}",
                "" if jax is None else f"{jax:.0f}",
                f"{ours:.0f}",
                f"{ours / copy:.1%}",
                f"{ours / torch_:.2f}x",
                "; ".join(marks),
            )
        )
    if roofline_ok or faster:
        out += [
            "",
            f"- Target ≥ 60% of copy for inputs of 64 MB and more: {_mark(all(roofline_ok))}.",
            f"- Target no slower than `torch.cumsum` at every shape: {_mark(all(faster))}.",
        ]
    cpu = {k: v for k, v in table.items() if k[0] == "cpu"}
    if cpu:
        out += [
            "",
            "### `cumsum`, CPU (the C++ twin)",
            "",
            "| shape | NumPy GB/s | `torch.cumsum` GB/s | scale_lib GB/s | vs NumPy | vs torch |",
            "|---|---|---|---|---|---|",
        ]
        for (_, _dtype, size), impl in cpu.items():
            numpy_, torch_, ours = (impl[k]["gbps"] for k in ("numpy", "torch.cumsum", "scale_lib"))
            out.append(
                _row(
                    size,
                    f"{numpy_:.1f}",
                    f"{torch_:.1f}",
                    f"{ours:.1f}",
                    f"{ours / numpy_:.2f}x",
                    f"{ours / torch_:.2f}x",
                )
            )
    return out
