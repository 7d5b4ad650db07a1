"""l2_norm: a two-pass reduction with scratch memory from the caller."""

from __future__ import annotations

import math

import numpy as np
import pytest
from backends import (
    DTYPES,
    JAX_BACKENDS,
    LARGE_N,
    Backend,
    backend_out_params,
    backend_params,
    check_native,
    numpy_dtype,
    shape_id,
)
from cases import OpCase
from hypothesis import given
from hypothesis import strategies as st
from properties import (
    ALL,
    PROFILE_SETTINGS,
    _check_guards,
    _draw_offset,
    _dtypes_for,
    _ieee_overflow,
    _make_input,
    _snapshot,
    float_arrays,
    shapes,
)
from reference import REDUCTION_TOLERANCES, assert_close, random_data

import scale_lib
from scale_lib.ops.l2_norm import _l2_norm

# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "l2_norm",
    ("x",),
    lambda x: scale_lib.l2_norm(x),
    reference=lambda x: np.sqrt(np.sum(x * x)),
    has_out=False,
    reduction=True,
    exports={"l2_norm": 2, "l2_norm_with_workspace": 3, "l2_norm_workspace_bytes": 2},
    hostile_abi=(
        "lib.l2_norm(np.empty(2, np.float32), x)",  # out not 0-d
        "lib.l2_norm_workspace_bytes(-5, 1)",  # negative size
        "lib.l2_norm_workspace_bytes(10, 0)",  # no groups
    ),
)

SHAPES = [(), (0,), (1,), (7,), (257,), (2049,), (2**20 + 3,), (3, 5), (64, 1024, 9)]
NAN = float("nan")


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(), indirect=["backend"])
def test_l2_norm_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    x = backend.asarray(random_data(shape, seed=sum(shape) + 1), dtype)
    x64 = backend.to_numpy(x)
    expected = np.sqrt(np.sum(x64 * x64))
    if out_mode == "out":
        out = backend.asarray(np.full((), NAN), dtype)
        assert _l2_norm.call((x,), (), out) is out
        result = out
    else:
        result = backend.run(scale_lib.l2_norm, x)
        check_native(backend, result, dtype, ())
    assert_close(backend.to_numpy(result), expected, dtype, reduction=True)


@pytest.mark.parametrize(
    "backend",
    [p for p in backend_params() if p.values[0].device == "cuda" and not p.values[0].is_jax],
    indirect=True,
)
def test_deterministic(backend: Backend) -> None:
    x = backend.asarray(random_data((3_000_017,), 2), "float32")
    first = backend.to_numpy(scale_lib.l2_norm(x))
    for _ in range(5):
        np.testing.assert_array_equal(backend.to_numpy(scale_lib.l2_norm(x)), first)


def _rounded_once(value: float, dtype: str) -> np.ndarray:
    """``value`` rounded to nearest-even in the 16-bit ``dtype``, in one rounding: of the two
    neighbours of a first guess and the guess itself, the nearest (even bits on a tie)."""
    guess = np.array(value, dtype=np.float32).astype(numpy_dtype(dtype)).reshape(1).view(np.uint16)
    candidates = (guess.astype(np.int64) + np.array([-1, 0, 1])).astype(np.uint16)
    values = candidates.view(numpy_dtype(dtype)).astype(np.float64)
    distance = np.abs(values - value)
    best = min(range(3), key=lambda i: (distance[i], int(candidates[i]) & 1))
    return values[best].astype(numpy_dtype(dtype))


@pytest.mark.parametrize("n", [4, 15, 16, 1023, 1024, 1040, 4097, 70_001])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cpu_16_bit_norm_is_the_float64_norm_rounded_once(dtype: str, n: int) -> None:
    # On the CPU the squares are summed in float64 in an order fixed by the element count alone,
    # so 16-bit values (converted a chunk at a time, with vector instructions where the CPU has
    # them) sum exactly as float64 arrays of the same values do; the square root is then rounded
    # once, to the 16-bit type (not to float32 first: two roundings can differ from one).
    x16 = np.array(random_data((n,), n) * 50, dtype=numpy_dtype(dtype))
    norm64 = float(scale_lib.l2_norm(x16.astype(np.float64)))
    np.testing.assert_array_equal(scale_lib.l2_norm(x16), _rounded_once(norm64, dtype))


@pytest.mark.parametrize("backend", ALL, indirect=True)
def test_16_bit_norm_near_a_tie_is_rounded_once(backend: Backend) -> None:
    # sqrt(1 + 2^-10 + 2^-22 + 2^-24) lies just above 1 + 2^-11, half way between two float16
    # values (1 and 1 + 2^-10) in float32 (a double rounding gives 1), above it in float64.
    x = backend.asarray(np.array([1, 2.0**-5, 2.0**-11, 2.0**-12]), "float16")
    result = backend.to_numpy(backend.run(scale_lib.l2_norm, x))
    assert float(result) == 1 + 2.0**-10


@pytest.mark.parametrize(
    "backend",
    [p for p in backend_params() if p.values[0].framework in ("torch", "jax", "paddle")],
    indirect=True,
)
def test_gradient(backend: Backend) -> None:
    x = backend.asarray(random_data((4, 5), 3), "float64")
    x64 = backend.to_numpy(x)
    if backend.framework == "torch":
        torch = backend.mod
        x.requires_grad_()
        assert torch.autograd.gradcheck(scale_lib.l2_norm, (x,))
        torch.library.opcheck(torch.ops.scale_lib.l2_norm.default, (x,))
        return
    if backend.framework == "jax":
        g = backend.mod.grad(scale_lib.l2_norm)(x)
    else:
        x.stop_gradient = False
        scale_lib.l2_norm(x).backward()
        g = x.grad
    np.testing.assert_allclose(backend.to_numpy(g), x64 / np.linalg.norm(x64), rtol=1e-12)


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_jax_vmap_gives_one_norm_per_example(backend: Backend) -> None:
    jax = backend.mod
    x = backend.asarray(random_data((6, 3, 50), 4), "float64")
    norms = jax.vmap(scale_lib.l2_norm)(x)
    np.testing.assert_allclose(
        np.asarray(norms), np.linalg.norm(np.asarray(x).reshape(6, -1), axis=1), rtol=1e-12
    )
    hlo = jax.jit(jax.vmap(scale_lib.l2_norm)).lower(x).as_text()
    assert hlo.count("@scale_lib.l2_norm") == 1 and "while" not in hlo


def test_workspace_size_is_a_pure_function() -> None:
    assert scale_lib.lib.l2_norm_workspace_bytes(0, 1) == 8
    assert scale_lib.lib.l2_norm_workspace_bytes(10**9, 1) == 1024 * 8
    assert scale_lib.lib.l2_norm_workspace_bytes(10**6, 4) == 4 * 123 * 8
    with pytest.raises(ValueError, match="numel must be a non-negative multiple of groups"):
        scale_lib.lib.l2_norm_workspace_bytes(10, 3)


@pytest.mark.gpu
def test_cuda_workspace_must_come_from_somewhere() -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    import torch
    import tvm_ffi

    x = torch.randn(100_000, device="cuda")
    out = torch.empty((), device="cuda")
    # tvm_ffi.Tensors carry no framework allocator: the bare call must be given a workspace
    # (above the one-pass size: smaller norms need none).
    xt, ot = tvm_ffi.from_dlpack(x), tvm_ffi.from_dlpack(out)
    with pytest.raises(ValueError, match="l2_norm on CUDA needs a workspace"):
        scale_lib.lib.l2_norm(ot, xt)
    small = tvm_ffi.from_dlpack(torch.empty(8, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match="workspace must hold at least 392 bytes"):
        scale_lib.lib.l2_norm_with_workspace(ot, small, xt)
    workspace = tvm_ffi.from_dlpack(
        torch.empty(scale_lib.lib.l2_norm_workspace_bytes(100_000, 1), dtype=torch.uint8, device="cuda")
    )
    scale_lib.lib.l2_norm_with_workspace(ot, workspace, xt)
    torch.testing.assert_close(out, torch.linalg.vector_norm(x))
    small = torch.randn(4096, device="cuda")  # one pass: no workspace
    scale_lib.lib.l2_norm(ot, tvm_ffi.from_dlpack(small))
    torch.testing.assert_close(out, torch.linalg.vector_norm(small))


@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_errors(backend: Backend) -> None:
    with pytest.raises(TypeError, match="x has unsupported dtype"):
        backend.run(scale_lib.l2_norm, backend.asarray(np.ones(3), "int32"))


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
# * l2_norm: float64 data has magnitudes in {0} U [2**-480, 2**480], so that its squares, summed in
# float64, are normal and finite (the reference sums the same squares).
@pytest.mark.parametrize("backend", ALL, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_l2_norm_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(), label="shape")
    # float64 squares stay normal and finite (the sum is accumulated in float64).
    magnitudes = {"min_abs": 2.0**-480, "max_abs": 2.0**480} if dtype == "float64" else {}
    values = data.draw(float_arrays(shape, dtype, **magnitudes), label="x")
    offset = _draw_offset(data, backend, "input_offset")

    x, x_buffer = _make_input(backend, values, dtype, offset)
    x64 = _snapshot(backend, x)
    result = backend.run(scale_lib.l2_norm, x)
    check_native(backend, result, dtype, ())
    np.testing.assert_array_equal(backend.to_numpy(x), x64, err_msg="x modified")
    if x_buffer is not None:
        _check_guards(backend, x_buffer, offset, math.prod(shape))

    with np.errstate(over="ignore"):
        expected = np.sqrt(np.sum(x64**2))
    rtol = REDUCTION_TOLERANCES[dtype][0]
    expected, compared = _ieee_overflow(np.asarray(expected), dtype, rtol)
    actual = backend.to_numpy(result)
    assert_close(actual[compared], expected[compared], dtype, reduction=True)


# -- more than 2^31 elements: 64-bit indexing through grid sizes ----------------------------
@pytest.mark.gpu
@pytest.mark.large
def test_large_inputs(large_torch) -> None:
    x = large_torch.ones(LARGE_N, dtype=large_torch.float16, device="cuda")
    expected = large_torch.tensor(math.sqrt(LARGE_N), dtype=large_torch.float16)
    assert scale_lib.l2_norm(x).cpu() == expected


def test_workspace_size_of_a_negative_count_is_a_plain_value_error() -> None:
    with pytest.raises(ValueError, match=r"^numel must be a non-negative multiple") as info:
        scale_lib.lib.l2_norm_workspace_bytes(-1, 1)
    assert "Check failed" not in str(info.value)
