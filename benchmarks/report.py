"""Markdown tables from the benchmarks' JSON results, each target checked against its numbers.

    python benchmarks/report.py benchmarks/results          # after a benchmark run
    python benchmarks/report.py docs/_static/perf/<gpu>     # results kept in the docs

The docs build runs this on every folder of results kept under docs/_static/perf/ (docs/conf.py),
so the performance page shows exactly what was measured.
"""

from __future__ import annotations

import importlib
import json
import runpy
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


# The decode step, a chain of several ops: its own file, deleted with any of them.
DECODE_STEP = HERE / "overhead" / "decode_step.py"


def decode_step() -> dict | None:
    """The functions of benchmarks/overhead/decode_step.py (``measure``, ``plot``, ``section``),
    or None where the library lacks one of the ops it chains."""
    return runpy.run_path(str(DECODE_STEP)) if DECODE_STEP.is_file() else None


# Host-overhead targets (bench_overhead.py), microseconds.
OUT_OVER_RAW_US = 0.5  # the public call with out= over the raw library call
ALLOC_OVER_RAW_US = 1.5  # the allocating public call over the raw library call
# CuPy's own calls are compiled Cython with a cached kernel; there the public call (allocating,
# and with out=) is to be within this of CuPy's own equivalent rather than ahead of it.
NEAR_OWN_US = 2.0


def overhead_section(data: dict) -> list[str]:
    if "calls" not in data:
        return _overhead_by_group(data)
    out: list[str] = []
    misses: dict[str, list[str]] = {"out": [], "alloc": [], "own": [], "near": []}
    counts = dict.fromkeys(misses, 0)
    for array in dict.fromkeys(r["array"] for r in data["calls"]):
        rows = [r for r in data["calls"] if r["array"] == array]
        targets, near = rows[0]["targets"], array.startswith("cupy")
        out += [
            f"### Host overhead: {array}" + ("" if targets or near else " (reported, no target)"),
            "",
            "Microseconds per call, median; the framework's own equivalent named in brackets.",
            "",
            "| op | shape | dtype | scale_lib | scale_lib `out=` | raw library call | framework "
            "| framework `out=` | scale_lib - raw | `out=` - raw | targets |",
            "|---" * 11 + "|",
        ]
        for r in rows:
            t = {i["role"]: i for i in r["impls"]}
            us = {role: i["median_us"] for role, i in t.items()}
            case = f"{array} `{r['op']}` {tuple(r['shape'])}"
            verdicts = []
            if targets or near:
                checks = _overhead_checks(us) if targets else _near_own_checks(us)
                for name, ok in checks.items():
                    counts[name] += 1
                    if not ok:
                        misses[name].append(case)
                verdicts = [f"{_TARGET_NAMES[n]} {_mark(ok)}" for n, ok in checks.items()]
            out.append(
                _row(
                    f"`{r['op']}`",
                    "x".join(str(d) for d in r["shape"]),
                    r["dtype"],
                    _us(t.get("public")),
                    _us(t.get("public_out")),
                    _us(t.get("raw")),
                    _us(t.get("own"), label=True),
                    _us(t.get("own_out"), label=True),
                    _diff(us, "public", "raw"),
                    _diff(us, "public_out", "raw"),
                    "; ".join(verdicts) or "-",
                )
            )
        extras = [(r, i) for r in rows for i in r["impls"] if i["role"] == "extra"]
        if extras:
            out += [
                "",
                "Also measured: "
                + "; ".join(f"`{r['op']}` `{i['label']}` {i['median_us']:.2f}" for r, i in extras)
                + ".",
            ]
        out.append("")
    if any(counts.values()):
        out += [
            f"- Target public call with `out=` within {OUT_OVER_RAW_US} µs of the raw call: "
            + _verdict(counts["out"], misses["out"]),
            f"- Target allocating public call within {ALLOC_OVER_RAW_US} µs of the raw call (with an "
            "output given): " + _verdict(counts["alloc"], misses["alloc"]),
            "- Target public call (allocating, and with `out=`) faster than the framework's own "
            "equivalent: " + _verdict(counts["own"], misses["own"]),
        ]
        if counts["near"]:
            out.append(
                f"- Target CuPy: public call (allocating, and with `out=`) within {NEAR_OWN_US} µs of "
                "CuPy's own equivalent: " + _verdict(counts["near"], misses["near"])
            )
        out.append("")
    out += autograd_section(data.get("autograd", []))
    step = decode_step()
    if step is not None:
        out += step["section"](data.get("decode", []), data.get("capture", []))
    return out


def autograd_section(rows: list[dict]) -> list[str]:
    """A training step's calls: each differentiable op and its backward on tensors that require
    grad, against the framework's own."""
    if not rows:
        return []
    out = [
        "### Autograd: forward and backward",
        "",
        "Each differentiable op on tensors that require grad, then `backward()` of its result, "
        "against the framework's own equivalent and its backward. Microseconds per step, median.",
        "",
        "| arrays | op | shape | dtype | scale_lib | framework | framework / scale_lib | target: no slower |",
        "|---" * 8 + "|",
    ]
    missed = []
    for r in rows:
        t = {i["role"]: i for i in r["impls"]}
        ok = t["public"]["median_us"] <= t["own"]["median_us"]
        if not ok:
            missed.append(f"{r['array']} `{r['op']}` {tuple(r['shape'])}")
        out.append(
            _row(
                r["array"],
                f"`{r['op']}`",
                "x".join(str(d) for d in r["shape"]),
                r["dtype"],
                _us(t["public"]),
                _us(t["own"], label=True),
                f"{t['own']['median_us'] / t['public']['median_us']:.2f}x",
                _mark(ok),
            )
        )
    out += [
        "",
        "- Target forward and backward no slower than the framework's own: " + _verdict(len(rows), missed),
        "",
    ]
    return out


_TARGET_NAMES = {"out": "`out=`-raw", "alloc": "alloc-raw", "own": "vs framework", "near": "vs framework"}


def _near_own_checks(us: dict[str, float]) -> dict[str, bool]:
    """CuPy's target: within NEAR_OWN_US of its own equivalent, allocating and with out=."""
    near = us["public"] - us["own"] <= NEAR_OWN_US
    if "public_out" in us:
        near = near and us["public_out"] - us.get("own_out", us["own"]) <= NEAR_OWN_US
    return {"near": near}


def _overhead_checks(us: dict[str, float]) -> dict[str, bool]:
    """Each target that applies to a case, met or not."""
    checks = {}
    if "public_out" in us and "raw" in us:
        checks["out"] = us["public_out"] - us["raw"] <= OUT_OVER_RAW_US
    if "raw" in us:
        checks["alloc"] = us["public"] - us["raw"] <= ALLOC_OVER_RAW_US
    # Allocating against allocating; with out= against the framework's out= where it has one.
    faster = us["public"] < us["own"]
    if "public_out" in us:
        faster = faster and us["public_out"] < us.get("own_out", us["own"])
    checks["own"] = faster
    return checks


def _us(impl: dict | None, label: bool = False) -> str:
    if impl is None:
        return "-"
    return f"{impl['median_us']:.2f}" + (f" (`{impl['label']}`)" if label else "")


def _diff(us: dict[str, float], a: str, b: str) -> str:
    return f"{us[a] - us[b]:+.2f}" if a in us and b in us else "-"


def _verdict(n: int, missed: list[str]) -> str:
    if not missed:
        return f"met ({n} of {n} cases)."
    return f"**missed** in {len(missed)} of {n} cases: " + ", ".join(missed) + "."


def _overhead_by_group(data: dict) -> list[str]:
    """The earlier overhead benchmark's results (``scale`` on 16 float32 elements only)."""
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
            where = f"{env['gpu']} ({env.get('sms', '?')} SMs)" if "gpu" in env else "the CPU"
            versions = (
                f"Python {env.get('python')}, PyTorch {env.get('torch')}, "
                f"scale_lib {lib.get('version')} (CUDA {lib.get('cuda_version', '-')})"
            )
            return [f"Measured on {where}, {versions}."]
    return []


def render(folder: Path, images: str | None = None) -> str:
    """The report for the JSON files in ``folder``, as Markdown. With ``images`` (the path under
    which the page finds the folder's files), each benchmark's plot follows its tables."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    lines = [*environment(folder), ""]
    sections = [(n, importlib.import_module(f"report_{n}").section) for n in _sections(folder)]
    for name, section in [*sections, ("overhead", overhead_section)]:
        data = _load(folder, name)
        if not data:
            continue
        lines += [*section(data), ""]
        if images and (folder / f"{name}.png").exists():
            lines += [f"![{name}: the numbers above, plotted]({images}/{name}.png)", ""]
    return "\n".join(lines) + "\n"


def main(folder: str) -> int:
    print(render(Path(folder)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"))
