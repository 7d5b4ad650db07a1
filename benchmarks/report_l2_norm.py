"""The report section of bench_l2_norm.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from report import _by, _exponent, _mark, _row

TORCH = "torch.linalg.vector_norm"
NUMPY = "numpy.linalg.norm"


def section(data: dict) -> list[str]:
    rows = [r for r in data.get("results", []) if r["bench"] == "l2_norm"]
    table = _by(rows, "device", "dtype", "size")
    out: list[str] = []
    cuda = {k: v for k, v in table.items() if k[0] == "cuda"}
    if cuda:
        out += [
            "### `l2_norm`, CUDA",
            "",
            "GB/s counting x read once; the copy moves as many bytes.",
            "",
            f"| dtype | n | copy | `{TORCH}` | scale_lib | scale_lib / copy | scale_lib / torch |",
            "|---|---|---|---|---|---|---|",
        ]
        roofline_ok, torch_ok = [], []
        for (_, dtype, size), impl in cuda.items():
            copy, torch, ours = impl["copy"]["gbps"], impl[TORCH]["gbps"], impl["scale_lib"]["gbps"]
            if _exponent(size) >= 24:
                roofline_ok.append(ours / copy >= 0.8)
            if _exponent(size) >= 20:
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
            f"- Target ≥ 80% of copy bandwidth at n ≥ 2^24: {_mark(all(roofline_ok))}.",
            f"- Target at least as fast as `{TORCH}` at n ≥ 2^20 (within 1% timing noise): "
            f"{_mark(all(torch_ok))} (met in {sum(torch_ok)} of {len(torch_ok)} cases).",
            "",
        ]
    cpu = {k: v for k, v in table.items() if k[0] == "cpu"}
    if cpu:
        out += [
            "### `l2_norm`, CPU",
            "",
            "| dtype | n | NumPy µs | scale_lib µs | NumPy / scale_lib time |",
            "|---|---|---|---|---|",
        ]
        ok = []
        for (_, dtype, size), impl in cpu.items():
            theirs, ours = impl[NUMPY]["median_us"], impl["scale_lib"]["median_us"]
            if _exponent(size) >= 20:
                ok.append(ours <= theirs)
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{theirs / ours:.2f}x"))
        out += ["", f"- Target at least as fast as `np.linalg.norm` at n ≥ 2^20: {_mark(all(ok))}."]
    return out
