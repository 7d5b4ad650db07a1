"""The report section of bench_softmax.py's results (benchmarks/report.py collects it)."""

from __future__ import annotations

from report import _by, _mark, _row

# The targets: the specialised kernel beats the ahead-of-time one at every shape it handles; a
# first call that compiles stays under a second; a cached call costs at most 1 us more host
# time than the ahead-of-time op's.
FIRST_CALL_US = 1e6
CACHED_CALL_EXTRA_US = 1.0


def section(data: dict) -> list[str]:
    rows = data.get("results", [])
    out: list[str] = []
    table = _by([r for r in rows if r["bench"] == "softmax"], "device", "dtype", "size")
    gpu = {k: v for k, v in table.items() if k[0] == "cuda"}
    faster = []
    if gpu:
        out += [
            "### `softmax` (NVRTC, specialised on the row length), CUDA",
            "",
            "GB/s counting `x` read once and `out` written once; median of 50 runs, L2 flushed. "
            "NVRTC is the kernel compiled at the first call for the row length (a row in "
            "registers, read once); ahead of time is the library's kernel for any row length "
            "(the row read twice), which runs without NVRTC.",
            "",
            "| dtype | shape | copy | `torch.softmax` | ahead of time | NVRTC | NVRTC / copy "
            "| NVRTC vs ahead of time | vs torch |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for (_, dtype, size), impl in gpu.items():
            copy, torch_ = impl["copy"]["gbps"], impl["torch.softmax"]["gbps"]
            aot, ours = impl["ahead of time"]["gbps"], impl["NVRTC"]["gbps"]
            faster.append(ours > aot)
            out.append(
                _row(
                    dtype,
                    size,
                    f"{copy:.0f}",
                    f"{torch_:.0f}",
                    f"{aot:.0f}",
                    f"{ours:.0f}",
                    f"{ours / copy:.1%}",
                    f"{ours / aot:.2f}x",
                    f"{ours / torch_:.2f}x",
                )
            )
        out += [
            "",
            f"- Target NVRTC faster than the ahead-of-time kernel at every shape: {_mark(all(faster))}.",
        ]
    first = [r for r in rows if r["bench"] == "softmax_first_call"]
    if first:
        out += [
            "",
            "First calls (fresh processes, wall time of the call, float32): with nothing cached "
            "(NVRTC compiles, the CUBIN is written and loaded), then with the CUBIN on disk.",
            "",
            "| shape | first call: compile | first call: disk cache |",
            "|---|---|---|",
        ]
        by_size = _by(first, "size")
        for (size,), impl in by_size.items():
            out.append(
                _row(
                    size,
                    f"{impl['first call: compile']['median_us'] / 1e3:.1f} ms",
                    f"{impl['first call: disk cache']['median_us'] / 1e3:.1f} ms",
                )
            )
        slowest = max(r["median_us"] for r in first)
        out += [
            "",
            f"- Target every first call under {FIRST_CALL_US / 1e6:.0f} s: {_mark(slowest < FIRST_CALL_US)}.",
        ]
    cached = {r["impl"]: r["median_us"] for r in rows if r["bench"] == "softmax_cached_call"}
    if cached:
        extra = cached["NVRTC"] - cached["ahead of time"]
        out += [
            "",
            f"Cached call (bare ABI, 1x128 float32, host us per call): NVRTC {cached['NVRTC']:.2f}, "
            f"ahead of time {cached['ahead of time']:.2f} ({extra:+.2f}).",
            "",
            f"- Target at most {CACHED_CALL_EXTRA_US:.0f} us more than the ahead-of-time call: "
            f"{_mark(extra <= CACHED_CALL_EXTRA_US)}.",
        ]
    compiled = [r for r in rows if r["bench"] == "softmax_compile"]
    if compiled:
        times = ", ".join(f"{r['size']}: {r['median_us'] / 1e3:.0f} ms" for r in compiled)
        out += ["", f"NVRTC alone, nothing cached, on the CPU: {times}."]
    cpu = {k: v for k, v in table.items() if k[0] == "cpu"}
    if cpu:
        out += [
            "",
            "### `softmax`, CPU (the C++ twin)",
            "",
            "| dtype | shape | NumPy GB/s | scale_lib GB/s | speed-up |",
            "|---|---|---|---|---|",
        ]
        for (_, dtype, size), impl in cpu.items():
            theirs, ours = impl["numpy"]["gbps"], impl["scale_lib"]["gbps"]
            out.append(_row(dtype, size, f"{theirs:.1f}", f"{ours:.1f}", f"{ours / theirs:.1f}x"))
    return out
