"""PaddlePaddle: autograd through paddle.autograd.PyLayer."""

from __future__ import annotations

import numpy as np
import pytest
from backends import Backend, backend_params
from reference import random_data

import scale_lib

paddle = pytest.importorskip("paddle")

PADDLE_BACKENDS = [p for p in backend_params() if p.values[0].framework == "paddle"]


def _x(backend: Backend, *shape, stop_gradient=True):
    t = backend.asarray(random_data(shape, seed=sum(shape)), "float32")
    t.stop_gradient = stop_gradient
    return t


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_backward(backend: Backend) -> None:
    x = _x(backend, 50, stop_gradient=False)
    y = scale_lib.scale(x, 3.0)
    assert not y.stop_gradient
    (y.sum() + scale_lib.scale(x, -0.5).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(50, 2.5, np.float32))


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_backward_of_a_nonlinear_loss(backend: Backend) -> None:
    x = _x(backend, 4, 6, stop_gradient=False)
    (scale_lib.scale(x, 2.0) ** 2).mean().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * 4.0 * x.numpy() / x.size, rtol=1e-6)


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_no_grad_path(backend: Backend) -> None:
    x = _x(backend, 5, stop_gradient=False)
    with paddle.no_grad():
        y = scale_lib.scale(x, 2.0)
    assert y.stop_gradient
    np.testing.assert_allclose(y.numpy(), 2 * x.numpy())


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_out_with_autograd_is_rejected(backend: Backend) -> None:
    x = _x(backend, 4, stop_gradient=False)
    out = paddle.full([4], float("nan"))
    with pytest.raises(ValueError, match="out= does not support autograd, and an input requires grad"):
        scale_lib.scale(x, 2.0, out=out)
    assert np.isnan(out.numpy()).all()
