# op-file: rms_norm, axpby
"""The decode step: one transformer layer's norms and elementwise work (2 x ``rms_norm``, 2 x
``scale``, 2 x ``axpby`` on ``(B, 4096)`` bfloat16), written with scale_lib and with the
framework's own ops. ``benchmarks/bench_overhead.py`` measures it where this file is present
(``measure``, ``plot``) and ``benchmarks/report.py`` reports it (``section``); the file goes with
either op (``tools/remove_op.py``).

PyTorch: eager, replayed from a CUDA graph and under ``torch.compile(mode="reduce-overhead")``;
on the CPU it also records the cost of switching between the two chains (``handover_us``), which
the samples leave out. JAX: under ``jax.jit``, against the same chain in ``jax.numpy``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

try:
    import scale_lib
except (ImportError, OSError):  # the report reads this file without a built library
    scale_lib = None

Fn = Callable[[], Any]


class Timing(Protocol):
    """bench_overhead.py's timers, which ``measure`` is given."""

    per_call_us: Callable[..., dict[str, dict[str, float]]]  # {impl: {"median_us", "min_us"}}
    handover_us: Callable[..., dict[str, float]]  # {"<a> after <b>": median µs}


HIDDEN = 4096
DECODE_BATCHES = (1, 8, 64)
EPS = 1e-6
OPS_IN_STEP = 6  # the scale_lib calls of decode_step_scale_lib: torch.compile must trace all of them


# [decode_step.begin]
def decode_step_scale_lib(x: Any, w1: Any, w2: Any) -> Any:
    """A transformer layer's norms and elementwise work, with stand-ins for attention and MLP."""
    h = scale_lib.rms_norm(x, w1, EPS)
    attention = scale_lib.scale(h, 0.5)
    x = scale_lib.axpby(x, attention, 1.0, 1.0)  # residual
    h = scale_lib.rms_norm(x, w2, EPS)
    mlp = scale_lib.scale(h, 2.0)
    return scale_lib.axpby(x, mlp, 1.0, 0.5)  # residual


def decode_step_torch(x: Any, w1: Any, w2: Any) -> Any:
    """The same chain written with PyTorch's own ops."""
    import torch
    import torch.nn.functional as F

    h = F.rms_norm(x, (x.shape[-1],), w1, EPS)
    attention = h * 0.5
    x = x + attention
    h = F.rms_norm(x, (x.shape[-1],), w2, EPS)
    mlp = h * 2.0
    return torch.add(x, mlp, alpha=0.5)


# [decode_step.end]
STEPS = {"scale_lib": decode_step_scale_lib, "torch": decode_step_torch}


def no_graph_break(device: str) -> dict[str, Any]:
    """torch._dynamo.explain of the scale_lib chain: one graph, no break, every op in it."""
    import torch

    x, w1, w2 = _decode_inputs(device, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(decode_step_scale_lib)(x, w1, w2)
    ops = [str(op) for graph_ops in explained.ops_per_graph for op in graph_ops]
    return {
        "array": f"torch {device}",
        "graphs": explained.graph_count,
        "graph_breaks": explained.graph_break_count,
        "break_reasons": [str(r.reason) for r in explained.break_reasons],
        "scale_lib_ops_in_graph": sum("scale_lib" in op for op in ops),
    }


def _decode_inputs(device: str, batch: int) -> tuple[Any, Any, Any]:
    import torch

    g = torch.Generator().manual_seed(batch)
    x, w1, w2 = (
        torch.randn(s, generator=g).to(device, torch.bfloat16)
        for s in ((batch, HIDDEN), (HIDDEN,), (HIDDEN,))
    )
    # The norms' weights are a module's parameters; the step runs under torch.no_grad().
    return x, torch.nn.Parameter(w1), torch.nn.Parameter(w2)


def _eager(step: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Fn, Any]:
    return (lambda: step(*args)), step(*args)


def _cuda_graph(step: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Fn, Any]:
    """``step(*args)`` captured in a CUDA graph: (replay, the captured output, replayed once)."""
    import torch

    side = torch.cuda.Stream()  # warm up off the default stream, as capture requires
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(*args)
    graph.replay()
    torch.cuda.synchronize()
    return graph.replay, out


def _compiled(step: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Fn, Any]:
    """``step`` under torch.compile(mode="reduce-overhead"), whole (fullgraph) and replayed from
    a CUDA graph: RuntimeError if inductor fell back to running it without one."""
    import torch

    torch._dynamo.reset()
    skips = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True, dynamic=False)

    def run() -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args)

    for _ in range(3):  # the first calls record, the later ones replay
        out = run()
    torch.cuda.synchronize()
    if torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] != skips:
        raise RuntimeError("torch.compile ran the step without a CUDA graph (cudagraph skip)")
    return run, out


MODES = {"eager": _eager, "cuda graph": _cuda_graph, "torch.compile reduce-overhead": _compiled}


def run_decode(
    device: str, sample_s: float, repeats: int, quick: bool, timing: Timing
) -> list[dict[str, Any]]:
    import torch

    rows = []
    sync = (lambda r: torch.cuda.synchronize()) if device == "cuda" else None
    modes = MODES if device == "cuda" else {"eager": _eager}  # graphs are CUDA's
    for batch in DECODE_BATCHES[:1] if quick else DECODE_BATCHES:
        args = _decode_inputs(device, batch)
        expected = decode_step_torch(*args).float()
        for mode, prepare in modes.items():
            impls: dict[str, Fn] = {}
            works: dict[str, bool] = {}  # right result, and captured where the mode captures
            errors: dict[str, str] = {}
            for name, step in STEPS.items():
                try:
                    impls[name], out = prepare(step, args)
                    works[name] = _close(out, expected)
                except Exception as err:  # noqa: BLE001 - recorded: the report marks the mode missed
                    works[name], errors[name] = False, f"{type(err).__name__}: {err}"[:500]
            timings = timing.per_call_us(impls, sample_s, repeats, sync) if impls else {}
            row = _row(f"torch {device}", mode, batch, works, errors, timings)
            if device == "cpu" and len(impls) == 2:
                row["handover_us"] = timing.handover_us(impls, repeats)
            rows.append(row)
    return rows


def _row(
    array: str, mode: str, batch: int, works: dict[str, bool], errors: dict[str, str], timings: dict
) -> dict[str, Any]:
    """One measured case as the JSON keeps it, printed as it is recorded."""
    cells = ", ".join(f"{name} {t['median_us']:.2f}" for name, t in timings.items())
    print(f"decode {array} B={batch:<3d} {mode:30s} {cells} {errors or ''}", flush=True)
    return {
        "array": array,
        "mode": mode,
        "batch": batch,
        "shape": [batch, HIDDEN],
        "dtype": "bfloat16",
        "works": works,
        "errors": errors,
        "impls": [{"label": name, **t} for name, t in timings.items()],
    }


def decode_step_jnp(x: Any, w1: Any, w2: Any) -> Any:
    """The same chain written with jax.numpy (XLA fuses it under jax.jit)."""
    import jax
    import jax.numpy as jnp

    def rms_norm(h: Any, w: Any) -> Any:
        h32 = h.astype(jnp.float32)
        y = h32 * jax.lax.rsqrt(jnp.mean(jnp.square(h32), axis=-1, keepdims=True) + EPS)
        return (y * w.astype(jnp.float32)).astype(h.dtype)

    x = x + rms_norm(x, w1) * 0.5
    return x + 0.5 * (rms_norm(x, w2) * 2.0)


JAX_DECODE_BATCHES = (1, 8, 64, 256)


def run_decode_jax(
    device: str, sample_s: float, repeats: int, quick: bool, timing: Timing
) -> list[dict[str, Any]]:
    """The decode step under jax.jit: scale_lib's ops (one XLA custom call each) against the
    jnp chain, which XLA fuses."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rows = []
    steps = {"scale_lib": jax.jit(decode_step_scale_lib), "jnp": jax.jit(decode_step_jnp)}
    for batch in JAX_DECODE_BATCHES[:1] if quick else JAX_DECODE_BATCHES:
        key = jax.random.PRNGKey(batch)
        x, w1, w2 = (
            jax.random.normal(k, s, jnp.float32).astype(jnp.bfloat16)
            for k, s in zip(jax.random.split(key, 3), ((batch, HIDDEN), (HIDDEN,), (HIDDEN,)), strict=True)
        )
        expected = np.asarray(steps["jnp"](x, w1, w2).astype(jnp.float32))
        impls: dict[str, Fn] = {}
        works: dict[str, bool] = {}
        errors: dict[str, str] = {}
        for name, step in steps.items():
            try:
                got = np.asarray(step(x, w1, w2).astype(jnp.float32))
                works[name] = bool(np.allclose(got, expected, rtol=5e-2, atol=5e-2))
                impls[name] = lambda step=step: step(x, w1, w2)
            except Exception as err:  # noqa: BLE001 - recorded: the report marks the case missed
                works[name], errors[name] = False, f"{type(err).__name__}: {err}"[:500]
        timings = timing.per_call_us(impls, sample_s, repeats, jax.block_until_ready) if impls else {}
        rows.append(_row(f"jax {device}", "jax.jit", batch, works, errors, timings))
    return rows


def _jax_decode_device(wanted: str) -> str | None:
    """JAX's default backend when it is one this run measures ("cpu" or "gpu"), else None."""
    try:
        import jax
    except ImportError:
        return None
    backend = jax.default_backend()
    if backend == "cpu":
        return "cpu" if wanted in ("cpu", "all") else None
    return backend if wanted in ("cuda", "all") and scale_lib.cuda_available() else None


def _close(got: Any, expected: Any) -> bool:
    import torch

    return bool(torch.allclose(got.float(), expected, rtol=5e-2, atol=5e-2))


def _torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def measure(
    wanted: str, sample_s: float, repeats: int, quick: bool, timing: Timing
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the decode step's rows, the torch.compile capture checks) for ``--device`` ``wanted``."""
    decode: list[dict[str, Any]] = []
    capture: list[dict[str, Any]] = []
    torch = _torch_or_none()
    for device in [d for d in ("cpu", "cuda") if torch is not None and wanted in (d, "all")]:
        if device == "cuda" and not (torch.cuda.is_available() and scale_lib.cuda_available()):
            continue
        with torch.no_grad():  # inference
            capture.append(no_graph_break(device))
            decode += run_decode(device, sample_s, repeats, quick, timing)
    jax_device = _jax_decode_device(wanted)
    if jax_device is not None:
        decode += run_decode_jax(jax_device, sample_s, repeats, quick, timing)
    return decode, capture


def plot(ax: Any, rows: list[dict[str, Any]]) -> None:
    """The decode step's panel of bench_overhead.py's plot."""
    # Each row's chain with scale_lib, then with the framework's own ops (PyTorch's, or
    # jax.numpy's under jax.jit: the label says which).
    for j, label in enumerate(("scale_lib", "framework's ops")):
        ys = [
            next(i["median_us"] for i in r["impls"] if (i["label"] == "scale_lib") == (j == 0)) for r in rows
        ]
        ax.bar([k + (j - 0.5) * 0.35 for k in range(len(rows))], ys, width=0.35, label=label)
    ax.set_xticks(range(len(rows)), [f"{r['mode']}\nB={r['batch']} {r['array']}" for r in rows], fontsize=7)
    ax.set_ylabel("µs per decode step")
    ax.set_title(f"decode step: 2 x rms_norm + 2 x scale + 2 x axpby, (B, {HIDDEN}) bfloat16")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


def section(rows: list[dict], capture: list[dict]) -> list[str]:
    """The report's section of the decode step (benchmarks/report.py's overhead section ends with it)."""
    benchmarks = str(Path(__file__).resolve().parent.parent)
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    import report  # benchmarks/report.py: its table helpers

    if not rows:
        return []
    out = [
        "### Decode step",
        "",
        f"One transformer layer's norms and elementwise work on `(B, {HIDDEN})` bfloat16: 2 x `rms_norm` "
        "+ 2 x `scale` + 2 x `axpby`, against the same chain written with the framework's own ops "
        "(PyTorch: `F.rms_norm`, `*`, `+`, `torch.add(alpha=)`; JAX: `jax.numpy`, which XLA fuses "
        "under `jax.jit`). Microseconds per step, median.",
        "",
        "| arrays | mode | B | scale_lib | framework's ops | framework / scale_lib "
        "| target: faster, and works |",
        "|---|---|---|---|---|---|---|",
    ]
    met = []
    for r in rows:
        t = {i["label"]: i["median_us"] for i in r["impls"]}
        ours = t.get("scale_lib")
        theirs = next((us for label, us in t.items() if label != "scale_lib"), None)
        timed = ours is not None and theirs is not None
        ok = timed and ours < theirs and all(r["works"].values())
        met.append(ok)
        broken = [name for name, works in r["works"].items() if not works]
        errors = r.get("errors", {})
        note = "; ".join(f"{name}: {errors.get(name, 'wrong result')}" for name in broken)
        note = note.replace("|", "/").replace("\n", " ")  # inside a table cell
        out.append(
            report._row(
                r["array"],
                r["mode"],
                r["batch"],
                report._us({"median_us": ours} if ours is not None else None),
                report._us({"median_us": theirs} if theirs is not None else None),
                f"{theirs / ours:.2f}x" if timed else "-",
                report._mark(ok) + (f" ({note})" if note else ""),
            )
        )
    missed = [f"{r['array']} {r['mode']} B={r['batch']}" for r, ok in zip(rows, met, strict=True) if not ok]
    out += [
        "",
        "- Target scale_lib's chain faster than the framework's own in every mode: "
        + report._verdict(len(met), missed),
    ]
    for r in rows:
        if r.get("handover_us"):
            cells = ", ".join(f"{key} {us:.0f}" for key, us in r["handover_us"].items())
            out.append(
                f"- {r['array']} B={r['batch']}, one step right after one step of the other chain "
                f"(µs, median; not part of the targets): {cells}."
            )
    for c in capture:
        ok = c["graphs"] == 1 and c["graph_breaks"] == 0 and c["scale_lib_ops_in_graph"] == OPS_IN_STEP
        reasons = f" ({'; '.join(c['break_reasons'])})" if c["break_reasons"] else ""
        out.append(
            f"- Target the chain traced whole by `torch.compile` ({c['array']}: {c['graphs']} graph(s), "
            f"{c['graph_breaks']} break(s){reasons}, {c['scale_lib_ops_in_graph']} of {OPS_IN_STEP} "
            f"scale_lib ops in the graph): {report._mark(ok)}."
        )
    return [*out, ""]
