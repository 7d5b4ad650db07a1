"""Markdown tables from the benchmarks' JSON results, each target checked against its numbers.

    python benchmarks/report.py docs/_static/perf/h100 > perf.md

The docs build runs this on the committed reference results (docs/conf.py), so the performance
page shows exactly what was measured.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(folder: Path, name: str) -> dict:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _by(rows: list[dict], *keys: str) -> dict:
    table: dict = defaultdict(dict)
    for r in rows:
        table[tuple(r[k] for k in keys)][r["impl"]] = r
    return table


def _mark(ok: bool) -> str:
    return "met" if ok else "**missed**"


def overhead_section(data: dict) -> list[str]:
    rows = data.get("rows", [])
    if not rows:
        return []
    impls = list(dict.fromkeys(i for r in rows for i in r["us_per_call"]))
    out = [
        f"### Host overhead ({data.get('n', 16)}-element float32 arrays)",
        "",
        "Microseconds per call, median.",
        "",
        "| arrays | " + " | ".join(f"`{i}`" for i in impls) + " | public API - raw |",
        "|---" * (len(impls) + 2) + "|",
    ]
    for r in rows:
        t = r["us_per_call"]
        cells = " | ".join(f"{t[i]:.2f}" if i in t else "-" for i in impls)
        out.append(f"| {r['group']} | {cells} | {t['scale_lib.scale'] - t['tvm_ffi raw']:.2f} |")
    public = {
        r["group"]: r["us_per_call"]["scale_lib.scale"] - r["us_per_call"]["tvm_ffi raw"] <= 1.0 for r in rows
    }
    vs_torch = all(
        r["us_per_call"]["tvm_ffi raw"] < r["us_per_call"]["torch.mul(out=)"]
        for r in rows
        if "torch.mul(out=)" in r["us_per_call"]
    )
    vs_nb = {
        r["group"]: r["us_per_call"]["tvm_ffi raw"] < r["us_per_call"]["nanobind"]
        for r in rows
        if "nanobind" in r["us_per_call"]
    }
    out += [
        "",
        "- Target public API ≤ 1 µs over the raw call: "
        + ", ".join(f"{g}: {_mark(ok)}" for g, ok in public.items())
        + ".",
        f"- Target raw TVM-FFI call cheaper than `torch.mul(out=)`: {_mark(vs_torch)}.",
        "- Target raw TVM-FFI call cheaper than nanobind: "
        + (", ".join(f"{g}: {_mark(ok)}" for g, ok in vs_nb.items()) or "not measured (no nanobind build)")
        + ".",
    ]
    return out


def _exponent(size: str) -> int:
    """e of a size label "2^e"; 0 for other labels."""
    return int(size.split("^")[1]) if "^" in size else 0


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _sections(folder: Path) -> list[str]:
    """The results in ``folder``: ``<op>.json`` from bench_<op>.py, reported by report_<op>.py
    next to this file, in the order of the declared ops; then the host overhead."""
    try:
        from scale_lib.ops import OPS

        order = [op.name for op in OPS]
    except (ImportError, OSError):  # the report needs no built library
        order = []
    names = sorted(
        (p.stem for p in folder.glob("*.json")),
        key=lambda n: (n not in order, order.index(n) if n in order else 0, n),
    )
    return [n for n in names if n != "overhead" and (HERE / f"report_{n}.py").is_file()]


def environment(folder: Path) -> list[str]:
    for name in [*_sections(folder), "overhead"]:
        env = _load(folder, name).get("environment")
        if env:
            lib = env.get("scale_lib", {})
            where = f"{env.get('gpu', 'the CPU')} ({env.get('sms', '?')} SMs)"
            versions = (
                f"Python {env.get('python')}, PyTorch {env.get('torch')}, "
                f"scale_lib {lib.get('version')} (CUDA {lib.get('cuda_version', '-')})"
            )
            return [f"Measured on {where}, {versions}."]
    return []


def render(folder: Path) -> str:
    """The report for the JSON files in ``folder``, as Markdown."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    lines = [*environment(folder), ""]
    for name in _sections(folder):
        lines += [*importlib.import_module(f"report_{name}").section(_load(folder, name)), ""]
    lines += overhead_section(_load(folder, "overhead"))
    return "\n".join(lines) + "\n"


def main(folder: str) -> int:
    print(render(Path(folder)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"))
