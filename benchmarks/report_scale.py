"""The report section of bench_scale.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from report import _by, _exponent, _mark, _row


def section(data: dict) -> list[str]:
    rows = [r for r in data.get("results", []) if r["bench"] == "scale"]
    out = [
        "### `scale`, CUDA",
        "",
        "GB/s counting bytes read + written; median of 100 runs, L2 flushed before each.",
        "",
    ]
    out += [
        "| dtype | n | copy | `torch.mul(out=)` | scale_lib | scale_lib / copy | scale_lib / torch |",
        "|---|---|---|---|---|---|---|",
    ]
    roofline_ok, torch_ok = [], []
    for (device, dtype, size), impl in _by(rows, "device", "dtype", "size").items():
        if device != "cuda":
            continue
        copy, torch, ours = impl["copy"]["gbps"], impl["torch.mul(out=)"]["gbps"], impl["scale_lib"]["gbps"]
        if _exponent(size) >= 24:
            roofline_ok.append(ours / copy >= 0.97)
        torch_ok.append(ours / torch >= 0.99)  # within timing noise (1%)
        out.append(
            _row(
                dtype,
                size,
                f"{copy:.0f}",
                f"{torch:.0f}",
                f"{ours:.0f}",
                f"{ours / copy:.1%}",
                f"{ours / torch:.1%}",
            )
        )
    if roofline_ok:
        out += [
            "",
            f"- Target ≥ 97% of copy bandwidth at n ≥ 2^24: {_mark(all(roofline_ok))}.",
            "- Target at least as fast as `torch.mul(out=)` at every size (within 1% timing noise): "
            f"{_mark(all(torch_ok))} (met in {sum(torch_ok)} of {len(torch_ok)} cases).",
        ]
    jax_rows = [r for r in data.get("results", []) if r["bench"] == "scale-jax"]
    if jax_rows:
        out += [
            "",
            "### `scale` under `jax.jit`, GPU",
            "",
            "Microseconds per application, dispatch cancelled (see `bench_scale.py`).",
            "",
            "| dtype | n | `jnp` `x * f` | scale_lib | scale_lib / jnp time |",
            "|---|---|---|---|---|",
        ]
        ok = []
        for (_, dtype, size), impl in _by(jax_rows, "device", "dtype", "size").items():
            theirs, ours = impl["jnp x*f (jit)"]["median_us"], impl["scale_lib (jax.jit)"]["median_us"]
            if _exponent(size) >= 24:
                ok.append(ours <= 1.05 * theirs)
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{ours / theirs:.2f}"))
        out += ["", f"- Target within 5% of jitted `x * f` at n ≥ 2^24: {_mark(all(ok))}."]
    cpu = {k: v for k, v in _by(rows, "device", "dtype", "size").items() if k[0] == "cpu"}
    if cpu:
        out += [
            "",
            "### `scale`, CPU",
            "",
            "| dtype | n | NumPy GB/s | scale_lib GB/s | scale_lib / NumPy |",
            "|---|---|---|---|---|",
        ]
        ok = []
        for (_, dtype, size), impl in cpu.items():
            theirs, ours = impl["numpy.multiply(out=)"]["gbps"], impl["scale_lib"]["gbps"]
            if _exponent(size) >= 20:
                ok.append(ours >= theirs)
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{ours / theirs:.2f}x"))
        out += [
            "",
            f"- Target at least NumPy's throughput at n ≥ 2^20: {_mark(all(ok))} "
            f"(met in {sum(ok)} of {len(ok)} cases).",
        ]
    return out
