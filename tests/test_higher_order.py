"""Second-order gradients of every differentiable op are right or refused, never silently wrong.

An op's backward that calls ops without a gradient of their own (kernels its backward is made
of) must not be taken as a constant when differentiated again: PyTorch raises a TypeError from
the op that has no gradient, JAX a TypeError naming the op. Where second order works (PyTorch,
for ops whose vjp is written with differentiable ops), ``gradgradcheck`` checks it against
finite differences in float64, and under JAX (every op whose pieces declare their derivatives)
so are ``jax.hessian``, a gradient penalty and forward over forward. Driven by the declared ops:
an op a fork adds is checked the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from cases import declared_cases

from scale_lib.ops import OPS

_VJP = {spec.name for spec in OPS if spec.vjp is not None}
DIFFERENTIABLE = [c for c in declared_cases("cpu") if c.name in _VJP]
SHAPE = (3, 4)


def _inputs(case) -> list[np.ndarray]:
    return list(case.numpy_inputs(7, SHAPE).values())


@pytest.mark.parametrize("case", DIFFERENTIABLE, ids=lambda c: c.name)
def test_torch_second_order_is_right_or_refused(case) -> None:
    torch = pytest.importorskip("torch")
    inputs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in _inputs(case)]
    refusal = None
    try:
        assert torch.autograd.gradgradcheck(lambda *a: case.call(*a), inputs)
    except TypeError as err:
        refusal = str(err)
    if refusal is not None:
        assert "second-order gradients" in refusal and "not supported" in refusal, refusal
        # The gradient penalty: refused as well, not computed with a constant backward.
        (first,) = torch.autograd.grad(case.call(*inputs).sum(), inputs[0], create_graph=True)
        with pytest.raises(TypeError, match="second-order gradients"):
            (first**2).sum().backward()


_DECLARED = {spec.name: spec for spec in OPS}


def _lacks_a_derivative(name: str) -> bool:
    spec = _DECLARED[name]
    return spec.vjp is None or (spec.jvp is None and not spec.linear)


@pytest.mark.parametrize("case", DIFFERENTIABLE, ids=lambda c: c.name)
def test_jax_second_order_is_right_or_refused_with_the_ops_name(case) -> None:
    jax = pytest.importorskip("jax")
    pytest.importorskip("jax_tvm_ffi")
    jnp = jax.numpy
    cpu = jax.devices("cpu")[0]  # the CPU cases: on a GPU machine too
    arrays = [jax.device_put(jnp.asarray(a, dtype=jnp.float64), cpu) for a in _inputs(case)]
    x = arrays[0]

    def loss(v):  # not linear in the output, so that linear ops have a second derivative too
        return jnp.sum(jnp.sin(case.call(v, *arrays[1:])))

    def penalty(v):  # a gradient penalty: reverse over reverse
        return jnp.sum(jax.grad(loss)(v) ** 2)

    step = 1e-5

    def differences(f, v):  # central differences of f's value (or array) in each element of v
        basis = np.eye(v.size).reshape(v.size, *v.shape)
        columns = [(np.asarray(f(v + step * e)) - np.asarray(f(v - step * e))) / (2 * step) for e in basis]
        return np.moveaxis(np.stack(columns), 0, -1).reshape(np.shape(f(v)) + v.shape)

    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(x))))  # first order works
    for name, second, reference in (
        ("jax.hessian", lambda: jax.hessian(loss)(x), lambda: differences(jax.grad(loss), x)),
        ("jax.grad of jax.grad", lambda: jax.grad(penalty)(x), lambda: differences(penalty, x)),
        (
            "jax.jacfwd of jax.jacfwd",
            lambda: jax.jacfwd(jax.jacfwd(loss))(x),
            lambda: differences(jax.grad(loss), x),
        ),
    ):
        refusal = None
        try:
            got = second()
        except TypeError as err:
            refusal = str(err)
        if refusal is None:
            np.testing.assert_allclose(np.asarray(got), reference(), rtol=1e-5, atol=1e-7, err_msg=name)
            continue
        # Refused by an op whose derivative the second order needs and that declares none: the
        # message starts with its name. A linear op's derivatives are the op itself: never refused.
        culprit = refusal.split(" ", 1)[0]
        assert culprit in _DECLARED and _lacks_a_derivative(culprit), f"{name}: {refusal}"
        assert not _DECLARED[case.name].linear, f"{name} of a linear op refused: {refusal}"
