"""PaddlePaddle: autograd through paddle.autograd.PyLayer."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from backends import Backend, backend_params
from cases import declared_cases
from reference import random_data

import scale_lib
from scale_lib.ops import OPS

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


def _paddle_grads(backend: Backend, case, data: list, needs: tuple[bool, ...], numpy_others: bool = False):
    """The gradients of ``case``'s op w.r.t. its inputs (None where there is none), with the
    inputs at ``needs`` needing one and, with ``numpy_others``, every input after x a NumPy array."""
    arrays = []
    for i, (values, need) in enumerate(zip(data, needs, strict=True)):
        if numpy_others and i > 0:
            arrays.append(values.astype(np.float32))
            continue
        t = backend.asarray(values, "float32")
        t.stop_gradient = not need
        arrays.append(t)
    (case.call(*arrays) * 1.5).sum().backward()
    return [
        a.grad.numpy().astype(np.float64) if isinstance(a, paddle.Tensor) and a.grad is not None else None
        for a in arrays
    ]


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_every_combination_of_inputs_needing_gradients(backend: Backend) -> None:
    # Fine-tuning freezes some inputs (a weight), and an argument may be another framework's
    # array: each Paddle input that needs a gradient gets the one it gets when every input
    # does; a frozen one gets none; a NumPy argument is not a Paddle input at all.
    vjp = {s.name for s in OPS if s.vjp is not None}
    for case in [c for c in declared_cases(backend.device) if c.name in vjp]:
        data = list(case.numpy_inputs(5, (3, 4)).values())
        everything = _paddle_grads(backend, case, data, (True,) * len(data))
        for needs in itertools.product([True, False], repeat=len(data)):
            if not any(needs):
                continue
            got = _paddle_grads(backend, case, data, needs)
            for i, need in enumerate(needs):
                if need:
                    np.testing.assert_allclose(got[i], everything[i], rtol=1e-6, err_msg=f"{case.name} {i}")
                else:
                    assert got[i] is None, f"{case.name}: a frozen input got a gradient"
        if len(data) > 1:  # the other inputs as NumPy arrays
            got = _paddle_grads(backend, case, data, (True,) * len(data), numpy_others=True)
            np.testing.assert_allclose(got[0], everything[0], rtol=1e-6, err_msg=case.name)
