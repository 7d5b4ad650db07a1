"""rms_norm across frameworks x devices x dtypes x shapes, its gradients, and its errors."""

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
from reference import assert_close, random_data, rms_norm_grad_reference, rms_norm_reference

import scale_lib

# 1-D; one element; narrow rows (sub-warp groups: 8, 128 wide); odd widths (the unvectorised
# path); one block per row (1024, 4096); rows too wide to cache in registers (> 8192 packs of
# 16 bytes: 65537 for 16-bit, the scalar path); N-d; zero rows.
SHAPES = [
    (7,),
    (1, 1),
    (5, 8),
    (3, 128),
    (5, 255),
    (2, 1024),
    (3, 4096),
    (2, 65537),
    (3, 3, 16),
    (0, 8),
]
EPS = 1e-5
NAN = float("nan")


# [rms_norm_matrix.begin]
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(), indirect=["backend"])
def test_rms_norm_matches_reference(
    backend: Backend, out_mode: str, dtype: str, shape, weighted: bool
) -> None:
    x = backend.asarray(random_data(shape, seed=sum(shape) + 3), dtype)
    w = backend.asarray(random_data(shape[-1:], seed=7), dtype) if weighted else None
    x64 = backend.to_numpy(x)
    expected = rms_norm_reference(x64, None if w is None else backend.to_numpy(w), EPS)
    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        assert backend.run(scale_lib.rms_norm, x, w, EPS, out=out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = backend.run(scale_lib.rms_norm, x, w, EPS)
        check_native(backend, result, dtype, shape)
    assert_close(backend.to_numpy(result), expected, dtype, reduction=True)
    np.testing.assert_array_equal(backend.to_numpy(x), x64)


# [rms_norm_matrix.end]


@pytest.mark.parametrize("hidden", [64, 1000, 4096])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_rows_of_a_wider_array(backend: Backend, dtype: str, hidden: int) -> None:
    # x[:, :hidden] and x[:, 1:hidden + 1]: strided rows, aligned and not.
    wide = backend.asarray(random_data((6, hidden + 24), seed=hidden), dtype)
    w = backend.asarray(random_data((hidden,), seed=1), dtype)
    for x in (wide[:, :hidden], wide[:, 1 : hidden + 1]):
        expected = rms_norm_reference(backend.to_numpy(x), backend.to_numpy(w), EPS)
        assert_close(backend.to_numpy(scale_lib.rms_norm(x, w, EPS)), expected, dtype, reduction=True)
        out_wide = backend.asarray(np.full((6, hidden + 24), NAN), dtype)
        scale_lib.rms_norm(x, w, EPS, out=out_wide[:, 2 : hidden + 2])
        assert_close(backend.to_numpy(out_wide[:, 2 : hidden + 2]), expected, dtype, reduction=True)
        assert np.isnan(backend.to_numpy(out_wide[:, :2])).all()


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_in_place(backend: Backend) -> None:
    x = backend.asarray(random_data((4, 300), seed=2), "float32")
    expected = rms_norm_reference(backend.to_numpy(x), None, EPS)
    assert scale_lib.rms_norm(x, None, EPS, out=x) is x
    assert_close(backend.to_numpy(x), expected, "float32", reduction=True)


# -- gradients --------------------------------------------------------------------------------
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize(
    "backend", [p for p in backend_params() if p.values[0].framework == "torch"], indirect=True
)
def test_torch_gradcheck(backend: Backend, weighted: bool) -> None:
    torch = backend.mod
    x = backend.asarray(random_data((3, 5, 7), seed=4), "float64").requires_grad_()
    w = backend.asarray(random_data((7,), seed=5), "float64").requires_grad_() if weighted else None
    args = (x, w) if weighted else (x,)
    assert torch.autograd.gradcheck(
        lambda *a: scale_lib.rms_norm(*a, eps=EPS) if len(a) == 2 else scale_lib.rms_norm(a[0], None, EPS),
        args,
    )
    torch.library.opcheck(torch.ops.scale_lib.rms_norm.default, (x, w, EPS))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "backend",
    [p for p in backend_params() if p.values[0].framework in ("torch", "jax", "paddle")],
    indirect=True,
)
def test_gradients_match_reference(backend: Backend, dtype: str) -> None:
    x_np, w_np, g_np = random_data((4, 3, 160), 8), random_data((160,), 9), random_data((4, 3, 160), 10)
    x, w, g = backend.asarray(x_np, dtype), backend.asarray(w_np, dtype), backend.asarray(g_np, dtype)
    if backend.framework == "jax":
        import jax

        gx, gw = jax.grad(lambda a, b: (scale_lib.rms_norm(a, b, EPS) * g).sum(), argnums=(0, 1))(x, w)
    elif backend.framework == "torch":
        x.requires_grad_()
        w.requires_grad_()
        (scale_lib.rms_norm(x, w, EPS) * g).sum().backward()
        gx, gw = x.grad, w.grad
    else:
        x.stop_gradient = False
        w.stop_gradient = False
        (scale_lib.rms_norm(x, w, EPS) * g).sum().backward()
        gx, gw = x.grad, w.grad
    ref_x, ref_w = rms_norm_grad_reference(backend.to_numpy(x), backend.to_numpy(w), backend.to_numpy(g), EPS)
    assert_close(backend.to_numpy(gx), ref_x, dtype, reduction=True)
    # A sum over 12 rows of products: compare relative to the sum's scale.
    np.testing.assert_allclose(
        backend.to_numpy(gw),
        ref_w,
        rtol=2e-2 if dtype == "bfloat16" else 1e-4,
        atol=5e-2 if dtype == "bfloat16" else 1e-4,
    )


@pytest.mark.parametrize(
    "backend", [p for p in JAX_BACKENDS if p.values[0].framework == "jax"], indirect=True
)
def test_jax_vmap_and_per_example_weight_gradients(backend: Backend) -> None:
    import jax

    xs = backend.asarray(random_data((5, 4, 96), 11), "float64")
    w = backend.asarray(random_data((96,), 12), "float64")
    batched = jax.vmap(lambda a: scale_lib.rms_norm(a, w, EPS))(xs)
    assert_close(
        np.asarray(batched), rms_norm_reference(np.asarray(xs), np.asarray(w), EPS), "float64", reduction=True
    )
    hlo = jax.jit(jax.vmap(lambda a: scale_lib.rms_norm(a, w, EPS))).lower(xs).as_text()
    assert hlo.count("@scale_lib.rms_norm") == 1 and "while" not in hlo

    def loss(a, b):
        return (scale_lib.rms_norm(a, b, EPS) ** 2).sum()

    per_example = jax.jit(jax.vmap(jax.grad(loss, argnums=1), in_axes=(0, None)))(xs, w)
    expected = np.stack(
        [
            rms_norm_grad_reference(
                np.asarray(xs[i]),
                np.asarray(w),
                2 * rms_norm_reference(np.asarray(xs[i]), np.asarray(w), EPS),
                EPS,
            )[1]
            for i in range(5)
        ]
    )
    np.testing.assert_allclose(np.asarray(per_example), expected, rtol=1e-10, atol=1e-12)


def test_torch_compile_forward_and_backward() -> None:
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    x = torch.randn(6, 128, dtype=torch.float64, requires_grad=True)
    w = torch.randn(128, dtype=torch.float64, requires_grad=True)

    def f(a, b):
        return (scale_lib.rms_norm(a, b, EPS) ** 2).sum()

    f(x, w).backward()
    eager = (x.grad.clone(), w.grad.clone())
    x.grad, w.grad = None, None
    torch.compile(f, fullgraph=True)(x, w).backward()
    torch.testing.assert_close(x.grad, eager[0])
    torch.testing.assert_close(w.grad, eager[1])


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_weight_errors(backend: Backend) -> None:
    x = backend.asarray(random_data((3, 8), 1), "float32")
    with pytest.raises(
        ValueError, match=r"weight must have shape \(8,\) to match the last dimension of x; got \(7,\)"
    ):
        backend.run(scale_lib.rms_norm, x, backend.asarray(np.ones(7), "float32"))
    with pytest.raises(TypeError, match="weight and x must have the same dtype"):
        backend.run(scale_lib.rms_norm, x, backend.asarray(np.ones(8), "float64"))
    with pytest.raises(TypeError, match="eps must be a real number"):
        backend.run(scale_lib.rms_norm, x, None, "small")


@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_layout_and_argument_errors(backend: Backend) -> None:
    x = backend.asarray(random_data((6, 8), 1), "float32")
    if backend.framework != "paddle":  # paddle has no 0-d-from-scalar here that keeps dtype
        with pytest.raises(ValueError, match="x must have at least 1 dimension"):
            scale_lib.rms_norm(backend.asarray(np.float64(1.0), "float32"))
    with pytest.raises(ValueError, match="x must be rows of contiguous elements"):
        scale_lib.rms_norm(x.T)
    with pytest.raises(ValueError, match="x must be rows of contiguous elements"):
        scale_lib.rms_norm(x[:, ::2])
    with pytest.raises(ValueError, match="eps must be non-negative"):
        scale_lib.rms_norm(x, None, -1.0)
    with pytest.raises(TypeError, match="x has unsupported dtype int32"):
        scale_lib.rms_norm(backend.asarray(np.ones((2, 2)), "int32"))
    out = backend.asarray(np.full((6, 8), NAN), "float32")
    with pytest.raises(ValueError, match="weight must have shape"):
        scale_lib.rms_norm(x, backend.asarray(np.ones((2, 8)), "float32"), out=out)
    assert np.isnan(backend.to_numpy(out)).all()


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_jax_errors_are_python_errors(backend: Backend) -> None:
    x = backend.asarray(random_data((3, 8), 1), "float32")
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        backend.run(scale_lib.rms_norm, x, backend.asarray(np.ones(5), "float32"))
    with pytest.raises(ValueError, match="x must have at least 1 dimension"):
        backend.run(scale_lib.rms_norm, backend.asarray(np.float64(1.0), "float32"))
