"""PaddlePaddle: autograd through paddle.autograd.PyLayer."""

from __future__ import annotations

import itertools
import subprocess
import sys

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


# Driven by the declared ops: every op with a CPU kernel, and the differentiable ones.
_VJP = {s.name for s in OPS if s.vjp is not None}


def _leaves(backend: Backend, case, data: list, dtype: str = "float64", needs_grad: bool = True) -> list:
    arrays = []
    for values in data:
        t = backend.asarray(values, dtype)
        t.stop_gradient = not needs_grad
        arrays.append(t)
    return arrays


def _loss(case, arrays: list, weights) -> object:
    # Not linear in the output, so that second derivatives of a linear op are not all zero.
    return (case.call(*arrays) ** 2 * weights).sum()


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_grad_of_any_subset_of_the_inputs(backend: Backend) -> None:
    # paddle.grad(loss, [some inputs]) while other inputs need a gradient too (a gradient penalty
    # with respect to the data, the weights training): each requested input gets the gradient
    # that backward() gives it, with and without create_graph.
    for case in [c for c in declared_cases(backend.device) if c.name in _VJP]:
        data = list(case.numpy_inputs(3, (3, 4)).values())
        arrays = _leaves(backend, case, data)
        weights = backend.asarray(
            np.random.default_rng(4).standard_normal(case.output_shape((3, 4))), "float64"
        )
        _loss(case, arrays, weights).backward()
        expected = [a.grad.numpy() for a in arrays]
        for i, create_graph in itertools.product(range(len(arrays)), (False, True)):
            arrays = _leaves(backend, case, data)
            (got,) = paddle.grad(_loss(case, arrays, weights), [arrays[i]], create_graph=create_graph)
            np.testing.assert_allclose(got.numpy(), expected[i], rtol=1e-12, err_msg=f"{case.name} {i}")


def _refused_second_order(case, err: Exception) -> bool:
    # Paddle reports an exception raised in a backward as an OSError holding the original's
    # type and message.
    text = str(err)
    return (
        isinstance(err, (TypeError, OSError))
        and f"scale_lib.{case.name} is differentiable once in Paddle" in text
        and "second-order gradients" in text
        and "not supported" in text
    )


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_second_order_is_right_or_refused_with_the_ops_name(backend: Backend) -> None:
    # A Hessian-vector product through paddle.grad(create_graph=True), against central
    # differences of the first-order gradient (float64). Where the op's vjp is made of ops with
    # a vjp, it works; where not, differentiating the gradient again raises, naming the public
    # op, and the first-order gradient taken with create_graph=True is still right.
    rng = np.random.default_rng(5)
    refused = []
    for case in [c for c in declared_cases(backend.device) if c.name in _VJP]:
        data = list(case.numpy_inputs(6, (3, 4)).values())
        direction = [rng.standard_normal(d.shape) for d in data]
        weights = backend.asarray(rng.standard_normal(case.output_shape((3, 4))), "float64")

        def gradient(values: list, create_graph: bool = False, case=case, weights=weights):
            arrays = _leaves(backend, case, values)
            return arrays, paddle.grad(_loss(case, arrays, weights), arrays, create_graph=create_graph)

        arrays, grads = gradient(data, create_graph=True)
        for g, plain in zip(grads, gradient(data)[1], strict=True):
            np.testing.assert_allclose(g.numpy(), plain.numpy(), rtol=1e-12, err_msg=case.name)
        along = sum((g * backend.asarray(v, "float64")).sum() for g, v in zip(grads, direction, strict=True))
        refusal = None
        try:
            hvp = paddle.grad(along, arrays, allow_unused=True)
        except (TypeError, OSError) as err:
            refusal = err
        if refusal is not None:
            assert _refused_second_order(case, refusal), f"{case.name}: {refusal}"
            refused.append(case.name)
            continue
        h = 1e-6
        ahead = gradient([d + h * v for d, v in zip(data, direction, strict=True)])[1]
        behind = gradient([d - h * v for d, v in zip(data, direction, strict=True)])[1]
        for i, (got, a, b) in enumerate(zip(hvp, ahead, behind, strict=True)):
            expected = (a.numpy() - b.numpy()) / (2 * h)
            got = np.zeros_like(expected) if got is None else got.numpy()
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"{case.name} {i}")
    assert "scale" not in refused  # scale's vjp is scale: second order must work


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_jacobian_of_every_differentiable_op(backend: Backend) -> None:
    # paddle.autograd.jacobian takes first-order gradients with create_graph=True: it works
    # for every differentiable op, second order or not. Checked against central differences.
    for case in [c for c in declared_cases(backend.device) if c.name in _VJP]:
        data = list(case.numpy_inputs(8, (2, 4)).values())
        flat = backend.asarray(data[0].ravel(), "float64")
        flat.stop_gradient = False
        others = _leaves(backend, case, data[1:], needs_grad=False)
        out = case.call(flat.reshape(list(data[0].shape)), *others).reshape([-1])
        jacobian = paddle.autograd.jacobian(out, flat)[:].numpy()
        v = np.random.default_rng(9).standard_normal(data[0].size)
        h = 1e-6

        def at(values, case=case, others=others, shape=data[0].shape):
            return case.call(backend.asarray(values.reshape(shape), "float64"), *others).numpy().ravel()

        expected = (at(data[0].ravel() + h * v) - at(data[0].ravel() - h * v)) / (2 * h)
        np.testing.assert_allclose(jacobian @ v, expected, rtol=1e-5, atol=1e-6, err_msg=case.name)


def _to_static_cases(backend: Backend):
    for case in declared_cases(backend.device):
        data = list(case.numpy_inputs(2, (3, 4)).values())
        yield case, _leaves(backend, case, data, "float32", needs_grad=False)


def _function_of(case):
    """A function calling the op, with named parameters (to_static takes no ``*args``)."""
    n = len(case.arrays)
    assert n <= 3, f"{case.name}: more array arguments than _function_of takes"

    def f(a0, a1=None, a2=None):
        return case.call(*(a0, a1, a2)[:n]) * 1.0

    return f


@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_to_static_full_graph_refuses_each_op_by_name(backend: Backend) -> None:
    # A static graph holds values without data, which no TVM-FFI function can take: each op
    # refuses them with a TypeError naming it and saying what works, raised from the library's
    # own code run as it is (Paddle's AST translation leaves the package alone). The package is
    # kept out of the translation once Paddle is imported and an op has seen a Paddle tensor, as
    # here, or when scale_lib is imported after Paddle.
    scale_lib.scale(paddle.ones([2]), 2.0)
    for case, arrays in _to_static_cases(backend):
        static = paddle.jit.to_static(_function_of(case), full_graph=True)
        with pytest.raises(
            TypeError, match=rf"scale_lib\.{case.name} cannot run in a Paddle static graph"
        ) as err:
            static(*arrays)
        assert "full_graph=False" in str(err.value)


# Paddle's own simulation of an allocation (paddle.empty_like, for an op the library does not
# allocate itself) warns that static values have no place; the call then runs eagerly.
@pytest.mark.filterwarnings("ignore:Tensor do not have 'place' interface:UserWarning")
@pytest.mark.parametrize("backend", PADDLE_BACKENDS, indirect=True)
def test_to_static_with_sot_runs_each_op_eagerly(backend: Backend) -> None:
    # full_graph=False (SOT, to_static's default): Paddle compiles what it can and runs the op as
    # in dynamic mode, with the same bits, and gradients through it are the eager ones.
    for case, arrays in _to_static_cases(backend):
        f = _function_of(case)
        static = paddle.jit.to_static(f, full_graph=False)
        np.testing.assert_array_equal(static(*arrays).numpy(), f(*arrays).numpy(), err_msg=case.name)
        if case.name not in _VJP:
            continue
        grads = []
        for fn in (f, static):
            leaves = _leaves(backend, case, [a.numpy() for a in arrays], "float32")
            (fn(*leaves) ** 2).sum().backward()
            grads.append([t.grad.numpy() for t in leaves])
        for eager, compiled in zip(*grads, strict=True):
            np.testing.assert_allclose(compiled, eager, rtol=1e-6, err_msg=case.name)


# Run as a file, not with python -c: Paddle reads the source of the function it translates.
_TRANSLATED_FIRST = """
import paddle
import scale_lib


def f(x):
    return scale_lib.scale(x, 2.0)


try:
    paddle.jit.to_static(f, full_graph=True)(paddle.ones([4]))
except TypeError as err:
    print(err)
"""


def test_to_static_full_graph_when_paddle_is_imported_first(tmp_path) -> None:
    # The usual import order, and no call before the translated one: the first call of an op is
    # the translated function's, and still the op's own refusal.
    script = tmp_path / "translated.py"
    script.write_text(_TRANSLATED_FIRST)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "scale_lib.scale cannot run in a Paddle static graph" in run.stdout, run.stdout
