"""The report section of bench_flatnonzero.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from report import _by, _exponent, _mark, _row

OWN = {"cuda": "torch.nonzero", "cpu": "numpy.flatnonzero"}


def section(data: dict) -> list[str]:
    rows = [r for r in data.get("results", []) if r["bench"] == "flatnonzero"]
    table = _by(rows, "device", "dtype", "size")
    out: list[str] = []
    for device, title in (("cuda", "CUDA"), ("cpu", "CPU")):
        cases = {k: v for k, v in table.items() if k[0] == device}
        if not cases:
            continue
        own = OWN[device]
        out += [
            f"### `flatnonzero`, {title}",
            "",
            "Microseconds per call, half the elements non-zero; the result's allocation included.",
            "",
            f"| dtype | n | `{own}` | scale_lib | `{own}` / scale_lib time |",
            "|---|---|---|---|---|",
        ]
        ok = []
        for (_, dtype, size), impl in cases.items():
            theirs, ours = impl[own]["median_us"], impl["scale_lib"]["median_us"]
            if _exponent(size) >= 20:
                ok.append(ours <= 1.01 * theirs)
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{theirs / ours:.2f}x"))
        out += [
            "",
            f"- Target at least as fast as `{own}` at n ≥ 2^20 (within 1% timing noise): {_mark(all(ok))}.",
            "",
        ]
    return out
