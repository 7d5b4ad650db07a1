"""rms_norm across frameworks x devices x dtypes x shapes, its gradients, and its errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

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
from cases import OpCase
from hypothesis import given
from hypothesis import strategies as st
from properties import (
    ALL,
    MAX_SIZE,
    PROFILE_SETTINGS,
    VIEW_FRAMEWORKS,
    _compute_dtype,
    _dtypes_for,
    _ieee_overflow,
    _rounded,
    _snapshot,
    float_arrays,
    shapes,
)
from reference import (
    REDUCTION_TOLERANCES,
    assert_close,
    random_data,
)

import scale_lib


def rms_norm_reference(x: np.ndarray, weight: np.ndarray | None, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if weight is None else y * weight.astype(np.float64)


def rms_norm_grad_reference(x, weight, grad, eps):
    """(grad_x, grad_weight) of sum(rms_norm(x, weight) * grad), in float64."""
    x, grad = x.astype(np.float64), grad.astype(np.float64)
    w = np.ones(x.shape[-1]) if weight is None else weight.astype(np.float64)
    rstd = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    dot = np.sum(w * grad * x, axis=-1, keepdims=True)
    grad_x = rstd * w * grad - rstd**3 * dot * x / x.shape[-1]
    grad_w = np.sum((grad * x * rstd).reshape(-1, x.shape[-1]), axis=0)
    return grad_x, (None if weight is None else grad_w)


# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "rms_norm",
    ("x", "weight"),
    lambda x, weight, out=None: scale_lib.rms_norm(x, weight, 1e-6, out=out),
    reference=lambda x, weight: rms_norm_reference(x, weight, 1e-6),
    optional=("weight",),
    shape_of={"weight": lambda shape: shape[-1:]},
    reduction=True,
    exports={"rms_norm": 4, "rms_norm_rstd": 3, "rms_norm_backward": 5, "rms_norm_weight_grad": 4},
    hostile_abi=(
        "lib.rms_norm(x, x, x[:3], 1e-6)",  # wrong weight
        "lib.rms_norm(x, x, None, -1.0)",  # negative eps
        "lib.rms_norm_weight_grad(x[:4], x, x, np.ones(1))",  # wrong dtype for rstd
    ),
)

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


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
# * rms_norm: x and weight have magnitudes in {0} U [2**-E, 2**E] (E = 30 for data accumulated in
# float32, 200 for float64) so that the documented float32 (float64) accumulation of x**2 can
# neither overflow nor underflow; float16 data is unrestricted. eps is in [0, 1e-2]; where it is
# 0 in the kernel (0, or a positive eps that float32, or DAZ under JAX, makes 0) no row is all
# zero. All-zero rows with a tiny positive eps: test_rms_norm_positive_eps_keeps_zero_rows_finite.
def _rms_norm_magnitudes(dtype: str) -> dict[str, float]:
    if dtype == "float16":
        return {"min_abs": 2.0**-24}  # every float16 is safe in float32 accumulation
    e = 200 if dtype == "float64" else 30
    return {"min_abs": 2.0**-e, "max_abs": 2.0**e}


def _eps_in_kernel(backend: Backend, eps: float, dtype: str) -> float:
    """eps as the kernel adds it: in the compute type (subnormals kept, on every backend)."""
    return float(np.float32(eps)) if _compute_dtype(dtype) == "float32" else eps


@st.composite
def rms_norm_shapes(draw, max_size: int = 3 * MAX_SIZE) -> tuple[int, ...]:
    hidden = draw(
        st.one_of(
            st.integers(1, 40),
            st.sampled_from(
                [1, 2, 3, 7, 8, 16, 31, 32, 33, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 2048, 3000]
            ),
            st.integers(1, 3000),
        ),
        label="hidden",
    )
    return (*draw(shapes(max_dims=3, max_size=max(max_size // hidden, 1)), label="leading"), hidden)


@pytest.mark.parametrize("backend", ALL, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_rms_norm_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(rms_norm_shapes(), label="shape")
    hidden = shape[-1]
    eps = data.draw(
        st.one_of(
            st.just(0.0),
            st.sampled_from([1e-6, 1e-5, 1e-3, 1e-2]),
            st.floats(1e-8, 1e-2),
            st.floats(0.0, 1e-2),
        ),
        label="eps",
    )
    magnitudes = _rms_norm_magnitudes(dtype)
    # Rows whose mean square is near eps often: where a mistake with eps would show.
    hint = 0.5 * math.log2(eps) if eps > 0 else None
    values = _rounded(data.draw(float_arrays(shape, dtype, **magnitudes, log2_hint=hint), label="x"), dtype)
    weighted = data.draw(st.booleans(), label="weighted")
    w_values = (
        _rounded(data.draw(float_arrays((hidden,), dtype, **magnitudes), label="weight"), dtype)
        if weighted
        else None
    )
    if _eps_in_kernel(backend, eps, dtype) == 0:  # eps = 0 only for rows that are not all zero:
        # give each zero row a 1. (A positive eps that is 0 in the compute type: see
        # test_rms_norm_positive_eps_keeps_zero_rows_finite.)
        rows = values.reshape(-1, hidden)
        rows[(rows == 0).all(axis=1), 0] = 1.0

    views = backend.framework in VIEW_FRAMEWORKS
    pad = data.draw(st.integers(0, 24) if views else st.just(0), label="row_padding")
    start = data.draw(st.integers(0, pad), label="row_start")
    modes = ["new"] if backend.is_jax else ["new", "fresh", "inplace"] + (["strided"] if views else [])
    mode = data.draw(st.sampled_from(modes), label="out_mode")

    if pad:  # x = wide[..., start:start + hidden]: strided rows, NaN around them
        wide_values = np.full((*shape[:-1], hidden + pad), NAN)
        wide_values[..., start : start + hidden] = values
        wide = backend.asarray(wide_values, dtype)
        x = wide[..., start : start + hidden]
    else:
        wide, x = None, backend.asarray(values, dtype)
    w = backend.asarray(w_values, dtype) if weighted else None
    x_before = _snapshot(backend, x)
    w64 = _snapshot(backend, w) if weighted else None

    out_wide = None
    if mode == "new":
        result = backend.run(scale_lib.rms_norm, x, w, eps)
        check_native(backend, result, dtype, shape)
    else:
        if mode == "fresh":
            out = backend.asarray(np.full(shape, NAN), dtype)
        elif mode == "strided":
            out_pad = data.draw(st.integers(1, 9), label="out_row_padding")
            out_wide = backend.asarray(np.full((*shape[:-1], hidden + out_pad), NAN), dtype)
            at_end = data.draw(st.booleans(), label="out_at_end")
            out = out_wide[..., out_pad : out_pad + hidden] if at_end else out_wide[..., :hidden]
        else:
            out = x
        result = scale_lib.rms_norm(x, w, eps, out=out)
        assert result is out
        backend.synchronize()
    if out_wide is not None:  # exactly hidden of each row written
        padding = math.prod(shape[:-1]) * (out_wide.shape[-1] - hidden)
        assert np.isnan(backend.to_numpy(out_wide)).sum() == padding, "padding of out written"
    if mode != "inplace":
        np.testing.assert_array_equal(backend.to_numpy(x), x_before, err_msg="x modified")
    if wide is not None:
        assert np.isnan(backend.to_numpy(wide)).sum() == math.prod(shape[:-1]) * pad, "padding written"

    expected = rms_norm_reference(x_before, w64, eps)  # |x / rms| <= sqrt(hidden): finite
    expected, compared = _ieee_overflow(expected, dtype, REDUCTION_TOLERANCES[dtype][0])  # * weight
    actual = backend.to_numpy(result)
    assert actual.shape == expected.shape
    assert_close(actual[compared], expected[compared], dtype, reduction=True)


@pytest.mark.parametrize("backend", ALL, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_rms_norm_positive_eps_keeps_zero_rows_finite(backend: Backend, data) -> None:
    """An all-zero row with eps > 0 normalises to 0 / sqrt(0 + eps) = 0, however small eps is.

    The main property gives every zero row a non-zero element when eps is 0 *in the kernel's
    compute type*; this one checks the positive eps that float32 (or DAZ, under JAX on the CPU)
    turns into 0, which the docstring ("eps: non-negative, added to the mean square") does not
    exclude.
    """
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    hidden = data.draw(st.integers(1, 300), label="hidden")
    rows = data.draw(st.integers(1, 4), label="rows")
    eps = data.draw(st.one_of(st.floats(5e-324, 1e-36), st.floats(5e-324, 1e-2)), label="eps")
    values = np.zeros((rows, hidden))
    odd_rows = float_arrays(values[1::2].shape, dtype, **_rms_norm_magnitudes(dtype))
    values[1::2] = data.draw(odd_rows, label="odd_rows")
    x = backend.asarray(values, dtype)
    x64 = _snapshot(backend, x)
    result = backend.run(scale_lib.rms_norm, x, None, eps)
    assert_close(backend.to_numpy(result), rms_norm_reference(x64, None, eps), dtype, reduction=True)


# -- more than 2^31 elements: 64-bit indexing through grid sizes ----------------------------
@pytest.mark.gpu
@pytest.mark.large
def test_large_inputs(large_torch) -> None:
    rows, hidden = 2**21 + 3, 1024
    x = large_torch.randn(rows, hidden, dtype=large_torch.float16, device="cuda")
    y = scale_lib.rms_norm(x, None, 1e-6)
    for r in (0, 2**21 - 1, rows - 1):  # rows whose elements lie past 2^31
        expected = large_torch.nn.functional.rms_norm(x[r].float(), (hidden,), eps=1e-6).half()
        large_torch.testing.assert_close(y[r], expected, rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------------------------------------
# The bare ABI of rms_norm and its backward pieces: overlap judged by elements, plain messages,
# eps exactly as documented. (The checks every export gets are in test_abi_guarantees.py.)
# ---------------------------------------------------------------------------------------------
LIB: Any = scale_lib.lib


def test_output_that_is_the_same_array_as_a_read_only_argument_is_refused() -> None:
    w = np.random.default_rng(5).uniform(0.5, 2, size=8).astype(np.float32)
    x = np.random.default_rng(6).uniform(-1, 1, size=8).astype(np.float32)
    before = w.copy()
    with pytest.raises(ValueError, match=r"^out and weight overlap in memory; out must not share"):
        LIB.rms_norm(w, x, w, 1e-6)
    np.testing.assert_array_equal(w, before)


def test_interleaved_views_of_one_buffer_are_disjoint() -> None:
    wide = np.random.default_rng(1).uniform(-1, 1, size=(5, 8)).astype(np.float32)
    x = wide[:, :4]
    expected = rms_norm_reference(x, None, 1e-6)
    LIB.rms_norm(wide[:, 4:], x, None, 1e-6)
    np.testing.assert_allclose(wide[:, 4:], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(wide[:, :4], x)
    # And the other way round, with a gap: out at columns 0-2, x at 4-6.
    wide = np.random.default_rng(2).uniform(-1, 1, size=(5, 8)).astype(np.float32)
    expected = rms_norm_reference(wide[:, 4:7], None, 1e-6)
    LIB.rms_norm(wide[:, 0:3], wide[:, 4:7], None, 1e-6)
    np.testing.assert_allclose(wide[:, 0:3], expected, rtol=1e-5, atol=1e-6)


def test_interleaved_views_that_share_a_column_overlap() -> None:
    wide = np.zeros((5, 8), dtype=np.float32)
    with pytest.raises(ValueError, match=r"^out and x overlap in memory without being the same array"):
        LIB.rms_norm(wide[:, 3:7], wide[:, 0:4], None, 1e-6)


def test_weight_that_is_a_row_of_x_written_in_place_is_refused() -> None:
    x = np.random.default_rng(3).uniform(-1, 1, size=(4, 8)).astype(np.float32)
    before = x.copy()
    with pytest.raises(ValueError, match=r"^out and weight overlap in memory; out must not share"):
        LIB.rms_norm(x, x, x[2], 1e-6)
    np.testing.assert_array_equal(x, before)


def test_weight_beside_x_in_one_buffer_is_accepted() -> None:
    buffer = np.random.default_rng(4).uniform(0.5, 2, size=(5, 8)).astype(np.float32)
    x, weight = buffer[:4], buffer[4]
    expected = rms_norm_reference(x, weight, 1e-6)
    LIB.rms_norm(x, x, weight, 1e-6)
    np.testing.assert_allclose(x, expected, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Plain messages; eps exactly as documented.
# ---------------------------------------------------------------------------------------------
_USER_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    (
        "eps",
        lambda: LIB.rms_norm(*(np.ones((2, 4), np.float32),) * 2, None, -1.0),
        "eps must be non-negative",
    ),
    (
        "eps_nan",
        lambda: LIB.rms_norm_rstd(np.ones(2), np.ones((2, 4), np.float32), float("nan")),
        "eps must be",
    ),
    (
        "rstd",
        lambda: LIB.rms_norm_rstd(np.ones(3), np.ones((2, 4), np.float32), 0.0),
        "rstd must have one element",
    ),
]


@pytest.mark.parametrize(("case", "call", "message"), _USER_ERRORS, ids=[c[0] for c in _USER_ERRORS])
def test_rms_norm_user_errors_have_plain_messages(
    case: str, call: Callable[[], object], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{message}") as info:
        call()
    assert "Check failed" not in str(info.value)


def test_eps_is_added_as_given_in_the_accumulation_type() -> None:
    eps = 1e-39  # subnormal in float32: the old rule raised it to 2**-126
    rstd = np.zeros(2)
    x = np.zeros((2, 4), np.float32)
    x[1, 0] = 1e-30  # its square underflows to 0 in float32: the row's mean is 0 too
    LIB.rms_norm_rstd(rstd, x, eps)
    expected = np.float32(1) / np.sqrt(np.float32(eps))
    np.testing.assert_allclose(rstd, [expected, expected], rtol=1e-6)
    out = np.full_like(x, np.nan)
    LIB.rms_norm(out, x, None, eps)
    np.testing.assert_array_equal(out[0], 0)  # a zero row stays finite
    np.testing.assert_allclose(out[1], x[1] * expected, rtol=1e-6)


def test_positive_eps_below_the_accumulation_precision_is_its_smallest_subnormal() -> None:
    eps = 1e-50  # rounds to 0 in float32: the kernel adds 2**-149 instead, and zero rows stay 0
    x = np.zeros((2, 4), np.float32)
    x[1, 0] = 1e-30
    rstd = np.zeros(2)
    LIB.rms_norm_rstd(rstd, x, eps)
    smallest = np.float32(2.0**-149)
    np.testing.assert_allclose(rstd, np.float32(1) / np.sqrt(smallest), rtol=1e-6)
    out = np.full_like(x, np.nan)
    LIB.rms_norm(out, x, None, eps)
    np.testing.assert_array_equal(out[0], 0)
    np.testing.assert_allclose(out[1], x[1] / np.sqrt(smallest), rtol=1e-6)
    out64 = np.full((1, 4), np.nan)
    LIB.rms_norm(out64, np.zeros((1, 4)), None, eps)  # float64 holds 1e-50 as given
    np.testing.assert_array_equal(out64, 0)
    rstd64 = np.zeros(1)
    LIB.rms_norm_rstd(rstd64, np.zeros((1, 4)), eps)
    np.testing.assert_allclose(rstd64, 1 / np.sqrt(eps), rtol=1e-12)
