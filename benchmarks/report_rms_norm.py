"""The report section of bench_rms_norm.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from report import _by, _mark, _row


def section(data: dict) -> list[str]:
    rows = data.get("results", [])
    table = _by(rows, "device", "dtype", "size")
    out = [
        "### `rms_norm`, CUDA",
        "",
        "GB/s counting `x` read once and `out` written once; median of 50 runs, L2 flushed.",
        "",
        "| dtype | shape | copy | `F.rms_norm` | scale_lib | scale_lib / copy | speed-up over `F.rms_norm` |",
        "|---|---|---|---|---|---|---|",
    ]
    roofline_ok, faster = [], []
    for (device, dtype, size), impl in table.items():
        if device != "cuda":
            continue
        copy, theirs, ours = impl["copy"]["gbps"], impl["F.rms_norm"]["gbps"], impl["scale_lib"]["gbps"]
        if size in ("8192x4096", "32768x8192"):
            roofline_ok.append(ours / copy >= 0.90)
        faster.append(ours > theirs)
        out.append(
            _row(
                dtype,
                size,
                f"{copy:.0f}",
                f"{theirs:.0f}",
                f"{ours:.0f}",
                f"{ours / copy:.1%}",
                f"{ours / theirs:.2f}x",
            )
        )
    out += [
        "",
        f"- Target ≥ 90% of copy at (8192, 4096) and (32768, 8192): {_mark(all(roofline_ok))}.",
        f"- Target faster than `F.rms_norm` at every shape: {_mark(all(faster))}.",
    ]
    cpu = {k: v for k, v in table.items() if k[0] == "cpu"}
    if cpu:
        out += [
            "",
            "### `rms_norm`, CPU",
            "",
            "| dtype | shape | NumPy GB/s | scale_lib GB/s | speed-up |",
            "|---|---|---|---|---|",
        ]
        ok = []
        for (_, dtype, size), impl in cpu.items():
            theirs, ours = impl["numpy"]["gbps"], impl["scale_lib"]["gbps"]
            ok.append(ours >= 2 * theirs)
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{ours / theirs:.1f}x"))
        out += ["", f"- Target at least 2x a NumPy implementation: {_mark(all(ok))}."]
    return out
