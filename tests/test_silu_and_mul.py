"""silu_and_mul (the Triton op) across frameworks x devices x dtypes x shapes, its gradients,
its errors, and the Triton build: no Triton at run time, a clear error without its kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from backends import (
    DTYPES,
    JAX_BACKENDS,
    MUTABLE_BACKENDS,
    Backend,
    backend_out_params,
    backend_params,
    check_native,
    shape_id,
)
from cases import OpCase
from hypothesis import given
from hypothesis import strategies as st
from properties import PROFILE_SETTINGS, _dtypes_for, float_arrays, shapes
from reference import assert_close, random_data

import scale_lib


# The float64 references, in one place.
def reference(x: np.ndarray) -> np.ndarray:
    d = x.shape[-1] // 2
    a, b = x[..., :d].astype(np.float64), x[..., d:].astype(np.float64)
    with np.errstate(over="ignore"):  # exp(-a) is inf for a << 0: silu(a) is -0.0
        return a / (1.0 + np.exp(-a)) * b


def grad_reference(x: np.ndarray, grad: np.ndarray) -> np.ndarray:
    d = x.shape[-1] // 2
    a, b, g = x[..., :d].astype(np.float64), x[..., d:].astype(np.float64), grad.astype(np.float64)
    s = 1.0 / (1.0 + np.exp(-a))
    return np.concatenate([g * b * s * (1.0 + a * (1.0 - s)), g * a * s], axis=-1)


def halved(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-1], shape[-1] // 2)


# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "silu_and_mul",
    ("x",),
    lambda x, out=None: scale_lib.silu_and_mul(x, out=out),
    reference=reference,
    shape=(6, 8),
    x_shape=lambda shape: (*shape[:-1], shape[-1] + shape[-1] % 2) if shape else shape,
    out_shape=halved,
    in_place=False,
    # exp, a division and two products before the final rounding
    reduction=True,
    exports={"silu_and_mul": 2, "silu_and_mul_new": 1, "silu_and_mul_backward": 3},
    hostile_abi=(
        "lib.silu_and_mul(x[:3], x[:7])",  # odd last dimension
        "lib.silu_and_mul(x, x)",  # out not halved
        "lib.silu_and_mul_backward(x[:6], x[:6], x[:2])",  # grad of the wrong shape
    ),
)


@pytest.fixture(autouse=True)
def _cuda_needs_the_triton_kernels(request: pytest.FixtureRequest) -> None:
    backend = getattr(getattr(request.node, "callspec", None), "params", {}).get("backend")
    if isinstance(backend, Backend) and backend.device not in CASE.devices:
        pytest.skip("this build has no Triton kernels (test_cuda_without_triton_kernels checks the error)")


# 1-D; one pair; d not a multiple of 16 (the general entry point); d a multiple of 16 (the
# aligned one); d across several 1024-column blocks with a tail; N-d; no rows; more rows than
# the grid's 65535 (the kernel's row loop).
SHAPES = [(2,), (1, 2), (3, 30), (4, 2048), (3, 2 * 2500), (2, 3, 64), (0, 8), (70000, 4)]
NAN = float("nan")


# [silu_and_mul_matrix.begin]
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(), indirect=["backend"])
def test_silu_and_mul_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    x = backend.asarray(random_data(shape, seed=sum(shape) + 5), dtype)
    x64 = backend.to_numpy(x)
    if out_mode == "out":
        buffer, out = backend.guarded_out(halved(shape), dtype, sentinel=NAN)
        assert backend.run(scale_lib.silu_and_mul, x, out=out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = backend.run(scale_lib.silu_and_mul, x)
        check_native(backend, result, dtype, halved(shape))
    assert_close(backend.to_numpy(result), reference(x64), dtype, reduction=True)
    np.testing.assert_array_equal(backend.to_numpy(x), x64)


# [silu_and_mul_matrix.end]


@pytest.mark.parametrize("d", [16, 24, 1024])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_every_offset(backend: Backend, dtype: str, d: int) -> None:
    # x and out at every element offset of a sentinel-filled buffer: the aligned entry point
    # only where the pointers allow it, no write outside out.
    rows = 3
    for offset in range(9):
        flat = backend.asarray(random_data((offset + rows * 2 * d,), seed=offset), dtype)
        x = flat[offset:].reshape(rows, 2 * d)
        buffer = backend.asarray(np.full(offset + rows * d + 16, NAN), dtype)
        out = buffer[offset : offset + rows * d].reshape(rows, d)
        scale_lib.silu_and_mul(x, out=out)
        got = backend.to_numpy(buffer)
        assert np.isnan(got[:offset]).all() and np.isnan(got[offset + rows * d :]).all(), offset
        assert_close(backend.to_numpy(out), reference(backend.to_numpy(x)), dtype, reduction=True)


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_extreme_values(backend: Backend) -> None:
    # silu(a) for a << 0: exp(-a) overflows to inf and a / inf is -0.0, not NaN; NaN propagates.
    x = backend.asarray(np.array([[-1e4, -100.0, 0.0, 100.0, 2.0, 3.0, -1.0, NAN]]), "float32")
    got = backend.to_numpy(scale_lib.silu_and_mul(x))
    assert not np.isnan(got[0, :3]).any() and np.isnan(got[0, 3])
    assert_close(got, reference(backend.to_numpy(x)), "float32", reduction=True)


# -- the CPU twin's accuracy: every input where there are few, and the same bits on every
# instruction set the library selects at run time (kernels/cpu_float.h) -----------------------
ULP_BOUND = {"float16": 1.0, "bfloat16": 1.0, "float32": 4.0}
SIMD_LEVELS = ["baseline", "avx2", "avx512"]


def _np_dtype(dtype: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


def ulp_error(got: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """|got - expected| in units in the last place of ``dtype`` at the float64 ``expected``; 0
    where both are NaN or where ``got`` is the infinity that ``expected`` rounds to, inf where
    only one is NaN or ``got`` is not that infinity."""
    import ml_dtypes

    info = ml_dtypes.finfo(_np_dtype(dtype))
    biggest = float(info.max)
    got = got.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        overflows = np.abs(expected) >= biggest + 2.0 ** (np.floor(np.log2(biggest)) - info.nmant - 1)
        exponent = np.floor(np.log2(np.maximum(np.abs(expected), float(info.smallest_normal))))
        error = np.abs(got - expected) / np.exp2(exponent - info.nmant)
        error = np.where(overflows, np.where(got == np.copysign(np.inf, expected), 0.0, np.inf), error)
    nan_got, nan_expected = np.isnan(got), np.isnan(expected)
    return np.where(nan_got & nan_expected, 0.0, np.where(nan_got | nan_expected, np.inf, error))


def every_gate_input(dtype: str) -> np.ndarray:
    """x of two rows: a = every 16-bit pattern (float32: a dense sweep of the bit patterns and
    random ones), with b = 1 in the first row (silu alone) and random normal b in the second."""
    if dtype == "float32":
        rng = np.random.default_rng(36)
        bits = np.concatenate(
            [np.arange(0, 2**32, 4093, dtype=np.uint64), rng.integers(0, 2**32, 2**18, dtype=np.uint64)]
        ).astype(np.uint32)
    else:
        bits = np.arange(2**16, dtype=np.uint16)
    a = bits.view(_np_dtype(dtype))
    b = np.random.default_rng(7).standard_normal(a.size).astype(_np_dtype(dtype))
    return np.stack([np.concatenate([a, np.ones_like(a)]), np.concatenate([a, b])])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_cpu_accuracy_on_every_input(dtype: str) -> None:
    x = every_gate_input(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = reference(x.astype(np.float64))
    error = ulp_error(scale_lib.silu_and_mul(x), expected, dtype)
    worst = np.unravel_index(np.argmax(error), error.shape)
    assert error.max() <= ULP_BOUND[dtype], (
        f"{error.max():.3g} ulp at a={x[worst[0], worst[1]]!r}, b={x[worst[0], x.shape[1] // 2 + worst[1]]!r}"
    )


def results_on_every_level_path() -> dict[str, np.ndarray]:
    """This op's CPU results (every gate input, and the backward) as raw bits; every op's
    bits on every instruction set: tests/test_cpu_simd.py."""
    from scale_lib.ops.silu_and_mul import _silu_and_mul_backward

    results = {}
    for dtype in ["float16", "bfloat16", "float32", "float64"]:
        with np.errstate(invalid="ignore"):  # the float32 sweep's signalling NaNs
            x = every_gate_input(dtype if dtype != "float64" else "float32").astype(_np_dtype(dtype))
        results[f"silu_and_mul {dtype}"] = scale_lib.silu_and_mul(x)
        # The backward's loops too, on rows of random data.
        r = random_data((3, 2 * 4099), seed=36).astype(_np_dtype(dtype))
        g = random_data((3, 4099), seed=37).astype(_np_dtype(dtype))
        results[f"silu_and_mul_backward {dtype}"] = _silu_and_mul_backward.call((r, g))
    return {name: np.asarray(v).view(f"u{np.asarray(v).dtype.itemsize}") for name, v in results.items()}


@pytest.mark.parametrize("level", SIMD_LEVELS)
def test_cpu_same_bits_on_every_instruction_set(level: str, tmp_path: Path) -> None:
    from test_cpu_simd import assert_same_bits_on_level

    assert_same_bits_on_level(level, __name__, "results_on_every_level_path", tmp_path)


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_refuses_odd_or_missing_gate(backend: Backend) -> None:
    for shape in [(3, 5), (7,)]:
        x = backend.asarray(random_data(shape, seed=1), "float32")
        with pytest.raises(ValueError, match=r"x's last dimension must be even .* got shape"):
            backend.run(scale_lib.silu_and_mul, x)
    x = backend.asarray(np.float32(1.0), "float32")
    with pytest.raises(ValueError, match=r"x must have at least 1 dimension"):
        backend.run(scale_lib.silu_and_mul, x)


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_refuses_wrong_out(backend: Backend) -> None:
    x = backend.asarray(random_data((4, 8), seed=1), "float32")
    with pytest.raises(ValueError, match=r"out must have x's shape with the last dimension halved"):
        scale_lib.silu_and_mul(x, out=backend.asarray(np.zeros((4, 8)), "float32"))
    with pytest.raises(TypeError, match=r"out and x must have the same dtype"):
        scale_lib.silu_and_mul(x, out=backend.asarray(np.zeros((4, 4)), "float64"))


# -- gradients --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "backend", [p for p in backend_params() if p.values[0].framework == "torch"], indirect=True
)
def test_torch_gradcheck(backend: Backend) -> None:
    torch = backend.mod
    x = backend.asarray(random_data((3, 5, 14), seed=4), "float64").requires_grad_()
    assert torch.autograd.gradcheck(scale_lib.silu_and_mul, (x,))
    torch.library.opcheck(torch.ops.scale_lib.silu_and_mul.default, (x,))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "backend",
    [p for p in backend_params() if p.values[0].framework in ("torch", "jax", "paddle")],
    indirect=True,
)
def test_gradients_match_reference(backend: Backend, dtype: str) -> None:
    x_np, g_np = random_data((4, 3, 320), 8), random_data((4, 3, 160), 10)
    x, g = backend.asarray(x_np, dtype), backend.asarray(g_np, dtype)
    if backend.framework == "jax":
        import jax

        gx = jax.grad(lambda a: (scale_lib.silu_and_mul(a) * g).sum())(x)
    elif backend.framework == "torch":
        x.requires_grad_()
        (scale_lib.silu_and_mul(x) * g).sum().backward()
        gx = x.grad
    else:
        x.stop_gradient = False
        (scale_lib.silu_and_mul(x) * g).sum().backward()
        gx = x.grad
    assert_close(
        backend.to_numpy(gx), grad_reference(backend.to_numpy(x), backend.to_numpy(g)), dtype, reduction=True
    )


@pytest.mark.parametrize(
    "backend", [p for p in JAX_BACKENDS if p.values[0].framework == "jax"], indirect=True
)
def test_jax_vmap(backend: Backend) -> None:
    import jax

    xs = backend.asarray(random_data((5, 4, 96), 11), "float64")
    batched = jax.vmap(scale_lib.silu_and_mul)(xs)
    assert_close(np.asarray(batched), reference(np.asarray(xs)), "float64", reduction=True)
    hlo = jax.jit(jax.vmap(scale_lib.silu_and_mul)).lower(xs).as_text()
    assert hlo.count("@scale_lib.silu_and_mul") == 1 and "while" not in hlo


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_silu_and_mul_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(min_dims=1), label="shape")
    shape = (*shape[:-1], 2 * shape[-1])
    # |a| up to 60: exp(-a) within float32, so every dtype's reference is finite
    x = backend.asarray(data.draw(float_arrays(shape, dtype, max_abs=60.0), label="x"), dtype)
    stored = backend.to_numpy(x).copy()
    result = backend.run(scale_lib.silu_and_mul, x)
    check_native(backend, result, dtype, halved(shape))
    assert_close(backend.to_numpy(result), reference(stored), dtype, reduction=True)
    np.testing.assert_array_equal(backend.to_numpy(x), stored)


# -- the Triton build ---------------------------------------------------------------------------
# Run in a fresh interpreter where `import triton` fails: the library must not need it.
_WITHOUT_TRITON = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    import no_triton
    no_triton.install()
    import numpy as np
    import scale_lib

    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
    print("result", scale_lib.silu_and_mul(x).tolist())
    if sys.argv[1] == "cuda":  # CuPy: PyTorch's CUDA builds import Triton themselves
        import cupy
        y = scale_lib.silu_and_mul(cupy.asarray(x))
        print("result", cupy.asnumpy(y).tolist())
    assert "triton" not in sys.modules
    """
)

# Every framework's CUDA path in a process where `import triton` fails: PyTorch eager, autograd,
# torch.compile(fullgraph=True) (the aot_eager backend: Inductor itself generates Triton), CUDA
# graph capture and replay; JAX jit, vmap and grad; CuPy.
_CUDA_WITHOUT_TRITON = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import no_triton
    no_triton.install()
    import numpy as np
    import scale_lib
    from test_silu_and_mul import grad_reference, reference

    rng = np.random.default_rng(0)
    x64, g64 = rng.standard_normal((64, 2 * 1000)), rng.standard_normal((64, 1000))

    def check(name, got, expected):
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected, rtol=1e-5, atol=1e-6)
        print("ok", name)

    import torch
    x = torch.tensor(x64, dtype=torch.float32, device="cuda", requires_grad=True)
    g = torch.tensor(g64, dtype=torch.float32, device="cuda")
    check("torch eager", scale_lib.silu_and_mul(x).detach().cpu(), reference(x64))
    (scale_lib.silu_and_mul(x) * g).sum().backward()
    check("torch autograd", x.grad.cpu(), grad_reference(x64, g64))
    x.grad = None
    f = torch.compile(lambda v: scale_lib.silu_and_mul(v) * 2, fullgraph=True, backend="aot_eager")
    (f(x) * g).sum().backward()
    check("torch.compile(fullgraph=True)", x.grad.cpu(), 2 * grad_reference(x64, g64))
    static_x = x.detach().clone()
    static_out = torch.empty(64, 1000, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        scale_lib.silu_and_mul(static_x, out=static_out)  # warm-up: loads the kernel
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scale_lib.silu_and_mul(static_x, out=static_out)
    static_x.copy_(torch.tensor(-x64, dtype=torch.float32, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    check("CUDA graph replay", static_out.cpu(), reference(-x64))

    import jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    xj = jax.device_put(jnp.asarray(x64), jax.devices("gpu")[0])
    gj = jax.device_put(jnp.asarray(g64), jax.devices("gpu")[0])
    check("jax.jit", jax.jit(scale_lib.silu_and_mul)(xj), reference(x64))
    batched = jax.vmap(scale_lib.silu_and_mul)(xj.reshape(8, 8, 2000))
    check("jax.vmap", batched, reference(x64).reshape(8, 8, 1000))
    grad = jax.jit(jax.grad(lambda v: (scale_lib.silu_and_mul(v) * gj).sum()))(xj)
    check("jax.grad", grad, grad_reference(x64, g64))

    import cupy
    check("cupy", cupy.asnumpy(scale_lib.silu_and_mul(cupy.asarray(x64))), reference(x64))
    assert "triton" not in sys.modules, "something imported triton"
    print("triton was never imported")
    """
)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_runs_without_triton(device: str) -> None:
    if device == "cuda":
        Backend("cupy", "cuda").skip_if_unavailable()
        if not scale_lib.build_info()["triton"]:
            pytest.skip("this build has no Triton kernels (test_cuda_without_triton_kernels)")
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TRITON, device, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert run.returncode == 0, run.stderr
    results = [
        json.loads(line[len("result ") :]) for line in run.stdout.splitlines() if line.startswith("result ")
    ]
    assert len(results) == (2 if device == "cuda" else 1), run.stdout
    expected = reference(np.arange(8, dtype=np.float32).reshape(2, 4) / 4)
    for result in results:
        np.testing.assert_allclose(result, expected, rtol=1e-6)


@pytest.mark.gpu
def test_every_framework_on_cuda_without_triton() -> None:
    for framework in ("torch", "jax", "cupy"):
        Backend(framework, "cuda").skip_if_unavailable()
    if not scale_lib.build_info()["triton"]:
        pytest.skip("this build has no Triton kernels (test_cuda_without_triton_kernels)")
    run = subprocess.run(
        [sys.executable, "-c", _CUDA_WITHOUT_TRITON, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
    )
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert "triton was never imported" in run.stdout, run.stdout
    print(run.stdout)


@pytest.mark.gpu
def test_cuda_without_triton_kernels() -> None:
    # A CUDA build without the Triton kernels keeps the CPU twin and names the op for CUDA arrays.
    if scale_lib.build_info()["triton"] or not scale_lib.cuda_available():
        pytest.skip("this build has the Triton kernels (or no CUDA)")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    with pytest.raises(ValueError, match=r"silu_and_mul has no CUDA kernel in this build .* Triton"):
        scale_lib.silu_and_mul(torch.ones(2, 4, device="cuda"))


def test_build_info_names_the_triton_release() -> None:
    info = scale_lib.build_info()
    assert isinstance(info["triton"], str)
    if not info["cuda"]:
        assert info["triton"] == "", "a CPU-only build compiles no Triton kernels"


# -- distributed arrays: checks the sharding suites run (test_distributed_jax.py, 4 host devices
# or 2 GPUs; test_distributed_torch.py, 2 ranks), with their helpers ----------------------------
def silu_and_mul_jax_rows_sharded() -> None:
    # An output with a last dimension of its own, (..., d) from (..., 2d): rows stay sharded, the
    # last dimensions whole; the backward too; no all-gather in the compiled HLO.
    import jax
    from test_distributed_jax import _assert_spec, _close, _compiled, _data, _mesh, _no_gather, _put

    mesh = _mesh(("b", "s"))
    x = _data(4, 6, 32)
    xs = _put(x, mesh, "b", "s", None)
    out, hlo = _compiled(scale_lib.silu_and_mul, xs)
    _no_gather(hlo)
    _assert_spec(out, mesh, "b", "s", None)
    _close(out, scale_lib.silu_and_mul(x))

    def loss(a):
        return (scale_lib.silu_and_mul(a) ** 2).sum()

    grad, grad_hlo = _compiled(jax.grad(loss), xs)
    _no_gather(grad_hlo)
    _assert_spec(grad, mesh, "b", "s", None)
    _close(grad, jax.grad(loss)(x), rtol=1e-4, atol=1e-5)


def silu_and_mul_dtensor_keeps_row_shards(mesh, device) -> None:
    # Row shards stay where they are, forward and backward, with no communication; a sharded
    # last dimension is gathered.
    from test_distributed_torch import _assert_close, _data, _no_comm
    from torch.distributed.tensor import Shard, distribute_tensor

    x, g = _data(4, 6, 16, device=device), _data(4, 6, 8, seed=2, device=device)
    xr = x.clone().requires_grad_()
    scale_lib.silu_and_mul(xr).backward(g)
    for p in (Shard(0), Shard(1)):
        dx = distribute_tensor(x, mesh, [p]).requires_grad_()
        dg = distribute_tensor(g, mesh, [p])
        with _no_comm() as comm:
            out = scale_lib.silu_and_mul(dx)
            out.backward(dg)
        assert comm.get_total_counts() == 0, (p, comm.get_comm_counts())
        assert out.placements == (p,) and dx.grad.placements == (p,), (out.placements, dx.grad.placements)
        _assert_close(out, scale_lib.silu_and_mul(x))
        _assert_close(dx.grad, xr.grad)
    out = scale_lib.silu_and_mul(distribute_tensor(x, mesh, [Shard(2)]))
    assert out.placements != (Shard(2),), out.placements
    _assert_close(out, scale_lib.silu_and_mul(x))


SHARDED_JAX_CHECKS = (silu_and_mul_jax_rows_sharded,)
SHARDED_TORCH_CHECKS = (silu_and_mul_dtensor_keeps_row_shards,)
