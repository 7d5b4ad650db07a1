"""The report section of bench_axpby.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from report import _by, _exponent, _mark, _row

TORCH = "torch.add(alpha=, out=)"
NUMPY = "numpy a*x + b*y"


def section(data: dict) -> list[str]:
    rows = [r for r in data.get("results", []) if r["bench"] == "axpby"]
    table = _by(rows, "device", "dtype", "size")
    out: list[str] = []
    cuda = {k: v for k, v in table.items() if k[0] == "cuda"}
    if cuda:
        out += [
            "### `axpby`, CUDA",
            "",
            "GB/s counting x and y read + out written; the copy moves as many bytes.",
            "",
            f"| dtype | n | copy | `{TORCH}` | scale_lib | scale_lib / copy | scale_lib / torch |",
            "|---|---|---|---|---|---|---|",
        ]
        roofline_ok, torch_ok = [], []
        for (_, dtype, size), impl in cuda.items():
            copy, torch, ours = impl["copy"]["gbps"], impl[TORCH]["gbps"], impl["scale_lib"]["gbps"]
            if _exponent(size) >= 24:
                roofline_ok.append(ours / copy >= 0.9)
            torch_ok.append(ours >= 0.99 * torch)
            out.append(
                _row(
                    dtype,
                    size,
                    f"{copy:.0f}",
                    f"{torch:.0f}",
                    f"{ours:.0f}",
                    f"{ours / copy:.1%}",
                    f"{ours / torch:.2f}x",
                )
            )
        out += [
            "",
            f"- Target ≥ 90% of copy bandwidth at n ≥ 2^24: {_mark(all(roofline_ok))}.",
            f"- Target at least as fast as `{TORCH}` (within 1% timing noise): {_mark(all(torch_ok))} "
            f"(met in {sum(torch_ok)} of {len(torch_ok)} cases).",
            "",
        ]
    cpu = {k: v for k, v in table.items() if k[0] == "cpu"}
    if cpu:
        out += [
            "### `axpby`, CPU",
            "",
            "| dtype | n | NumPy GB/s | scale_lib GB/s | scale_lib / NumPy |",
            "|---|---|---|---|---|",
        ]
        ok = []
        for (_, dtype, size), impl in cpu.items():
            theirs, ours = impl[NUMPY]["gbps"], impl["scale_lib"]["gbps"]
            if _exponent(size) >= 20:
                ok.append(ours >= theirs)
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{ours / theirs:.2f}x"))
        out += ["", f"- Target at least NumPy's `a*x + b*y` throughput at n ≥ 2^20: {_mark(all(ok))}."]
    return out
