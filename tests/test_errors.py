"""Every class of bad input raises a clear TypeError/ValueError naming the argument, and writes
nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from backends import JAX_BACKENDS, MUTABLE_BACKENDS, Backend, backend_params
from reference import random_data

import scale_lib

NAN = float("nan")


def _sentinel_out(backend: Backend, shape, dtype="float32"):
    return backend.asarray(np.full(shape, NAN), dtype)


def _assert_untouched(backend: Backend, out) -> None:
    assert np.isnan(backend.to_numpy(out)).all(), "an erroring call wrote into out"


# -- not arrays ---------------------------------------------------------------------------------
@pytest.mark.parametrize("x", [[1.0, 2.0], 1.0, 3, None, "abc", np.float32(1.0)], ids=repr)
def test_x_not_an_array(x) -> None:
    with pytest.raises(TypeError, match=r"x must be an array \(numpy.ndarray, torch.Tensor"):
        scale_lib.scale(x, 2.0)


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_out_not_an_array(backend: Backend) -> None:
    x = backend.asarray(np.ones(2), "float32")
    with pytest.raises(TypeError, match=r"out must be an array.*got list"):
        scale_lib.scale(x, 2.0, out=[0.0, 0.0])


# -- factor -------------------------------------------------------------------------------------
with warnings.catch_warnings():  # newer NumPy deprecates the unit-less form that users still pass
    warnings.simplefilter("ignore", DeprecationWarning)
    _UNITLESS_TIMEDELTA = np.timedelta64(2)


@pytest.mark.parametrize(
    ("factor", "type_name"),
    [
        ("2.0", "str"),
        (None, "NoneType"),
        (1 + 2j, "complex"),
        (np.ones(1), "ndarray"),
        (True, "bool"),
        # NumPy registers timedelta64 as an integer type; a time is not a number either way.
        (np.timedelta64(3, "ms"), "timedelta64"),
        (_UNITLESS_TIMEDELTA, "timedelta64"),
        (np.datetime64("2026-01-01"), "datetime64"),
    ],
)
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_factor_not_a_real_number(backend: Backend, factor, type_name: str) -> None:
    x = backend.asarray(np.ones(3), "float32")
    with pytest.raises(TypeError, match=f"factor must be a real number .*got {type_name}"):
        backend.run(scale_lib.scale, x, factor)


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_factor_traced_under_jit(backend: Backend) -> None:
    jax = backend.mod
    x = backend.asarray(np.ones(3), "float32")
    with pytest.raises(TypeError, match="factor must be a concrete Python number"):
        jax.jit(scale_lib.scale)(x, 2.0)


# -- dtypes -------------------------------------------------------------------------------------
_BAD_DTYPES = {
    "numpy": ["int32", "int64", "bool", "complex64", "uint8"],
    "torch": ["int32", "int64", "bool", "complex64", "uint8", "float8_e4m3fn"],
    "paddle": ["int32", "int64", "bool", "complex64", "uint8"],
    "cupy": ["int32", "bool", "complex64"],
    "jax": ["int32", "bool", "complex64", "uint8"],
    "jax_jit": ["int32", "bool", "complex64"],
}


def _bad_dtype_array(backend: Backend, dtype: str):
    fw = backend.framework
    data = np.ones(5, dtype=np.complex64 if dtype == "complex64" else np.int64)
    if fw == "numpy":
        return data.astype(dtype)
    if fw == "torch":
        torch = backend.mod
        return torch.ones(5, device=backend.device).to(getattr(torch, dtype))
    if fw == "paddle":
        return backend.mod.to_tensor(data).astype(dtype)
    if fw == "cupy":
        return backend.mod.asarray(data.astype(dtype))
    jnp = backend.mod.numpy
    return backend.mod.device_put(jnp.asarray(data).astype(dtype), backend._jax_device())


@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_unsupported_dtype(backend: Backend) -> None:
    for dtype in _BAD_DTYPES[backend.framework]:
        x = _bad_dtype_array(backend, dtype)
        with pytest.raises(
            TypeError,
            match=f"x has unsupported dtype {dtype}; expected one of float16, bfloat16, float32, float64",
        ):
            backend.run(scale_lib.scale, x, 2.0)


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_out_dtype_mismatch(backend: Backend) -> None:
    x = backend.asarray(np.ones(4), "float32")
    out = _sentinel_out(backend, 4, "float64")
    with pytest.raises(TypeError, match="out and x must have the same dtype; got float64 and float32"):
        scale_lib.scale(x, 2.0, out=out)
    _assert_untouched(backend, out)


# -- shapes and layouts -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("x_shape", "out_shape"), [((4,), (5,)), ((2, 3), (3, 2)), ((6,), (2, 3)), ((), (1,))]
)
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_out_shape_mismatch(backend: Backend, x_shape, out_shape) -> None:
    x = backend.asarray(random_data(x_shape, 0), "float32")
    out = _sentinel_out(backend, out_shape)
    with pytest.raises(ValueError, match=r"out and x must have the same shape; got \("):
        scale_lib.scale(x, 2.0, out=out)
    _assert_untouched(backend, out)


def _non_contiguous_views(backend: Backend):
    """(description, view) pairs of non-contiguous views this framework can make."""
    base = backend.asarray(random_data((6, 8), 1), "float32")
    views = [("column slice", base[:, 1:5]), ("step", base[:, ::2])]
    fw = backend.framework
    if fw in ("numpy", "cupy"):
        views += [("transpose", base.T), ("negative stride", base[::-1])]
        xp = np if fw == "numpy" else backend.mod
        views.append(("broadcast", xp.broadcast_to(base[:1], (6, 8))))
    elif fw == "torch":
        views += [("transpose", base.T), ("expand", base[:1].expand(6, 8))]
    elif fw == "paddle":
        views.append(("transpose", base.T))
    return views


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_non_contiguous_x(backend: Backend) -> None:
    for _what, x in _non_contiguous_views(backend):
        with pytest.raises(
            ValueError, match=r"x must be contiguous \(row-major\); got shape .* with element strides"
        ):
            scale_lib.scale(x, 2.0)
        out = _sentinel_out(backend, tuple(x.shape))
        with pytest.raises(ValueError, match="x must be contiguous"):
            scale_lib.scale(x, 2.0, out=out)
        _assert_untouched(backend, out)


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_non_contiguous_out(backend: Backend) -> None:
    for what, view in _non_contiguous_views(backend):
        if what in ("broadcast", "expand"):
            continue  # read-only or self-overlapping: covered by test_read_only_out
        x = backend.asarray(random_data(tuple(view.shape), 2), "float32")
        with pytest.raises(ValueError, match="out must be contiguous"):
            scale_lib.scale(x, 2.0, out=view)


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_partial_overlap(backend: Backend) -> None:
    buf = backend.asarray(random_data((100,), 3), "float32")
    before = backend.to_numpy(buf)
    with pytest.raises(ValueError, match="out and x overlap in memory without being the same array"):
        scale_lib.scale(buf[1:], 2.0, out=buf[:-1])
    np.testing.assert_array_equal(backend.to_numpy(buf), before)


# -- mutability ---------------------------------------------------------------------------------
def test_read_only_out() -> None:
    x = np.ones(4, np.float32)
    out = np.full(4, NAN, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is a read-only NumPy array"):
        scale_lib.scale(x, 2.0, out=out)
    with pytest.raises(ValueError, match="out is a read-only NumPy array"):
        scale_lib.scale(x, 2.0, out=np.broadcast_to(np.float32(0), (4,)))
    assert np.isnan(out).all()


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_jax_out_rejected(backend: Backend) -> None:
    x = backend.asarray(np.ones(3), "float32")
    out = backend.asarray(np.full(3, NAN), "float32")
    with pytest.raises(
        TypeError, match="out= is not supported when x is a JAX array: JAX arrays are immutable"
    ):
        backend.run(scale_lib.scale, x, 2.0, out=out)
    assert np.isnan(np.asarray(out)).all()


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_jax_array_as_out_of_other_framework(backend: Backend) -> None:
    jnp = pytest.importorskip("jax.numpy")
    x = backend.asarray(np.ones(3), "float32")
    out = jnp.full(3, NAN, dtype=jnp.float32)
    with pytest.raises(TypeError, match="out is a JAX array; JAX arrays are immutable and cannot be written"):
        scale_lib.scale(x, 2.0, out=out)
    assert np.isnan(np.asarray(out)).all()


# -- devices ------------------------------------------------------------------------------------
def test_unsupported_device_at_the_abi(fake_device_tensor) -> None:
    x = fake_device_tensor(np.ones(4, np.float32), device_type=10)  # kDLROCM
    out = fake_device_tensor(np.ones(4, np.float32), device_type=10)
    with pytest.raises(
        ValueError, match="x is on unsupported device rocm:0; scale_lib supports cpu and cuda"
    ):
        scale_lib.lib.scale(out, x, 2.0)


_GPU_MISMATCH = [p for p in backend_params() if p.values[0].device == "cuda" and not p.values[0].is_jax]


@pytest.mark.parametrize("backend", _GPU_MISMATCH, indirect=True)
def test_device_mismatch(backend: Backend) -> None:
    x = backend.asarray(np.ones(4), "float32")
    out = np.full(4, NAN, np.float32)
    with pytest.raises(ValueError, match="out and x must be on the same device; got cpu:0 and cuda:0"):
        scale_lib.scale(x, 2.0, out=out)
    assert np.isnan(out).all()
    with pytest.raises(ValueError, match="out and x must be on the same device; got cuda:0 and cpu:0"):
        scale_lib.scale(np.ones(4, np.float32), 2.0, out=backend.asarray(np.ones(4), "float32"))


# -- the bare ABI -------------------------------------------------------------------------------
def test_abi_argument_errors() -> None:
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="Expected 3 but got 2 arguments"):
        scale_lib.lib.scale(x, x)
    with pytest.raises(TypeError, match="Mismatched type on argument #2"):
        scale_lib.lib.scale(x, x, "2")
    with pytest.raises(TypeError, match="Mismatched type on argument #1"):
        scale_lib.lib.scale(x, [1.0, 2.0, 3.0], 2.0)
