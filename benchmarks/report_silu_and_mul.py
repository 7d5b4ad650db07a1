"""The report section of bench_silu_and_mul.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from bench_silu_and_mul import LARGE
from report import _by, _mark, _row


def section(data: dict) -> list[str]:
    rows = data.get("results", [])
    table = _by(rows, "device", "dtype", "size")
    out = [
        "### `silu_and_mul` (Triton), CUDA",
        "",
        "GB/s counting `x` read once and `out` written once; median of 50 runs, L2 flushed. "
        "Eager PyTorch is `F.silu(x[..., :d]) * x[..., d:]`; `torch.compile` compiles that "
        "expression (one fused Triton kernel, compiled at run time).",
        "",
        "| dtype | shape | copy | eager | `torch.compile` | scale_lib | scale_lib / copy | vs eager "
        "| vs compile |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    roofline_ok, faster = [], []
    for (device, dtype, size), impl in table.items():
        if device != "cuda":
            continue
        copy, eager = impl["copy"]["gbps"], impl["torch eager"]["gbps"]
        compiled, ours = impl["torch.compile"]["gbps"], impl["scale_lib"]["gbps"]
        if size in LARGE:
            roofline_ok.append(ours / copy >= 0.90)
        faster.append(ours > eager)
        out.append(
            _row(
                dtype,
                size,
                f"{copy:.0f}",
                f"{eager:.0f}",
                f"{compiled:.0f}",
                f"{ours:.0f}",
                f"{ours / copy:.1%}",
                f"{ours / eager:.2f}x",
                f"{ours / compiled:.2f}x",
            )
        )
    if roofline_ok or faster:
        out += [
            "",
            f"- Target ≥ 90% of copy at the large sizes ({', '.join(sorted(LARGE))}): "
            f"{_mark(all(roofline_ok))}.",
            f"- Target faster than eager PyTorch at every size: {_mark(all(faster))}.",
        ]
    cpu = {k: v for k, v in table.items() if k[0] == "cpu"}
    if cpu:
        out += [
            "",
            "### `silu_and_mul`, CPU (the C++ twin)",
            "",
            "| dtype | shape | NumPy GB/s | scale_lib GB/s | speed-up |",
            "|---|---|---|---|---|",
        ]
        for (_, dtype, size), impl in cpu.items():
            theirs, ours = impl["numpy"]["gbps"], impl["scale_lib"]["gbps"]
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{ours / theirs:.1f}x"))
    return out
