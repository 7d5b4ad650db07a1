"""softmax: a framework x device x dtype x shape matrix against a float64 reference, gradients
and a property test. On CUDA the shapes cover both kernels: the one NVRTC specialises on the row
length (rows of a warp or of a block, 16-byte loads or not) and the ahead-of-time one (rows
longer than 32768, and the whole suite where there is no NVRTC). Then each CUDA kernel alone
with sentinel-filled outputs, and the runtime-compiled one's paths: capture, compile errors,
no NVRTC, torch.compile and jax.jit. The cache is tested in tests/test_nvrtc.py."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from backends import ALL_BACKENDS, DTYPES, Backend, backend_out_params, backend_params, check_native, shape_id
from cases import OpCase, built_devices
from hypothesis import given
from hypothesis import strategies as st
from properties import PROFILE_SETTINGS, _dtypes_for, float_arrays, shapes
from reference import random_data

import scale_lib
from scale_lib import _nvrtc
from scale_lib.ops import OPS


# ---- What the author edits: the float64 reference and the tolerances, nothing else. --------
def reference(x: np.ndarray) -> np.ndarray:
    """softmax in float64 over the last dimension, from the float64 values of the inputs as stored."""
    if x.size == 0:
        return x.copy()
    shifted = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return shifted / np.sum(shifted, axis=-1, keepdims=True)


# (rtol, atol) of the results per dtype, against the reference. These allow a few roundings in
# the compute type (float32 for 16-bit inputs); math with exp or tanh needs about 1e-6 relative
# in float32.
TOLERANCES = {
    "float16": (2e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (3e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}
MAX_ABS = 16.0  # inputs of the property test are within [-MAX_ABS, MAX_ABS]
# Example values of the scalar arguments.
# ----------------------------------------------------------------------------------------------

DEVICES = built_devices(next(spec for spec in OPS if spec.name == "softmax"))
BACKENDS = tuple(b for b in ALL_BACKENDS if b.device in DEVICES)
# Row lengths: a warp per row (7, 255, 1024 with 16-byte loads), a block per row (4097, 8192),
# past the runtime kernel's limit (40000, 2**20 + 3), and empty arrays.
SHAPES = [(0,), (3, 0), (1,), (7,), (255,), (257,), (4097,), (2**20 + 3,), (3, 5), (2, 3, 4)]
SHAPES += [(33, 1024), (5, 8192), (2, 40000)]
NAN = float("nan")
DIFFERENTIABLE = [b for b in BACKENDS if b.framework in ("torch", "jax", "paddle")]

# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "softmax",
    ("x",),
    lambda x, out=None: scale_lib.softmax(x, out=out),
    reference=lambda x: reference(x),
    exports={"softmax": 2, "softmax_ahead_of_time": 2},
)


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    rtol, atol = TOLERANCES[dtype]
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(BACKENDS), indirect=["backend"])
def test_softmax_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    x = backend.asarray(random_data(shape, seed=1 + sum(shape)), dtype)
    x64 = backend.to_numpy(x)
    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        assert backend.run(scale_lib.softmax, x, out=out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = backend.run(scale_lib.softmax, x)
        check_native(backend, result, dtype, shape)
    assert_close(backend.to_numpy(result), reference(x64), dtype)
    np.testing.assert_array_equal(backend.to_numpy(x), x64)


@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
def test_softmax_rejects_bad_input(backend: Backend) -> None:
    good = [backend.asarray(np.ones((2, 3)), "float32") for _ in range(1)]
    with pytest.raises(TypeError, match="x has unsupported dtype int32"):
        backend.run(scale_lib.softmax, backend.asarray(np.ones((2, 3)), "int32"), *good[1:])
    with pytest.raises(TypeError, match="x must be an array"):
        scale_lib.softmax([1.0, 2.0], *good[1:])


@pytest.mark.parametrize("backend", backend_params(DIFFERENTIABLE), indirect=True)
def test_softmax_gradients(backend: Backend) -> None:
    """The op's vjp against central differences of the float64 reference."""
    shape = (3, 4)
    data = [random_data(shape, seed=10 + i) for i in range(1)]
    weights = random_data(shape, seed=20)  # the gradient flowing in
    arrays = [backend.asarray(d, "float64") for d in data]
    grad_in = backend.asarray(weights, "float64")
    if backend.framework == "torch":
        for a in arrays:
            a.requires_grad_()
        scale_lib.softmax(*arrays).backward(grad_in)
        grads = [a.grad for a in arrays]
    elif backend.framework == "jax":
        import jax

        _, pullback = jax.vjp(lambda *a: scale_lib.softmax(*a), *arrays)
        grads = list(pullback(grad_in))
    else:
        for a in arrays:
            a.stop_gradient = False
        scale_lib.softmax(*arrays).backward(grad_in)
        grads = [a.grad for a in arrays]
    h = 1e-6
    for i, g in enumerate(grads):
        expected = np.empty(shape)
        for j in np.ndindex(*shape):
            up, down = [a.copy() for a in data], [a.copy() for a in data]
            up[i][j] += h
            down[i][j] -= h
            change = reference(*up) - reference(*down)
            expected[j] = np.sum(change * weights) / (2 * h)
        np.testing.assert_allclose(backend.to_numpy(g), expected, rtol=1e-5, atol=1e-7, err_msg=f"{i}")


# -- the backward op, softmax_backward(y, grad) = y * (grad - sum(grad * y)) -------------------
def backward_reference(y: np.ndarray, grad: np.ndarray) -> np.ndarray:
    return y * (grad - np.sum(grad * y, axis=-1, keepdims=True))


# Rows whose 16-bit values the CPU twin converts whole (up to 4096) or a chunk at a time, with
# and without a tail past the 16 lanes; the CUDA kernel's rows shorter and longer than a block.
BACKWARD_SHAPES = [(1,), (7,), (3, 17), (2, 256), (2, 4096), (2, 4097), (2, 9000)]
# Against the float64 reference of the stored values: the row's sum in the compute type, then two
# roundings; in units of the row's largest |grad| (the result's scale).
BACKWARD_TOLERANCES = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5, "float64": 1e-13}


@pytest.mark.parametrize("shape", BACKWARD_SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(BACKENDS), indirect=["backend"])
def test_softmax_backward_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    from scale_lib.ops.softmax import _softmax_backward

    y = backend.run(scale_lib.softmax, backend.asarray(random_data(shape, seed=2) * 3, dtype))
    grad = backend.asarray(random_data(shape, seed=3), dtype)
    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        assert _softmax_backward.call((y, grad), (), out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = _softmax_backward.call((y, grad))
        check_native(backend, result, dtype, shape)
    y64, grad64 = backend.to_numpy(y), backend.to_numpy(grad)
    scale = np.max(np.abs(grad64), axis=-1, keepdims=True)
    atol = BACKWARD_TOLERANCES[dtype] * scale
    error = np.abs(backend.to_numpy(result) - backward_reference(y64, grad64))
    assert (error <= atol).all(), f"{error.max():.3g} off (allowed {atol.min():.3g}) in {shape} {dtype}"


def results_on_every_level_path() -> dict[str, np.ndarray]:
    """The backward's CPU results as raw bits, on rows converted whole and a chunk at a time (the
    forward is among every public op's: tests/test_cpu_simd.py)."""
    from test_cpu_simd import DTYPES as SIMD_DTYPES
    from test_cpu_simd import _np_dtype

    from scale_lib.ops.softmax import _softmax_backward

    results = {}
    for dtype in SIMD_DTYPES:
        for shape in [(3, 4099), (2, 9001)]:
            y = scale_lib.softmax(random_data(shape, seed=4).astype(_np_dtype(dtype)))
            grad = random_data(shape, seed=5).astype(_np_dtype(dtype))
            result = np.asarray(_softmax_backward.call((y, grad)))
            results[f"softmax_backward {dtype} {shape}"] = result.view(f"u{result.dtype.itemsize}")
    return results


@pytest.mark.parametrize("level", ["baseline", "avx2", "avx512"])
def test_softmax_backward_same_bits_on_every_instruction_set(level: str, tmp_path) -> None:
    from test_cpu_simd import assert_same_bits_on_level

    assert_same_bits_on_level(level, __name__, "results_on_every_level_path", tmp_path)


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_softmax_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(min_dims=1), label="shape")
    values = [
        data.draw(float_arrays(shape, dtype, max_abs=MAX_ABS, min_abs=2.0**-8), label=name)
        for name in CASE.arrays
    ]
    arrays = [backend.asarray(v, dtype) for v in values]
    stored = [backend.to_numpy(a) for a in arrays]
    result = backend.run(scale_lib.softmax, *arrays)
    check_native(backend, result, dtype, shape)
    assert_close(backend.to_numpy(result), reference(*stored), dtype)
    for a, before in zip(arrays, stored, strict=True):
        np.testing.assert_array_equal(backend.to_numpy(a), before)
    assert math.prod(shape) == backend.to_numpy(result).size


# -- the two CUDA kernels, the NVRTC one's compile paths (python/scale_lib/_nvrtc.py) ---------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("cols", [1, 31, 32, 100, 1000, 1024, 1025, 4096, 8191, 16384, 32768, 32769])
def test_softmax_kernels_on_gpu(kernel_cache, dtype: str, cols: int) -> None:
    """Every specialisation family (a warp or a block per row, 16-byte loads or not, a partial
    last chunk) and the ahead-of-time kernel past 32768, with a sentinel-filled output; the
    row count is odd so a block's last rows are idle."""
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    rows = 7
    data = np.random.default_rng(cols).standard_normal((rows, cols)) * 4
    x = torch.tensor(data, device="cuda").to(getattr(torch, dtype))
    expected = reference(x.double().cpu().numpy())
    rtol, atol = TOLERANCES[dtype]
    # The op (runtime-compiled where NVRTC is present), then the ahead-of-time kernel alone.
    for run in (lambda o: scale_lib.softmax(x, out=o), lambda o: scale_lib.lib.softmax_ahead_of_time(o, x)):
        out = torch.full((rows + 1, cols), float("nan"), device="cuda", dtype=x.dtype)
        run(out[:rows])
        result = out.double().cpu().numpy()
        np.testing.assert_allclose(result[:rows], expected, rtol=rtol, atol=atol)
        assert np.isnan(result[rows]).all(), "stray write"


@pytest.mark.gpu
def test_softmax_first_call_during_capture_asks_for_a_warm_up(kernel_cache) -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    if _nvrtc.nvrtc() is None:
        pytest.skip("no NVRTC: softmax runs its ahead-of-time kernel")
    import torch

    x = torch.randn(5, 777, device="cuda")  # a row length no other test uses
    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()

    def capture() -> None:
        with torch.cuda.graph(graph, stream=side):
            x.mul_(1.0)  # the graph is not empty
            scale_lib.softmax(x)

    with pytest.raises(RuntimeError, match=r"during CUDA graph capture.*warm-up"):
        capture()
    # After a warm-up call the same call captures and replays.
    torch.cuda.synchronize()
    scale_lib.softmax(x)
    static_out = torch.empty_like(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        scale_lib.softmax(x, out=static_out)
    x.copy_(torch.randn(5, 777, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    np.testing.assert_allclose(
        static_out.cpu().numpy(), reference(x.double().cpu().numpy()), rtol=3e-5, atol=1e-6
    )


@pytest.mark.gpu
def test_softmax_compile_error_through_the_op(tmp_path) -> None:
    """A kernel source NVRTC rejects: the op raises NvrtcError with NVRTC's log. In a fresh
    process, whose kernel table holds nothing yet (another test may have loaded this key)."""
    Backend("torch", "cuda").skip_if_unavailable()
    if _nvrtc.nvrtc() is None:
        pytest.skip("no NVRTC")
    broken = tmp_path / "kernels"
    broken.mkdir()
    source = (_nvrtc.SOURCES / "softmax.cu").read_text()
    assert "typedef float Compute;" in source
    (broken / "softmax.cu").write_text(source.replace("typedef float Compute;", "typedef flaot Compute;"))
    code = textwrap.dedent(f"""
        import pathlib, re, torch, scale_lib
        from scale_lib import _nvrtc
        _nvrtc.SOURCES = pathlib.Path({str(broken)!r})
        x = torch.randn(3, 779, device="cuda", dtype=torch.float16)
        try:
            scale_lib.softmax(x)
        except scale_lib.NvrtcError as err:
            print("ok" if re.search(r"(?s)could not compile.*flaot", str(err)) else str(err))
        else:
            print("no error")
    """)
    env = {**os.environ, "SCALE_LIB_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().splitlines()[-1:] == ["ok"], run.stdout + run.stderr


@pytest.mark.gpu
def test_softmax_on_gpu_without_nvrtc(tmp_path) -> None:
    """Without NVRTC the ahead-of-time kernel gives the same results, and a first call can be
    captured into a CUDA graph."""
    Backend("torch", "cuda").skip_if_unavailable()
    code = textwrap.dedent("""
        import numpy as np, torch, scale_lib
        for cols in (7, 1000, 4096):
            x = torch.randn(9, cols, device="cuda", dtype=torch.float64)
            y = scale_lib.softmax(x).cpu().numpy()
            e = np.exp(x.cpu().numpy() - x.cpu().numpy().max(-1, keepdims=True))
            np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-12, atol=1e-14)
        # Nothing to load: a first call may be captured.
        x = torch.randn(3, 785, device="cuda")
        out = torch.empty_like(x)
        graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.graph(graph, stream=side):
            scale_lib.softmax(x, out=out)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, torch.softmax(x, dim=-1))
        print("ok")
    """)
    env = {**os.environ, "SCALE_LIB_NVRTC": "0", "SCALE_LIB_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


@pytest.mark.gpu
def test_softmax_compiles_under_torch_compile(kernel_cache) -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    torch._dynamo.reset()
    f = torch.compile(lambda v: scale_lib.softmax(v) * 2, fullgraph=True)
    x = torch.randn(6, 781, device="cuda")  # a new key: compiled at the first run
    np.testing.assert_allclose(
        f(x).cpu().numpy(), 2 * reference(x.double().cpu().numpy()), rtol=3e-5, atol=1e-6
    )


@pytest.mark.gpu
def test_softmax_compiles_under_jax_jit(kernel_cache) -> None:
    Backend("jax", "cuda").skip_if_unavailable()
    import jax

    x = jax.device_put(
        np.random.default_rng(0).standard_normal((6, 783)).astype(np.float32), jax.devices("gpu")[0]
    )
    y = jax.jit(lambda v: scale_lib.softmax(v) * 2)(x)
    np.testing.assert_allclose(
        np.asarray(y), 2 * reference(np.asarray(x, dtype=np.float64)), rtol=3e-5, atol=1e-6
    )


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [100, 4096, 40000])
def test_softmax_special_values_on_gpu(kernel_cache, cols: int) -> None:
    """NaN and +inf make their row NaN, -inf elements get 0, in both kernels, like NumPy."""
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    data = np.random.default_rng(cols).standard_normal((4, cols))
    data[0, 3] = np.nan
    data[1, 5] = np.inf
    data[2, ::3] = -np.inf
    with np.errstate(invalid="ignore"):
        expected = reference(data)
    x = torch.tensor(data, device="cuda", dtype=torch.float32)
    for run in (lambda o: scale_lib.softmax(x, out=o), lambda o: scale_lib.lib.softmax_ahead_of_time(o, x)):
        out = torch.empty_like(x)
        run(out)
        np.testing.assert_allclose(out.double().cpu().numpy(), expected, rtol=3e-5, atol=1e-6, equal_nan=True)


def test_softmax_special_values_on_cpu() -> None:
    """The CPU twin treats NaN, +inf and -inf as the CUDA kernels do."""
    data = np.random.default_rng(1).standard_normal((4, 100))
    data[0, 3] = np.nan
    data[1, 5] = np.inf
    data[2, ::3] = -np.inf
    with np.errstate(invalid="ignore"):
        expected = reference(data)
    np.testing.assert_allclose(scale_lib.softmax(data), expected, rtol=1e-12, atol=1e-14, equal_nan=True)


def test_softmax_without_nvrtc(tmp_path) -> None:
    """A process with no NVRTC: softmax runs its other kernels."""
    code = textwrap.dedent("""
        import numpy as np, scale_lib
        from scale_lib import _nvrtc
        assert _nvrtc.nvrtc() is None
        x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(scale_lib.softmax(x), e / e.sum(-1, keepdims=True), rtol=1e-6)
        print("ok")
    """)
    env = {**os.environ, "SCALE_LIB_NVRTC": "0", "SCALE_LIB_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
