"""The vjps of non-sum scans (python/scale_lib/_scan_vjp.py) against central differences of a
float64 NumPy reference, in PyTorch and JAX on the CPU, both directions, rows with and without
zeros (a product's gradient at and after a row's first zero)."""

from __future__ import annotations

import numpy as np
import pytest

from scale_lib._scan_vjp import cumprod_vjp, logcumsumexp_vjp


def np_scan(name: str, v: np.ndarray, reverse: bool) -> np.ndarray:
    if reverse:
        return np.flip(np_scan(name, np.flip(v, -1), False), -1)
    if name == "prod":
        return np.cumprod(v, axis=-1)
    return np.logaddexp.accumulate(v, axis=-1)


VJPS = {"prod": cumprod_vjp, "logaddexp": logcumsumexp_vjp}


def framework_scan(framework: str, name: str):
    """The scan in the framework (what the op itself computes, in a scaffolded library)."""
    if framework == "torch":
        import torch

        class Scan(torch.autograd.Function):
            """The forward scan, differentiated by the vjp under test (as a scaffolded op is):
            PyTorch's own logcumsumexp backward is not finite at -inf inputs, which the log-sum-exp
            vjp feeds its scan."""

            @staticmethod
            def forward(ctx, a):
                p = torch.cumprod(a, -1) if name == "prod" else torch.logcumsumexp(a, -1)
                ctx.save_for_backward(a, p)
                return p

            @staticmethod
            def backward(ctx, grad):
                a, p = ctx.saved_tensors
                return VJPS[name](grad, p, a, scan, False)

        def scan(a, reverse):
            return Scan.apply(a.flip(-1)).flip(-1) if reverse else Scan.apply(a)

        return scan
    import jax

    def scan(a, reverse):
        if name == "prod":
            return jax.lax.cumprod(a, axis=a.ndim - 1, reverse=reverse)
        return jax.lax.cumlogsumexp(a, axis=a.ndim - 1, reverse=reverse)

    return scan


def rows(name: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    v = rng.uniform(0.5, 1.5, (4, 7)) * rng.choice([-1.0, 1.0], (4, 7))
    if name == "prod":
        v[1, 3] = 0.0  # one zero
        v[2, 2] = v[2, 5] = 0.0  # two zeros
        v[3, 0] = 0.0  # a zero first
    return v


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("name", ["prod", "logaddexp"])
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_scan_vjp_matches_central_differences(framework: str, name: str, reverse: bool) -> None:
    pytest.importorskip(framework)
    v = rows(name)
    weights = np.random.default_rng(4).standard_normal(v.shape)  # the gradient flowing in
    if framework == "torch":
        import torch

        to, back = (lambda a: torch.tensor(a, dtype=torch.float64)), (lambda a: a.numpy())
    else:
        import jax.numpy as jnp  # float64: conftest enables JAX's 64-bit types

        to, back = (lambda a: jnp.asarray(a, dtype=jnp.float64)), np.asarray
    scan = framework_scan(framework, name)
    vt, gt = to(v), to(weights)
    got = back(VJPS[name](gt, scan(vt, reverse), vt, scan, reverse))
    h = 1e-6
    expected = np.empty(v.shape)
    for j in np.ndindex(*v.shape):
        up, down = v.copy(), v.copy()
        up[j] += h
        down[j] -= h
        change = np_scan(name, up, reverse) - np_scan(name, down, reverse)
        expected[j] = np.sum(change * weights) / (2 * h)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)
    if name == "prod":  # the zeros' rows: after the first zero, no gradient
        assert np.all(got[2, 6:] == 0) if not reverse else np.all(got[2, :2] == 0)


@pytest.mark.parametrize("name", ["prod", "logaddexp"])
def test_scan_vjp_is_differentiable_again(name: str) -> None:
    """A second derivative through the vjp (PyTorch's gradcheck of the vjp itself, in the values
    and in the gradient flowing in, of both signs). At exact zeros (of the values for a product,
    of the gradient for a log-sum-exp) the vjp switches branch and its own derivative is not
    right; a first derivative there is (test above)."""
    torch = pytest.importorskip("torch")
    scan = framework_scan("torch", name)
    v = torch.tensor(rows(name)[0], dtype=torch.float64, requires_grad=True)
    g = torch.tensor(np.random.default_rng(5).standard_normal(v.shape), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a: VJPS[name](g, scan(a, False), a, scan, False), (v,))
    g.requires_grad_()
    assert torch.autograd.gradcheck(lambda b: VJPS[name](b, scan(v, False), v, scan, False), (g,))
