"""cumsum: a framework x device x dtype x shape matrix against a float64 reference, gradients
and a property test (scaffolded by tools/new_op.py)."""

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
def reference(x: np.ndarray, reverse: bool) -> np.ndarray:
    """cumsum in float64, from the float64 values of the inputs as stored."""
    v = x
    if reverse:  # the running sum from the end of each row
        prefix = np.flip(np.cumsum(np.flip(v, -1), axis=-1), -1)
    else:
        prefix = np.cumsum(v, axis=-1)
    return prefix


# (rtol, atol) of the results per dtype, against the reference: rtol for the rounding of the
# result, atol per unit of what the running sum has added (the same scan of |values|), as a sum's
# rounding error grows with its terms, not with its result, which cancellation can make small:
# a few roundings in the compute type (float32 for 16-bit inputs) per sqrt(row length).
TOLERANCES = {
    "float16": (2e-3, 2e-5),
    "bfloat16": (1.6e-2, 2e-5),
    "float32": (3e-5, 2e-5),
    "float64": (1e-12, 1e-13),
}
MAX_ABS = 16.0  # inputs of the property test are within [-MAX_ABS, MAX_ABS]
# Example values of the scalar arguments.
REVERSE = False
# ----------------------------------------------------------------------------------------------

DEVICES = built_devices(next(spec for spec in OPS if spec.name == "cumsum"))
BACKENDS = tuple(b for b in ALL_BACKENDS if b.device in DEVICES)
SHAPES = [(1,), (7,), (3, 5), (0, 4), (4, 0), (2, 3, 257), (3, 4097), (1000, 16)]
NAN = float("nan")
DIFFERENTIABLE = [b for b in BACKENDS if b.framework in ("torch", "jax", "paddle")]

# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "cumsum",
    ("x",),
    lambda x, out=None: scale_lib.cumsum(x, REVERSE, out=out),
    reference=lambda x: reference(x, REVERSE),
    exports={"cumsum": 3},
    reduction=True,
    error_scale=lambda x: reference(*map(np.abs, (x,)), REVERSE),  # see TOLERANCES
)


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str, added: np.ndarray) -> None:
    rtol, atol = TOLERANCES[dtype]
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    bound = rtol * np.abs(expected) + atol * np.abs(added)  # added: the scan of |values|
    close = (actual == expected) | (np.abs(actual - expected) <= bound)
    close |= np.isnan(actual) & np.isnan(expected)
    where = np.argwhere(~close)
    assert where.size == 0, (
        f"{len(where)} of {actual.size} elements differ; first at {tuple(where[0])}: "
        f"{actual[tuple(where[0])]} != {expected[tuple(where[0])]} (bound {bound[tuple(where[0])]:.3g})"
    )


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(BACKENDS), indirect=["backend"])
def test_cumsum_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    x = backend.asarray(random_data(shape, seed=1 + sum(shape)), dtype)
    x64 = backend.to_numpy(x)
    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        assert backend.run(scale_lib.cumsum, x, REVERSE, out=out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = backend.run(scale_lib.cumsum, x, REVERSE)
        check_native(backend, result, dtype, shape)
    assert_close(
        backend.to_numpy(result), reference(x64, REVERSE), dtype, reference(*map(np.abs, (x64,)), REVERSE)
    )
    np.testing.assert_array_equal(backend.to_numpy(x), x64)


@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
def test_cumsum_rejects_bad_input(backend: Backend) -> None:
    good = [backend.asarray(np.ones((2, 3)), "float32") for _ in range(1)]
    with pytest.raises(TypeError, match="x has unsupported dtype int32"):
        backend.run(scale_lib.cumsum, backend.asarray(np.ones((2, 3)), "int32"), *good[1:], REVERSE)
    with pytest.raises(TypeError, match="x must be an array"):
        scale_lib.cumsum([1.0, 2.0], *good[1:], REVERSE)


@pytest.mark.parametrize("backend", backend_params(DIFFERENTIABLE), indirect=True)
def test_cumsum_gradients(backend: Backend) -> None:
    """The op's vjp against central differences of the float64 reference."""
    shape = (3, 4)
    data = [random_data(shape, seed=10 + i) for i in range(1)]
    weights = random_data(shape, seed=20)  # the gradient flowing in
    arrays = [backend.asarray(d, "float64") for d in data]
    grad_in = backend.asarray(weights, "float64")
    if backend.framework == "torch":
        for a in arrays:
            a.requires_grad_()
        scale_lib.cumsum(*arrays, REVERSE).backward(grad_in)
        grads = [a.grad for a in arrays]
    elif backend.framework == "jax":
        import jax

        _, pullback = jax.vjp(lambda *a: scale_lib.cumsum(*a, REVERSE), *arrays)
        grads = list(pullback(grad_in))
    else:
        for a in arrays:
            a.stop_gradient = False
        scale_lib.cumsum(*arrays, REVERSE).backward(grad_in)
        grads = [a.grad for a in arrays]
    h = 1e-6
    for i, g in enumerate(grads):
        expected = np.empty(shape)
        for j in np.ndindex(*shape):
            up, down = [a.copy() for a in data], [a.copy() for a in data]
            up[i][j] += h
            down[i][j] -= h
            change = reference(*up, REVERSE) - reference(*down, REVERSE)
            expected[j] = np.sum(change * weights) / (2 * h)
        np.testing.assert_allclose(backend.to_numpy(g), expected, rtol=1e-5, atol=1e-7, err_msg=f"{i}")


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_cumsum_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(min_dims=1), label="shape")
    values = [
        data.draw(float_arrays(shape, dtype, max_abs=MAX_ABS, min_abs=2.0**-8), label=name)
        for name in CASE.arrays
    ]
    arrays = [backend.asarray(v, dtype) for v in values]
    stored = [backend.to_numpy(a) for a in arrays]
    result = backend.run(scale_lib.cumsum, *arrays, REVERSE)
    check_native(backend, result, dtype, shape)
    assert_close(
        backend.to_numpy(result), reference(*stored, REVERSE), dtype, reference(*map(np.abs, stored), REVERSE)
    )
    for a, before in zip(arrays, stored, strict=True):
        np.testing.assert_array_equal(backend.to_numpy(a), before)
    assert math.prod(shape) == backend.to_numpy(result).size


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
def test_cumsum_reverse(backend: Backend, dtype: str) -> None:
    """reverse=True: the running sum from the end of each row."""
    x = backend.asarray(random_data((3, 1500), seed=30), dtype)
    stored = [backend.to_numpy(x)]
    result = backend.run(lambda x: scale_lib.cumsum(x, reverse=True), x)
    assert_close(
        backend.to_numpy(result),
        reference(*stored, True),
        dtype,
        reference(*map(np.abs, stored), True),
    )


# -- the launcher's paths ------------------------------------------------------------------------
# The CUDA launcher picks by shape (kernels/scan.cuh): a group of 4 to 32 lanes per row for rows
# of fewer than 1024 elements (each group size and its edges, row counts that leave the last
# block part-empty), a block per row for many long rows (or for rows of one tile), and a block per
# tile with a look-back for fewer long rows than 4 per multiprocessor (tiles of 7168 float32 or
# 5376 float64 values: a tile edge exactly, one past it, rows of a million). The CPU scans rows of
# fewer than 64 elements in order, longer ones in chunks of 4096 as four segments (kernels/
# scan_cpu.h): rows of 63, 64 and 65, a chunk exactly and chunks with a short last one.
PATH_SHAPES = [
    (37, 1),
    (33, 4),
    (9, 16),
    (9, 17),
    (5, 32),
    (5, 33),
    (3, 63),
    (3, 64),
    (3, 65),
    (2, 4096),
    (2, 2 * 4096 + 5),
    (130, 1023),
    (700, 1025),
    (5, 5376),
    (2, 5377),
    (1, 2 * 5376),
    (2, 2 * 5376 + 1),
    (5, 7168),
    (2, 7169),
    (1, 14336),
    (2, 14337),
    (3, 3 * 7168 - 1),
    (7, 40000),
    (1, 2**20 + 3),
]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", PATH_SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
def test_cumsum_paths(backend: Backend, dtype: str, shape, reverse: bool) -> None:
    x = backend.asarray(random_data(shape, seed=40 + sum(shape)), dtype)
    x64 = backend.to_numpy(x)
    result = backend.run(lambda x: scale_lib.cumsum(x, reverse), x)
    assert_close(backend.to_numpy(result), reference(x64, reverse), dtype, reference(np.abs(x64), reverse))


@pytest.mark.parametrize("shape", [(3, 3 * 7168 - 1), (1, 2**20 + 3), (130, 1023), (700, 1025)], ids=shape_id)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", backend_params([b for b in BACKENDS if not b.is_jax]), indirect=True)
def test_cumsum_in_place(backend: Backend, dtype: str, shape) -> None:
    """cumsum(x, out=x) on every path: each element is read before it is written."""
    x = backend.asarray(random_data(shape, seed=50), dtype)
    x64 = backend.to_numpy(x)
    assert backend.run(lambda x: scale_lib.cumsum(x, out=x), x) is x
    assert_close(backend.to_numpy(x), reference(x64, False), dtype, reference(np.abs(x64), False))


# The same input gives the same bits on every call: a fixed order of additions on every path.
GPU_BACKENDS = [b for b in BACKENDS if b.device == "cuda"]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", [(1, 2**24 + 5), (16, 2**18 + 1), (700, 1025), (4099, 100)], ids=shape_id)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", backend_params(GPU_BACKENDS), indirect=True)
def test_cumsum_deterministic(backend: Backend, dtype: str, shape, reverse: bool) -> None:
    # The tiled path's look-back reaches further or nearer tiles from run to run: ten runs.
    x = backend.asarray(random_data(shape, seed=60), dtype)
    first = backend.to_numpy(backend.run(lambda x: scale_lib.cumsum(x, reverse), x))
    for _ in range(10):
        again = backend.to_numpy(backend.run(lambda x: scale_lib.cumsum(x, reverse), x))
        assert np.array_equal(again, first), "two calls on the same input differ"
