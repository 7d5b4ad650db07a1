"""scale across frameworks x devices x dtypes x shapes, against a NumPy float64 reference."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from backends import (
    ALL_BACKENDS,
    DTYPES,
    LARGE_N,
    MUTABLE_BACKENDS,
    Backend,
    backend_out_params,
    backend_params,
    check_native,
    marked_ones,
    numpy_dtype,
    shape_id,
)
from cases import OpCase
from hypothesis import given
from hypothesis import strategies as st
from properties import (
    ALL,
    PROFILE_SETTINGS,
    _call_with_out,
    _check_guards,
    _draw_layout,
    _dtypes_for,
    _ieee_overflow,
    _make_input,
    _snapshot,
    float_arrays,
    scalars,
    shapes,
)
from reference import TOLERANCES, assert_close, random_data, scale_reference

import scale_lib

# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
# [scale_case.begin]
CASE = OpCase(
    "scale",
    ("x",),
    lambda x, out=None: scale_lib.scale(x, 2.0, out=out),
    reference=lambda x: x * 2.0,
    exports={"scale": 3},
    hostile_abi=("lib.scale(x, x[:4], 1.0)",),
)
# [scale_case.end]

# 0-d; zero-size; 1; odd; around a warp/block (256 threads); around one vectorised CUDA block
# (256 threads x 4 vectors x 4 float32 = 4096); large and odd (a vector tail); N-d.
SHAPES = [
    (),
    (0,),
    (1,),
    (7,),
    (255,),
    (256,),
    (257,),
    (4095,),
    (4096,),
    (4097,),
    (2**20 + 3,),
    (4, 0),
    (3, 5),
    (2, 3, 4),
    (33, 65, 17),
]
FACTOR = -1.3
NAN = float("nan")


# [matrix.begin]
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(), indirect=["backend"])
def test_scale_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    x = backend.asarray(random_data(shape, seed=len(shape) * 1000 + sum(shape)), dtype)
    x_before = backend.to_numpy(x)
    expected = scale_reference(x_before, FACTOR)

    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        result = backend.run(scale_lib.scale, x, FACTOR, out=out)
        assert result is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
    else:
        result = backend.run(scale_lib.scale, x, FACTOR)
        check_native(backend, result, dtype, shape)

    assert_close(backend.to_numpy(result), expected, dtype)  # NaN sentinel left = missing write
    np.testing.assert_array_equal(backend.to_numpy(x), x_before)  # input untouched


# [matrix.end]


@pytest.mark.parametrize("factor", [0, 1, -1, 3, 0.5, 1e-3, np.float32(0.25), np.float64(-2.5)])
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_scale_factor_types(backend: Backend, factor) -> None:
    x = backend.asarray(random_data((1000,), seed=1), "float32")
    result = backend.run(scale_lib.scale, x, factor)
    assert_close(backend.to_numpy(result), scale_reference(backend.to_numpy(x), float(factor)), "float32")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_scale_propagates_ieee_specials(backend: Backend, dtype: str) -> None:
    data = np.array([NAN, math.inf, -math.inf, 0.0, -0.0, 1.0] * 50)
    x = backend.asarray(data, dtype)
    result = backend.to_numpy(backend.run(scale_lib.scale, x, -2.0))
    expected = data * -2.0
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(result[finite], expected[finite])
    np.testing.assert_array_equal(np.signbit(result[finite]), np.signbit(expected[finite]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_scale_in_place(backend: Backend, dtype: str) -> None:
    x = backend.asarray(random_data((4099,), seed=2), dtype)
    expected = scale_reference(backend.to_numpy(x), 3.0)
    assert scale_lib.scale(x, 3.0, out=x) is x
    assert_close(backend.to_numpy(x), expected, dtype)


@pytest.mark.parametrize("n", [1, 257, 4097, 100_003])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_scale_unaligned_views(backend: Backend, dtype: str, n: int) -> None:
    # Views one element into a buffer: not 16-byte aligned, non-zero data offset. The CUDA
    # kernel takes its scalar path.
    source = backend.asarray(random_data((n + 1,), seed=3), dtype)
    x = source[1:]
    _, out = backend.guarded_out((n + 1,), dtype, sentinel=NAN, guard=1)
    out = out[1:]
    expected = scale_reference(backend.to_numpy(x), 0.75)
    scale_lib.scale(x, 0.75, out=out)
    assert_close(backend.to_numpy(out), expected, dtype)


def test_scale_read_only_numpy_inputs() -> None:
    x = np.arange(10, dtype=np.float32)
    x.flags.writeable = False
    np.testing.assert_array_equal(scale_lib.scale(x, 2.0), np.arange(10) * 2.0)
    import ml_dtypes

    xb = np.arange(10).astype(ml_dtypes.bfloat16)
    xb.flags.writeable = False
    np.testing.assert_array_equal(scale_lib.scale(xb, 2.0).astype(np.float64), np.arange(10) * 2.0)


def test_scale_numpy_view_of_jax_array() -> None:
    jnp = pytest.importorskip("jax.numpy")
    x = np.asarray(jnp.arange(10, dtype=jnp.float32))  # read-only, JAX-owned memory
    assert not x.flags.writeable
    np.testing.assert_array_equal(scale_lib.scale(x, 2.0), np.arange(10) * 2.0)


_PAIRS = [
    ("numpy", "torch", "cpu"),
    ("torch", "numpy", "cpu"),
    ("paddle", "numpy", "cpu"),
    ("numpy", "paddle", "cpu"),
    ("torch", "cupy", "cuda"),
    ("cupy", "torch", "cuda"),
]


@pytest.mark.parametrize(
    ("x_fw", "out_fw", "device"),
    [pytest.param(*p, id="-".join(p), marks=[pytest.mark.gpu] if p[2] == "cuda" else []) for p in _PAIRS],
)
def test_scale_out_from_another_framework(x_fw: str, out_fw: str, device: str) -> None:
    xb, ob = Backend(x_fw, device), Backend(out_fw, device)
    xb.skip_if_unavailable()
    ob.skip_if_unavailable()
    x = xb.asarray(random_data((1000,), seed=4), "float32")
    out = ob.asarray(np.full(1000, NAN), "float32")
    assert scale_lib.scale(x, 2.0, out=out) is out
    ob.synchronize()
    assert_close(ob.to_numpy(out), scale_reference(xb.to_numpy(x), 2.0), "float32")


@pytest.mark.parametrize("backend", [p for p in backend_params() if p.values[0].is_jax], indirect=True)
def test_jax_targets_registered_once(backend: Backend) -> None:
    jax_tvm_ffi = pytest.importorskip("jax_tvm_ffi")
    x = backend.asarray(np.ones(8), "float32")
    backend.run(scale_lib.scale, x, 2.0)
    count = jax_tvm_ffi.registered_count()
    threads = [threading.Thread(target=backend.run, args=(scale_lib.scale, x, 3.0)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # A fresh copy of the package (as after sys.modules was cleared) must not register again.
    import importlib
    import sys

    saved = {k: v for k, v in sys.modules.items() if k == "scale_lib" or k.startswith("scale_lib.")}
    for k in saved:
        del sys.modules[k]
    try:
        fresh = importlib.import_module("scale_lib")
        backend.run(fresh.scale, x, 4.0)
    finally:
        sys.modules.update(saved)
    assert jax_tvm_ffi.registered_count() == count


def test_every_backend_is_listed() -> None:
    # Guards the matrix itself: every framework appears on every device it supports.
    ids = {b.id for b in ALL_BACKENDS}
    assert {
        "numpy-cpu",
        "torch-cpu",
        "torch-cuda",
        "paddle-cpu",
        "cupy-cuda",
        "jax-cpu",
        "jax-cuda",
        "jax_jit-cpu",
        "jax_jit-cuda",
    } <= ids
    assert numpy_dtype("bfloat16").itemsize == 2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "backend",
    [p for p in backend_params() if p.values[0].framework in ("numpy", "torch", "jax", "cupy")],
    indirect=True,
)
def test_16bit_rounding_is_exact(backend: Backend, dtype: str) -> None:
    # Every 16-bit pattern scaled by 1 comes back unchanged (NaNs stay NaN), and products round
    # to nearest-even exactly as float32 math followed by one rounding does.
    np_errors = np.errstate(invalid="ignore", over="ignore")  # casting the NaN and inf patterns
    np_errors.__enter__()
    bits = np.arange(2**16, dtype=np.uint16).view(numpy_dtype(dtype))
    x = backend.asarray(bits.astype(np.float64), dtype)
    same = backend.to_numpy(backend.run(scale_lib.scale, x, 1.0))
    original = bits.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(same), np.isnan(original))
    np.testing.assert_array_equal(same[~np.isnan(same)], original[~np.isnan(original)])
    finite = bits[np.isfinite(bits.astype(np.float32))]
    expected = (finite.astype(np.float32) * np.float32(1.37)).astype(numpy_dtype(dtype)).astype(np.float64)
    result = backend.to_numpy(
        backend.run(scale_lib.scale, backend.asarray(finite.astype(np.float64), dtype), 1.37)
    )
    np_errors.__exit__(None, None, None)
    np.testing.assert_array_equal(result, expected)


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
@pytest.mark.parametrize("backend", ALL, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_scale_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(), label="shape")
    values = data.draw(float_arrays(shape, dtype, specials=(NAN, math.inf, -math.inf, -0.0)), label="x")
    factor = data.draw(scalars(dtype), label="factor")
    factor_type = data.draw(st.sampled_from([float, np.float64]), label="factor_type")
    (offset,), mode, out_offset = _draw_layout(data, backend)

    x, x_buffer = _make_input(backend, values, dtype, offset)
    x_before = _snapshot(backend, x)
    result, guard = _call_with_out(
        backend, scale_lib.scale, (x, factor_type(factor)), [x], shape, dtype, mode, out_offset
    )
    if guard is not None:
        _check_guards(backend, guard, out_offset, math.prod(shape))
    if mode != "inplace":
        np.testing.assert_array_equal(backend.to_numpy(x), x_before, err_msg="input modified")
    if x_buffer is not None:
        _check_guards(backend, x_buffer, offset, math.prod(shape))  # padding untouched

    rtol = TOLERANCES[dtype][0]
    with np.errstate(invalid="ignore", over="ignore"):
        expected = x_before * np.float64(factor)
    expected, compared = _ieee_overflow(expected, dtype, rtol)
    actual = backend.to_numpy(result)
    assert_close(actual[compared], expected[compared], dtype)
    zeros = (expected == 0) & compared  # exact zeros keep the IEEE sign (x * -0.0, -x * 0.0 ...)
    np.testing.assert_array_equal(
        np.signbit(actual[zeros]), np.signbit(expected[zeros]), err_msg="sign of zero"
    )


# -- more than 2^31 elements: 64-bit indexing through grid sizes ----------------------------
@pytest.mark.gpu
@pytest.mark.large
def test_large_inputs(large_torch) -> None:
    x = marked_ones(large_torch, LARGE_N)
    y = scale_lib.scale(x, 2.0)
    assert bool(large_torch.equal(y, x * 2))
    y = scale_lib.scale(x[1:], 2.0)  # unaligned: the scalar kernel
    assert bool(large_torch.equal(y, x[1:] * 2))
