"""Second-order gradients of every differentiable op are right or refused, never silently wrong.

An op's backward that calls ops without a gradient of their own (kernels its backward is made
of) must not be taken as a constant when differentiated again: PyTorch raises a TypeError from
the op that has no gradient, JAX a TypeError naming the op. Where second order works (PyTorch,
for ops whose vjp is written with differentiable ops), ``gradgradcheck`` checks it against
finite differences in float64. Driven by the declared ops: an op a fork adds is checked the
same way.
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


@pytest.mark.parametrize("case", DIFFERENTIABLE, ids=lambda c: c.name)
def test_jax_second_order_is_refused_with_the_ops_name(case) -> None:
    jax = pytest.importorskip("jax")
    pytest.importorskip("jax_tvm_ffi")
    cpu = jax.devices("cpu")[0]  # the CPU cases: on a GPU machine too
    arrays = [jax.device_put(jax.numpy.asarray(a, dtype=jax.numpy.float32), cpu) for a in _inputs(case)]

    def loss(x):
        return case.call(x, *arrays[1:]).sum()

    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(arrays[0]))))  # first order works
    with pytest.raises(TypeError, match=f"{case.name} is differentiable once under JAX"):
        jax.hessian(loss)(arrays[0])
    with pytest.raises(TypeError, match=f"{case.name} is differentiable once under JAX"):
        jax.grad(lambda x: jax.grad(loss)(x).sum())(arrays[0])
