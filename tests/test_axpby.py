"""axpby (the embedded-CUBIN op) across frameworks x devices x dtypes x shapes."""

from __future__ import annotations

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
from reference import assert_close, random_data

import scale_lib

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
