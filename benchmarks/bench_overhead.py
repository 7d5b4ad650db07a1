"""Host overhead at decode sizes: every public op against the framework's own equivalent and the
raw library call.

    python benchmarks/bench_overhead.py --out-dir benchmarks/results   # about 3 minutes on a GPU host
    python benchmarks/bench_overhead.py --quick                        # seconds, CPU: a smoke test

Writes ``overhead.json``, ``overhead.png`` (with matplotlib) and ``overhead.md``, the report that
marks each target met or missed (``benchmarks/report.py`` renders the same from the JSON).

Method: for each case the implementations take turns, sample by sample; a sample is the wall time
of N back-to-back calls divided by N (N chosen so that a sample takes a few milliseconds), after
one untimed call, with one synchronisation at its end for asynchronous frameworks, so the time is
what the host spends per call when the kernels are tiny. The JSON keeps the median and the minimum
over the samples; the report uses the median.

The cases come from the library's list of declared ops (``scale_lib.ops.OPS``), each op's decode
sizes and each framework's own equivalent from its file ``benchmarks/overhead/<op>.py``: a public
op without one (or without an equivalent in a framework) is not measured, and the run says so.
Where the library has the ops of a decode step (``benchmarks/overhead/decode_step.py``, which says
what it chains), the run also times that chain against the framework's own ops.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402
import report  # noqa: E402

import scale_lib  # noqa: E402
from scale_lib._spec import OpSpec  # noqa: E402
from scale_lib.ops import OPS  # noqa: E402

Fn = Callable[[], Any]
# Each op's decode sizes and each framework's own way to compute it: benchmarks/overhead/<op>.py.
CASES = HERE / "overhead"


@dataclass
class Kind:
    """One kind of array: a framework on a device."""

    name: str  # "torch cuda"
    targets: bool  # whether the overhead targets apply (PyTorch and NumPy) or it is only reported
    decode_dtype: str  # dtype of the (rows, hidden) cases
    make: Callable[[tuple[int, ...], str, bool], Any]  # (shape, dtype, sparse) -> random array
    to_numpy: Callable[[Any], Any]  # a result as a float64 NumPy array, for the equivalence check
    framework: str  # its equivalents are own_<framework> in benchmarks/overhead/<op>.py
    sync: Callable[[Any], Any] | None = None  # waits for the work behind a result
    workspace: Callable[[Any, int], Any] | None = None  # (like, nbytes) -> scratch, if passed in
    extras: dict[str, Callable[[tuple[Any, ...], Any], dict[str, Fn]]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The frameworks
# ---------------------------------------------------------------------------------------------
def _numpy_random(shape: tuple[int, ...], dtype: str, sparse: bool) -> Any:
    import numpy as np

    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if sparse:  # half the elements zero, for an op whose output depends on which are
        x.reshape(-1)[::2] = 0
    return x


def numpy_kind(nb: Any) -> Kind:
    import numpy as np
    import tvm_ffi

    def scale_extras(inputs: tuple[Any, ...], out: Any) -> dict[str, Fn]:
        # NumPy has no C-level DLPack exchange API, so TVM-FFI exports each array per call through
        # ndarray.__dlpack__: the two rows below split the raw call into the call and the export.
        x, raw = inputs[0], scale_lib.lib.scale
        xt, ot = tvm_ffi.from_dlpack(x), tvm_ffi.from_dlpack(out)
        extras: dict[str, Fn] = {
            "raw, pre-converted": lambda: raw(ot, xt, 2.0),
            "2x ndarray.__dlpack__()": lambda: (
                x.__dlpack__(max_version=(1, 1)),
                out.__dlpack__(max_version=(1, 1)),
            ),
        }
        if nb is not None:
            extras["nanobind"] = lambda: nb.scale(out, x, 2.0)
        return extras

    return Kind(
        name="numpy cpu",
        targets=True,
        decode_dtype="float32",  # NumPy's own arithmetic: bfloat16 is an ml_dtypes extension
        make=_numpy_random,
        to_numpy=lambda r: np.asarray(
            r if isinstance(r, np.ndarray | np.generic) else np.from_dlpack(r), np.float64
        ),
        framework="numpy",
        extras={"scale": scale_extras},
    )


def torch_kind(device: str, nb: Any) -> Kind:
    import numpy as np
    import torch

    def make(shape: tuple[int, ...], dtype: str, sparse: bool) -> Any:
        t = torch.from_numpy(_numpy_random(shape, "float32", sparse)).to(device, getattr(torch, dtype))
        return t.contiguous()

    def scale_extras(inputs: tuple[Any, ...], out: Any) -> dict[str, Fn]:
        x = inputs[0]
        extras: dict[str, Fn] = {
            # The registered custom op, as torch.compile and autograd call it.
            "torch.ops.scale_lib.scale_out": lambda: torch.ops.scale_lib.scale_out(out, x, 2.0),
        }
        if nb is not None and device == "cpu":
            extras["nanobind"] = lambda: nb.scale(out, x, 2.0)
        return extras

    return Kind(
        name=f"torch {device}",
        targets=True,
        decode_dtype="bfloat16",
        make=make,
        to_numpy=lambda r: r.detach().to("cpu", torch.float64).numpy().astype(np.float64),
        framework="torch",
        sync=(lambda r: torch.cuda.synchronize()) if device == "cuda" else None,
        extras={"scale": scale_extras},
    )


def jax_kind() -> Kind:
    import jax
    import jax.numpy as jnp
    import numpy as np

    return Kind(
        name=f"jax {jax.default_backend()}",
        targets=False,
        decode_dtype="bfloat16",
        make=lambda shape, dtype, sparse: jnp.asarray(_numpy_random(shape, "float32", sparse), dtype=dtype),
        to_numpy=lambda r: np.asarray(jnp.asarray(r, jnp.float32), np.float64),
        framework="jax",
        sync=jax.block_until_ready,
    )


def cupy_kind() -> Kind:
    import cupy
    import numpy as np

    return Kind(
        name="cupy cuda",
        targets=False,
        decode_dtype="float32",  # CuPy has no bfloat16
        make=lambda shape, dtype, sparse: cupy.asarray(_numpy_random(shape, dtype, sparse)),
        to_numpy=lambda r: cupy.asnumpy(r if isinstance(r, cupy.ndarray) else cupy.from_dlpack(r)).astype(
            np.float64
        ),
        framework="cupy",
        sync=lambda r: cupy.cuda.get_current_stream().synchronize(),
        workspace=lambda like, nbytes: cupy.empty(nbytes, cupy.uint8),
    )


def kinds(device: str, nb: Any) -> list[Kind]:
    """The kinds of array to measure, for --device cpu/cuda/all."""
    found: list[Kind] = []
    cpu, cuda = device in ("cpu", "all"), device in ("cuda", "all")
    if cpu:
        found.append(numpy_kind(nb))
    try:
        import torch

        if cpu:
            found.append(torch_kind("cpu", nb))
        if cuda and torch.cuda.is_available() and scale_lib.cuda_available():
            found.append(torch_kind("cuda", nb))
    except ImportError:
        print("PyTorch is not installed: no PyTorch cases")
    try:
        import jax

        if (jax.default_backend() == "cpu" and cpu) or (jax.default_backend() != "cpu" and cuda):
            found.append(jax_kind())
    except ImportError:
        print("JAX is not installed: no JAX cases")
    if cuda and scale_lib.cuda_available():
        try:
            found.append(cupy_kind())
        except ImportError:
            print("CuPy is not installed: no CuPy cases")
    return found


# ---------------------------------------------------------------------------------------------
# Per-op cases
# ---------------------------------------------------------------------------------------------
@dataclass
class Case:
    kind: Kind
    op: str
    shape: tuple[int, ...]
    dtype: str
    impls: dict[
        str, tuple[str, Fn]
    ]  # label -> (role, fn); roles: public, public_out, raw, own, own_out, extra
    outs: dict[str, Any]  # label -> the array it writes, for calls that return nothing


def op_cases(kind: Kind) -> list[Case]:
    """Every public op at its decode sizes."""
    cases = []
    for spec in OPS:
        if not spec.public:
            continue
        module = case_file(spec.name)
        own = module.get(f"own_{kind.framework}")
        if own is None:
            # A new op is measured once it has its file of cases; until then the run says so
            # rather than failing a library's benchmark session.
            print(
                f"note: {spec.name} is not measured on {kind.name}: write its decode sizes and "
                f"own_{kind.framework} in benchmarks/overhead/{spec.name}.py (as in scale.py there)",
                file=sys.stderr,
            )
            continue
        dtype = module.get("DTYPE", kind.decode_dtype)
        cases += [_case(kind, spec, shape, module["ATTRS"], dtype, own) for shape in module["SHAPES"]]
    return cases


@functools.cache
def case_file(op: str) -> dict[str, Any]:
    """What ``benchmarks/overhead/<op>.py`` defines (its sizes, attributes and each framework's
    own equivalents), read once; empty where the op has no such file."""
    path = CASES / f"{op}.py"
    return runpy.run_path(str(path)) if path.is_file() else {}


def _case(
    kind: Kind, spec: OpSpec, shape: tuple[int, ...], attrs: tuple[Any, ...], dtype: str, own: Any
) -> Case:
    """The public call (allocating, and with out= where the op has it), the raw library call with
    an output given, and the framework's own equivalents (``own(inputs, attrs, out)``)."""
    sparse = spec.output.allocated_by_library  # an output whose size depends on the data
    inputs = tuple(
        kind.make(shape if i.shape is None else tuple(i.shape(shape)), dtype, sparse) for i in spec.inputs
    )
    public = getattr(scale_lib, spec.name)
    raw = getattr(scale_lib.lib, spec.name)
    immutable = kind.name.startswith("jax")  # JAX arrays: no out=, no direct library call
    has_out = "out" in inspect.signature(public).parameters and not immutable
    out, raw_out, own_out = (public(*inputs, *attrs) for _ in range(3))
    impls: dict[str, tuple[str, Fn]] = {"scale_lib": ("public", lambda: public(*inputs, *attrs))}
    outs: dict[str, Any] = {}  # where the calls that return nothing write
    if has_out:
        impls["scale_lib out="] = ("public_out", lambda: public(*inputs, *attrs, out=out))
    if immutable:
        pass
    elif spec.output.allocated_by_library:
        impls["raw"] = ("raw", lambda: raw(*inputs, *attrs))
    elif spec.workspace and kind.workspace is not None:
        with_workspace = getattr(scale_lib.lib, f"{spec.name}_with_workspace")
        nbytes = getattr(scale_lib.lib, spec.workspace)(_numel(shape), max(_numel(raw_out.shape), 1))
        workspace = kind.workspace(inputs[0], nbytes)
        impls["raw (out, workspace)"] = ("raw", lambda: with_workspace(raw_out, workspace, *inputs, *attrs))
        outs["raw (out, workspace)"] = raw_out
    else:
        impls["raw (out)"] = ("raw", lambda: raw(raw_out, *inputs, *attrs))
        outs["raw (out)"] = raw_out
    impls.update(own(inputs, attrs, own_out))
    extras = kind.extras.get(spec.name)
    if extras is not None:
        impls.update({label: ("extra", fn) for label, fn in extras(inputs, public(*inputs, *attrs)).items()})
    return Case(kind, spec.name, shape, dtype, impls, outs)


def check_equivalent(case: Case) -> None:
    """Every implementation computes the same result: a wrong equivalent would make the comparison
    meaningless."""

    expected = case.kind.to_numpy(case.impls["scale_lib"][1]()).reshape(-1)
    tol = 3e-2 if case.dtype in ("bfloat16", "float16") else 1e-5
    for label, (role, fn) in case.impls.items():
        if role == "extra":
            continue
        result = fn()
        got = case.kind.to_numpy(case.outs[label] if result is None else result).reshape(-1)
        if not agree(got, expected, tol):
            raise AssertionError(f"{case.kind.name} {case.op} {case.shape}: {label!r} differs from scale_lib")


def agree(got: Any, expected: Any, tol: float) -> bool:
    """Two flat float64 arrays of one shape within ``tol``, relative and absolute in units of the
    largest expected value (a running sum rounds at the size it has reached)."""
    import numpy as np

    magnitude = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    return got.shape == expected.shape and bool(np.allclose(got, expected, rtol=tol, atol=tol * magnitude))


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------
def per_call_us(
    impls: dict[str, Fn], sample_s: float, repeats: int, sync: Callable[[Any], Any] | None = None
) -> dict[str, dict[str, float]]:
    """{impl: {"median_us", "min_us"}} over ``repeats`` samples of (wall time of N calls) / N.

    The implementations take turns sample by sample, so that drift of the machine (clock
    frequency, a neighbour) is shared by all of them instead of landing on whichever ran during
    it: the differences between columns are what this benchmark is about. N is the same for all
    of them, chosen so that a sample of the slowest takes about ``sample_s``. Each sample starts
    with one untimed call, so that it measures the calls and not the switch from the previous
    implementation (on the CPU, PyTorch's OpenMP threads keep their cores busy for a while after
    each of its ops, which slows whatever runs next; see ``handover_us``).
    """
    slowest = 0.0
    for fn in impls.values():
        r = fn()
        if sync:
            sync(r)
        t0 = time.perf_counter()
        for _ in range(20):
            r = fn()
        if sync:
            sync(r)
        slowest = max(slowest, (time.perf_counter() - t0) / 20)
    number = max(10, min(2000, int(sample_s / max(slowest, 1e-9))))
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(repeats):
        for name, fn in impls.items():
            r = fn()
            if sync:
                sync(r)
            t0 = time.perf_counter()
            for _ in range(number):
                r = fn()
            if sync:
                sync(r)
            samples[name].append((time.perf_counter() - t0) / number * 1e6)
    return {name: {"median_us": statistics.median(v), "min_us": min(v)} for name, v in samples.items()}


def handover_us(impls: dict[str, Fn], repeats: int) -> dict[str, float]:
    """{"<a> after <b>": median microseconds of one call of a made right after one call of b},
    both ways: the cost of switching between two implementations that each run their own CPU
    threads (per_call_us leaves it out)."""
    (a, call_a), (b, call_b) = impls.items()
    times: dict[str, list[float]] = {f"{a} after {b}": [], f"{b} after {a}": []}
    for _ in range(repeats):
        for key, before, timed in ((f"{a} after {b}", call_b, call_a), (f"{b} after {a}", call_a, call_b)):
            before()
            t0 = time.perf_counter()
            timed()
            times[key].append((time.perf_counter() - t0) * 1e6)
    return {key: statistics.median(v) for key, v in times.items()}


def run_op_cases(kind: Kind, sample_s: float, repeats: int) -> list[dict[str, Any]]:
    return timed_rows(kind, op_cases(kind), check_equivalent, sample_s, repeats, targets=kind.targets)


def timed_rows(
    kind: Kind,
    cases: list[Case],
    check: Callable[[Case], None],
    sample_s: float,
    repeats: int,
    what: str = "",
    **fields: Any,
) -> list[dict[str, Any]]:
    """Each case checked (``check``), then timed: one row each, as the JSON keeps them (with
    ``fields``), printed as they are recorded (``what``: what a call does, if not the op alone)."""
    rows = []
    for case in cases:
        check(case)
        timings = per_call_us(
            {label: fn for label, (_, fn) in case.impls.items()}, sample_s, repeats, kind.sync
        )
        rows.append(
            {
                "array": kind.name,
                "op": case.op,
                "shape": list(case.shape),
                "dtype": case.dtype,
                **fields,
                "impls": [
                    {"label": label, "role": role, **timings[label]}
                    for label, (role, _) in case.impls.items()
                ],
            }
        )
        cells = ", ".join(f"{label} {t['median_us']:.2f}" for label, t in timings.items())
        print(f"{kind.name:10s} {case.op:12s} {case.shape!s:10s} {what}{cells}", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# Autograd: a training step's calls
# ---------------------------------------------------------------------------------------------
def autograd_cases(kind: Kind) -> list[Case]:
    """Every differentiable public op at its decode sizes on tensors that require grad: the op
    and its backward (``y.backward(ones)``), against the framework's own equivalent (its "own"
    call in ``benchmarks/overhead/<op>.py``) and its backward. PyTorch only."""
    cases = []
    for spec in OPS:
        module = case_file(spec.name)
        if spec.public and spec.vjp is not None and "own_torch" in module:
            dtype = module.get("DTYPE", kind.decode_dtype)
            cases += [
                _autograd_case(kind, spec, shape, module["ATTRS"], dtype, module["own_torch"])
                for shape in module["SHAPES"]
            ]
    return cases


def _autograd_case(
    kind: Kind, spec: OpSpec, shape: tuple[int, ...], attrs: tuple[Any, ...], dtype: str, own_torch: Any
) -> Case:
    import torch

    inputs = tuple(
        kind.make(shape if i.shape is None else tuple(i.shape(shape)), dtype, False).requires_grad_()
        for i in spec.inputs
    )
    public = getattr(scale_lib, spec.name)
    label, own = next((k, fn) for k, (role, fn) in own_torch(inputs, attrs, None).items() if role == "own")
    grad = torch.ones_like(public(*inputs, *attrs))
    impls: dict[str, tuple[str, Fn]] = {
        "scale_lib": ("public", lambda: public(*inputs, *attrs).backward(grad)),
        label: ("own", lambda: own().backward(grad)),
    }
    return Case(kind, spec.name, shape, dtype, impls, {"inputs": inputs})


def check_same_gradients(case: Case) -> None:
    """Both steps give the inputs the same gradients: a wrong equivalent would make the
    comparison meaningless."""
    inputs = case.outs["inputs"]
    grads = {}
    for label, (_, fn) in case.impls.items():
        for t in inputs:
            t.grad = None
        fn()
        grads[label] = [case.kind.to_numpy(t.grad).reshape(-1) for t in inputs]
    tol = 5e-2 if case.dtype in ("bfloat16", "float16") else 1e-4
    for ours, theirs in zip(*grads.values(), strict=True):
        if not agree(ours, theirs, tol):
            raise AssertionError(f"{case.kind.name} {case.op} {case.shape}: the gradients differ")


def run_autograd_cases(kind: Kind, sample_s: float, repeats: int) -> list[dict[str, Any]]:
    cases = autograd_cases(kind)
    return timed_rows(kind, cases, check_same_gradients, sample_s, repeats, "forward + backward: ")


# ---------------------------------------------------------------------------------------------
# nanobind baseline (optional)
# ---------------------------------------------------------------------------------------------
def build_nanobind(build_dir: Path) -> Any:
    """Build and import the nanobind baseline (benchmarks/nanobind_baseline); None if it can't."""
    try:
        import nanobind
    except ImportError:
        print("nanobind is not installed: no nanobind baseline")
        return None
    cmakedir = subprocess.run(
        [sys.executable, "-m", "tvm_ffi.config", "--cmakedir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        [
            "cmake",
            "-S",
            str(HERE / "nanobind_baseline"),
            "-B",
            str(build_dir),
            *generator,
            f"-Dtvm_ffi_ROOT={cmakedir}",
            f"-Dnanobind_ROOT={nanobind.cmake_dir()}",
            f"-DPython_EXECUTABLE={sys.executable}",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build_dir)], check=True, capture_output=True)
    sys.path.insert(0, str(build_dir))
    import scale_nb

    return scale_nb


def nanobind_or_none(build_dir: Path) -> Any:
    try:
        return build_nanobind(build_dir)
    except (subprocess.CalledProcessError, ImportError, OSError) as err:
        print(f"no nanobind baseline: its build failed ({err})")
        return None


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def plot(data: dict[str, Any], out_dir: Path) -> Path | None:
    """Microseconds per call: one panel per kind of array (each op's implementations side by
    side), and one for the decode step where the data has it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    kinds = list(dict.fromkeys(r["array"] for r in data["calls"]))
    panels = len(kinds) + (1 if data["decode"] else 0)
    fig, axes = plt.subplots(panels, 1, figsize=(12, 3.2 * panels), squeeze=False)
    roles = ("public", "public_out", "raw", "own", "own_out")
    names = {
        "public": "scale_lib",
        "public_out": "scale_lib out=",
        "raw": "raw library call",
        "own": "framework",
        "own_out": "framework out=",
    }
    for ax, kind in zip(axes[:, 0], kinds, strict=False):
        rows = [r for r in data["calls"] if r["array"] == kind]
        for j, role in enumerate(roles):
            ys = [next((i["median_us"] for i in r["impls"] if i["role"] == role), float("nan")) for r in rows]
            ax.bar([k + (j - 2) * 0.16 for k in range(len(rows))], ys, width=0.16, label=names[role])
        ax.set_xticks(range(len(rows)), [f"{r['op']} {tuple(r['shape'])}" for r in rows], fontsize=8)
        ax.set_ylabel("µs per call (log scale)")
        ax.set_yscale("log")
        ax.set_title(kind)
        ax.legend(fontsize=7, ncol=5)
        ax.grid(alpha=0.3, axis="y")
    decode_step = report.decode_step()
    if data["decode"] and decode_step is not None:
        decode_step["plot"](axes[-1, 0], data["decode"])
    fig.tight_layout()
    path = out_dir / "overhead.png"
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")
    return path


def main() -> None:
    args = common.parse_args(__doc__)
    nb = (
        None
        if args.quick
        else nanobind_or_none(Path(os.environ.get("SCALE_NB_BUILD", "/tmp/scale_nb_build")))
    )
    sample_s, repeats = (0.001, 3) if args.quick else (0.004, args.repeats or 25)
    started = time.perf_counter()
    calls, autograd = [], []
    for kind in kinds(args.device, nb):
        calls += run_op_cases(kind, sample_s, repeats)
        if kind.framework == "torch":
            autograd += run_autograd_cases(kind, sample_s, repeats)
    decode: list[dict[str, Any]] = []  # the decode step's rows, where this library has one
    capture: list[dict[str, Any]] = []
    decode_step = report.decode_step()
    if decode_step is not None:
        timing = SimpleNamespace(per_call_us=per_call_us, handover_us=handover_us)
        decode, capture = decode_step["measure"](args.device, sample_s, repeats, args.quick, timing)
    data = {
        "environment": common.environment(),
        "method": {
            "sample_s": sample_s,
            "repeats": repeats,
            "seconds": round(time.perf_counter() - started, 1),
        },
        "calls": calls,
        "autograd": autograd,
        "decode": decode,
        "capture": capture,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / "overhead.json"
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")  # committed: end-of-file hook
    print(f"\nwrote {path}")
    plot(data, args.out_dir)
    text = "\n".join(report.overhead_section(data)) + "\n"
    (args.out_dir / "overhead.md").write_text(text)
    print(f"wrote {args.out_dir / 'overhead.md'}\n\n{text}")


if __name__ == "__main__":
    main()
