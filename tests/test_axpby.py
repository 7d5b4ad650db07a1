"""axpby (the embedded-CUBIN op) across frameworks x devices x dtypes x shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from backends import (
    DTYPES,
    JAX_BACKENDS,
    LARGE_N,
    MUTABLE_BACKENDS,
    Backend,
    backend_out_params,
    backend_params,
    check_native,
    marked_ones,
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
    _compute_dtype,
    _draw_layout,
    _dtypes_for,
    _finfo,
    _ieee_overflow,
    _make_input,
    _snapshot,
    float_arrays,
    scalars,
    shapes,
)
from reference import REDUCTION_TOLERANCES, assert_close, random_data

import scale_lib

# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "axpby",
    ("x", "y"),
    lambda x, y, out=None: scale_lib.axpby(x, y, 2.0, -1.0, out=out),
    reference=lambda x, y: 2.0 * x - y,
    exports={"axpby": 5},
    hostile_abi=("lib.axpby(x, x, x[::2], 1.0, 1.0)",),  # non-contiguous y
)

SHAPES = [(), (0,), (1,), (7,), (255,), (256,), (257,), (4097,), (2**20 + 3,), (3, 5), (2, 3, 4)]
A, B = 1.5, -0.75
NAN = float("nan")


def _reference(x: np.ndarray, y: np.ndarray, a: float, b: float) -> np.ndarray:
    return a * x.astype(np.float64) + b * y.astype(np.float64)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(), indirect=["backend"])
def test_axpby_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    x = backend.asarray(random_data(shape, seed=1 + sum(shape)), dtype)
    y = backend.asarray(random_data(shape, seed=2 + sum(shape)), dtype)
    x64, y64 = backend.to_numpy(x), backend.to_numpy(y)
    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        assert backend.run(scale_lib.axpby, x, y, A, B, out=out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = backend.run(scale_lib.axpby, x, y, A, B)
        check_native(backend, result, dtype, shape)
    # Two products and a sum before the final rounding: a little more than one rounding.
    assert_close(backend.to_numpy(result), _reference(x64, y64, A, B), dtype, reduction=True)
    np.testing.assert_array_equal(backend.to_numpy(x), x64)
    np.testing.assert_array_equal(backend.to_numpy(y), y64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_unaligned_views_and_in_place(backend: Backend, dtype: str) -> None:
    # Offsets of one element: the CUBIN's any-alignment kernel.
    n = 10_001
    xs = backend.asarray(random_data((n + 1,), 3), dtype)
    ys = backend.asarray(random_data((n + 1,), 4), dtype)
    x, y = xs[1:], ys[:-1]
    expected = _reference(backend.to_numpy(x), backend.to_numpy(y), 2.0, 3.0)
    assert_close(backend.to_numpy(scale_lib.axpby(x, y, 2.0, 3.0)), expected, dtype, reduction=True)
    assert scale_lib.axpby(x, y, 2.0, 3.0, out=y) is y  # in place into y
    assert_close(backend.to_numpy(y), expected, dtype, reduction=True)


def test_defaults_add() -> None:
    x, y = np.arange(5.0), np.ones(5)
    np.testing.assert_array_equal(scale_lib.axpby(x, y), x + y)


@pytest.mark.parametrize(
    "backend",
    [p for p in backend_params() if p.values[0].framework in ("torch", "jax", "paddle")],
    indirect=True,
)
def test_gradients(backend: Backend) -> None:
    x = backend.asarray(random_data((6,), 5), "float64")
    y = backend.asarray(random_data((6,), 6), "float64")
    if backend.framework == "torch":
        torch = backend.mod
        x.requires_grad_()
        y.requires_grad_()
        assert torch.autograd.gradcheck(lambda a, b: scale_lib.axpby(a, b, A, B), (x, y))
        torch.library.opcheck(torch.ops.scale_lib.axpby.default, (x, y, A, B))
        return
    if backend.framework == "jax":
        import jax

        gx, gy = jax.grad(lambda a, b: scale_lib.axpby(a, b, A, B).sum(), argnums=(0, 1))(x, y)
    else:
        x.stop_gradient = False
        y.stop_gradient = False
        scale_lib.axpby(x, y, A, B).sum().backward()
        gx, gy = x.grad, y.grad
    np.testing.assert_array_equal(backend.to_numpy(gx), np.full(6, A))
    np.testing.assert_array_equal(backend.to_numpy(gy), np.full(6, B))


@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_errors(backend: Backend) -> None:
    x = backend.asarray(np.ones(4), "float32")
    with pytest.raises(ValueError, match=r"y and x must have the same shape; got \(5,\) and \(4,\)"):
        backend.run(scale_lib.axpby, x, backend.asarray(np.ones(5), "float32"), 1.0, 1.0)
    with pytest.raises(TypeError, match="y and x must have the same dtype"):
        backend.run(scale_lib.axpby, x, backend.asarray(np.ones(4), "float64"), 1.0, 1.0)
    with pytest.raises(TypeError, match="b must be a real number"):
        backend.run(scale_lib.axpby, x, x, 1.0, None)


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_jax_y_must_be_jax(backend: Backend) -> None:
    x = backend.asarray(np.ones(4), "float32")
    with pytest.raises(TypeError, match="y must be a JAX array like x; got ndarray"):
        scale_lib.axpby(x, np.ones(4, np.float32))


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
# * axpby: the bound is the one of any floating-point sum, ``rtol * (|a x| + |b y|) + atol``
# (REDUCTION_TOLERANCES), which is assert_close's bound when the two terms do not cancel.
@pytest.mark.parametrize("backend", ALL, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_axpby_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(), label="shape")
    # |a x| + |b y| stays finite in the compute type; a 16-bit result may overflow.
    emax = int(_finfo(_compute_dtype(dtype)).maxexp) - 3
    max_abs = 2.0**500 if dtype == "float64" else None
    x_values = data.draw(float_arrays(shape, dtype, max_abs=max_abs), label="x")
    y_values = data.draw(float_arrays(shape, dtype, max_abs=max_abs), label="y")
    largest = max(1.0, float(np.max(np.abs(x_values), initial=0)), float(np.max(np.abs(y_values), initial=0)))
    a = data.draw(scalars(dtype, max_abs=2.0**emax / largest), label="a")
    b = data.draw(scalars(dtype, max_abs=2.0**emax / largest), label="b")
    (x_offset, y_offset), mode, out_offset = _draw_layout(data, backend, inputs=2)
    if mode == "inplace" and data.draw(st.booleans(), label="inplace_into_y"):
        mode = "inplace_y"

    x, x_buffer = _make_input(backend, x_values, dtype, x_offset)
    y, y_buffer = _make_input(backend, y_values, dtype, y_offset)
    x_before, y_before = _snapshot(backend, x), _snapshot(backend, y)
    if mode == "inplace_y":
        result = scale_lib.axpby(x, y, a, b, out=y)
        assert result is y
        guard = None
    else:
        result, guard = _call_with_out(
            backend, scale_lib.axpby, (x, y, a, b), [x, y], shape, dtype, mode, out_offset
        )
    if guard is not None:
        _check_guards(backend, guard, out_offset, math.prod(shape))
    if mode != "inplace":
        np.testing.assert_array_equal(backend.to_numpy(x), x_before, err_msg="x modified")
    if mode != "inplace_y":
        np.testing.assert_array_equal(backend.to_numpy(y), y_before, err_msg="y modified")
    for buffer, offset in ((x_buffer, x_offset), (y_buffer, y_offset)):
        if buffer is not None:
            _check_guards(backend, buffer, offset, math.prod(shape))

    with np.errstate(invalid="ignore", over="ignore"):
        ax = np.float64(a) * x_before
        by = np.float64(b) * y_before
        expected = ax + by
    expected, compared = _ieee_overflow(expected, dtype, REDUCTION_TOLERANCES[dtype][0])
    actual = backend.to_numpy(result)
    assert actual.shape == expected.shape
    _assert_sum_close(actual[compared], expected[compared], (np.abs(ax) + np.abs(by))[compared], dtype)


def _assert_sum_close(actual: np.ndarray, expected: np.ndarray, terms: np.ndarray, dtype: str) -> None:
    """``actual`` is ``expected = a x + b y`` computed in finite precision.

    Where the terms do not cancel (``|expected| >= (|a x| + |b y|) / 2``), this is
    assert_close(reduction=True). Where they do, rounding each term in the compute type (and
    ``float32(a)``, documented) leaves an error of a few units of the terms, not of their sum:
    the bound there is the REDUCTION_TOLERANCES rtol of ``|a x| + |b y|``, plus atol.
    """
    rtol, atol = REDUCTION_TOLERANCES[dtype]
    with np.errstate(invalid="ignore"):
        cancelling = np.abs(expected) < terms / 2  # False for inf and NaN
    assert_close(actual[~cancelling], expected[~cancelling], dtype, reduction=True)
    error = np.abs(actual[cancelling] - expected[cancelling])
    bound = rtol * terms[cancelling] + atol
    bad = ~(error <= bound)  # NaN fails
    if bad.any():
        i = np.nonzero(cancelling.ravel())[0][np.nonzero(bad)[0][:5]]
        raise AssertionError(
            f"{int(bad.sum())} cancelling sums off by more than {rtol} * (|a x| + |b y|) + {atol}: "
            f"at flat indices {i.tolist()}, got {actual[cancelling][bad][:5]}, expected "
            f"{expected[cancelling][bad][:5]} (|a x| + |b y| = {terms[cancelling][bad][:5]})"
        )


# -- more than 2^31 elements: 64-bit indexing through grid sizes ----------------------------
@pytest.mark.gpu
@pytest.mark.large
def test_large_inputs(large_torch) -> None:
    x = marked_ones(large_torch, LARGE_N)
    y = scale_lib.axpby(x, x, 1.0, 0.5)
    assert bool(large_torch.equal(y, x * 1.5))
