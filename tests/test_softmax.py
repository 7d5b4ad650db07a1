"""softmax: a framework x device x dtype x shape matrix against a float64 reference, gradients
and a property test. On CUDA the shapes cover both kernels: the one NVRTC specialises on the row
length (rows of a warp or of a block, 16-byte loads or not) and the ahead-of-time one (rows
longer than 32768, and the whole suite where there is no NVRTC). The runtime compilation itself
is tested in tests/test_nvrtc.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from backends import ALL_BACKENDS, DTYPES, Backend, backend_out_params, backend_params, check_native, shape_id
from cases import OpCase, built_devices
from hypothesis import given
from hypothesis import strategies as st
from properties import PROFILE_SETTINGS, _dtypes_for, float_arrays, shapes
from reference import random_data

import scale_lib
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
