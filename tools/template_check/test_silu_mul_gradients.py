"""silu_mul's gradients (tools/template_check/edits.yml) by PyTorch's own check and against JAX's
of jax.nn.silu: tools/check_template.py copies this file, renamed, beside the scaffold's tests."""

import numpy as np
import pytest

import scale_lib


def test_torch_gradcheck() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(scale_lib.silu_mul, (x, y))


def test_jax_grad_matches_jax_numpy() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, y, w = (jnp.asarray(np.random.default_rng(i).standard_normal((5, 7))) for i in range(3))

    def ours(a, b):
        return jnp.sum(scale_lib.silu_mul(a, b) * w)

    def theirs(a, b):
        return jnp.sum(jax.nn.silu(a) * b * w)

    expected = jax.grad(theirs, argnums=(0, 1))(x, y)
    for f in (jax.grad(ours, argnums=(0, 1)), jax.jit(jax.grad(ours, argnums=(0, 1)))):
        for got, want in zip(f(x, y), expected, strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-14)
