"""Property-based tests (Hypothesis) of every public op against a NumPy float64 reference.

Where the matrix tests (test_scale.py, test_rms_norm.py, ...) check fixed shapes and data, these
draw shapes (0-d, zero-size and size-1 dimensions included), dtypes, data, scalar arguments and
memory layouts (views at an offset into a larger buffer, strided rows, ``out=`` fresh, in place
or inside a guarded buffer), run the op on every backend and compare with float64 NumPy computed
from the values the kernel actually sees (``backend.to_numpy`` of the rounded input).

Profiles (registered here, chosen by the environment variable SCALE_LIB_HYPOTHESIS_PROFILE):

  ci        the default: 25 examples per test and backend, derandomized (the same examples on
            every run, from the test's source), no example database, no deadline.
  thorough  500 random examples per test and backend, no deadline; failures are saved to
            Hypothesis's example database (.hypothesis/) and replayed first on the next run.

    SCALE_LIB_HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_properties.py -k scale

The profile is applied to this module's tests only (a decorator per test), so that it does not
change the settings of other modules. Hypothesis prints a failing example as the draws of
``data``, with a ``@reproduce_failure`` blob that replays it (under ci, a failure also recurs on
every run: the examples are derandomized).

The domains, and why (each is a documented behaviour, not a tolerance):

* Scalars (``factor``, ``a``, ``b``) are 0 or normal numbers of the compute type (float32 for
  16-bit and float32 inputs, float64 for float64): the kernels compute with ``float32(factor)``,
  as documented, so a factor that is subnormal or out of range in float32 is not the factor the
  kernel multiplies by.
* A result too large for the dtype must be +-inf (IEEE); values within a rounding of the
  overflow threshold may be either, and are not compared.
* XLA's CPU threads run with FTZ/DAZ (flush-to-zero, denormals-are-zero), for JAX's own ops as
  for ours (see test_scale.py::test_16bit_rounding_is_exact): on JAX CPU the reference reads
  inputs that are subnormal in the compute type as zero, and a result below the compute type's
  smallest normal may be zero.
* axpby: the bound is the one of any floating-point sum, ``rtol * (|a x| + |b y|) + atol``
  (REDUCTION_TOLERANCES), which is assert_close's bound when the two terms do not cancel.
* rms_norm: x and weight have magnitudes in {0} U [2**-E, 2**E] (E = 30 for data accumulated in
  float32, 200 for float64) so that the documented float32 (float64) accumulation of x**2 can
  neither overflow nor underflow; float16 data is unrestricted. eps is in [0, 1e-2]; where it is
  0 in the kernel (0, or a positive eps that float32, or DAZ under JAX, makes 0) no row is all
  zero. All-zero rows with a tiny positive eps: test_rms_norm_positive_eps_keeps_zero_rows_finite.
* l2_norm: float64 data has magnitudes in {0} U [2**-480, 2**480], so that its squares, summed in
  float64, are normal and finite (the reference sums the same squares).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

pytest.importorskip("hypothesis")

from backends import (
    DTYPES,
    Backend,
    backend_params,
    check_native,
    numpy_dtype,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from reference import REDUCTION_TOLERANCES, TOLERANCES, assert_close, rms_norm_reference

import scale_lib

# ---------------------------------------------------------------------------------------------
# Hypothesis profiles
# ---------------------------------------------------------------------------------------------
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
# No "explain" phase: it traces coverage (slow) to name lines that here are NumPy's printing.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=_HEALTH,
    phases=_PHASES,
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=500,
    deadline=None,
    suppress_health_check=_HEALTH,
    phases=_PHASES,
    print_blob=True,
)
PROFILE = os.environ.get("SCALE_LIB_HYPOTHESIS_PROFILE", "ci")
PROFILE_SETTINGS = settings.get_profile(PROFILE)  # an unknown name raises, naming the profiles

MAX_SIZE = 5000  # elements per array: the properties are about shapes and values, not size
NAN = float("nan")

# Frameworks whose arrays can be sliced into views here (the layout tests).
VIEW_FRAMEWORKS = ("numpy", "torch", "cupy")

ALL = backend_params()
NOT_JIT = [p for p in ALL if p.values[0].framework != "jax_jit"]  # flatnonzero cannot be jitted


# ---------------------------------------------------------------------------------------------
# dtype facts
# ---------------------------------------------------------------------------------------------
def _finfo(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(np.dtype(dtype))


def _compute_dtype(dtype: str) -> str:
    """The type the CPU and CUDA kernels compute in (float32 for 16-bit types)."""
    return "float64" if dtype == "float64" else "float32"


def _overflow_threshold(dtype: str) -> float:
    """The smallest magnitude that rounds (to nearest even) to infinity: max + half an ulp."""
    info = _finfo(dtype)
    return float(info.max) + 2.0 ** (int(info.maxexp) - 2 - int(info.nmant))


def _dtypes_for(backend: Backend) -> list[str]:
    return [d for d in DTYPES if not (backend.framework == "cupy" and d == "bfloat16")]


def _flushes_subnormals(backend: Backend) -> bool:
    """XLA's CPU threads set FTZ/DAZ: the kernel, run by XLA, inherits them."""
    return backend.is_jax and backend.device == "cpu"


def _snapshot(backend: Backend, a) -> np.ndarray:
    """A float64 copy of ``a`` (``to_numpy`` of a float64 CPU tensor may share its memory)."""
    return np.array(backend.to_numpy(a), dtype=np.float64, copy=True)


def _rounded(data: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(data).astype(numpy_dtype(dtype)).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------
@st.composite
def shapes(draw, min_dims: int = 0, max_dims: int = 4, max_size: int = MAX_SIZE) -> tuple[int, ...]:
    """Up to ``max_dims`` dimensions of at most ``max_size`` elements: sides often 1 to 3, and
    about one shape in eight has a zero-size dimension."""
    ndim = draw(st.integers(min_dims, max_dims))
    shape, size = [], 1
    for _ in range(ndim):
        cap = max(max_size // size, 1)
        side = draw(st.one_of(st.integers(1, min(3, cap)), st.integers(1, min(cap, 4200))))
        shape.append(side)
        size *= side
    if shape and draw(st.integers(0, 7), label="zero_size") == 7:
        shape[draw(st.integers(0, len(shape) - 1))] = 0
    return tuple(shape)


@st.composite
def float_arrays(
    draw,
    shape: tuple[int, ...],
    dtype: str,
    *,
    max_abs: float | None = None,
    min_abs: float = 0.0,
    specials: tuple[float, ...] = (),
    log2_hint: float | None = None,
) -> np.ndarray:
    """Float64 data to be stored as ``dtype``: magnitudes in {0} U [min_abs, max_abs] (by
    default the dtype's finite range, subnormals included), plus ``specials`` here and there.

    Either dense pseudo-random data (log-uniform magnitudes over a drawn window of exponents,
    random signs, a drawn fraction of zeros), or Hypothesis's own array strategy (few distinct
    values, boundary values), so that both typical and corner-case data are tried.
    ``log2_hint``: a magnitude worth trying often (pseudo-random data is then centred near it).
    """
    info = _finfo(dtype)
    hi = float(info.max) if max_abs is None else min(max_abs, float(info.max))
    smallest = float(info.smallest_subnormal)
    lo_exp = math.log2(min_abs) if min_abs > 0 else math.log2(smallest) - 1
    hi_exp = math.log2(hi)
    n = math.prod(shape)
    if draw(st.sampled_from(["numpy_rng", "numpy_rng", "hypothesis"]), label="data_kind") == "numpy_rng":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        centres = [st.just(0.0), st.floats(lo_exp, hi_exp)]
        if log2_hint is not None:
            centres += 2 * [st.floats(-4.0, 4.0).map(lambda d: log2_hint + d)]
        centre = draw(st.one_of(*centres), label="log2_magnitude")
        centre = min(max(centre, lo_exp), hi_exp)
        width = draw(st.sampled_from([0.0, 1.0, 8.0, 64.0, 4096.0]), label="log2_spread")
        lo_e, hi_e = max(lo_exp, centre - width), min(hi_exp, centre + width)
        with np.errstate(over="ignore", under="ignore"):
            magnitude = np.minimum(2.0 ** rng.uniform(lo_e, hi_e, n), hi)
        if min_abs > 0:
            magnitude = np.maximum(magnitude, min_abs)
        values = np.where(rng.random(n) < 0.5, -magnitude, magnitude)
        zero_fraction = draw(st.sampled_from([0.0, 0.0, 0.1, 0.5, 0.95, 1.0]), label="zero_fraction")
        zeros = rng.random(n) < zero_fraction
        values = np.where(zeros, np.where(rng.random(n) < 0.5, -0.0, 0.0), values)
        if specials:
            special_fraction = draw(st.sampled_from([0.0, 0.01, 0.3]), label="special_fraction")
            picks = rng.random(n) < special_fraction
            values = np.where(picks, rng.choice(np.array(specials), n), values)
        return values.reshape(shape)
    if min_abs > 0:
        magnitudes = st.floats(min_abs, hi)
        elements = st.one_of(st.just(0.0), st.just(-0.0), magnitudes, magnitudes.map(lambda v: -v))
    else:
        elements = st.floats(-hi, hi, allow_nan=False, allow_infinity=False)
    if specials:
        elements = st.one_of(elements, st.sampled_from(specials))
    return draw(hnp.arrays(np.float64, shape, elements=elements), label="hypothesis_data")


def scalars(dtype: str, max_abs: float | None = None) -> st.SearchStrategy[float]:
    """0 or a normal number of the compute type (see the module docstring), of either sign."""
    info = _finfo(_compute_dtype(dtype))
    tiny = float(info.tiny)
    big = float(info.max) if max_abs is None else min(max_abs, float(info.max))
    if big < tiny:
        return st.sampled_from([0.0, -0.0])
    magnitude = st.one_of(
        st.sampled_from(
            [v for v in (1.0, 0.5, 2.0, 1.3, 0.1, 1 / 3, math.pi, tiny, big) if tiny <= v <= big]
        ),
        st.floats(tiny, min(big, 4.0)),
        st.floats(tiny, big),
    )
    signed = st.tuples(magnitude, st.booleans()).map(lambda t: -t[0] if t[1] else t[0])
    return st.one_of(st.sampled_from([0.0, -0.0]), *(4 * [signed]))  # zero about one time in five


# ---------------------------------------------------------------------------------------------
# Reference helpers
# ---------------------------------------------------------------------------------------------
def _as_seen_by_kernel(backend: Backend, x64: np.ndarray, dtype: str) -> np.ndarray:
    """``x64`` (the input's values) as the kernel reads them: under DAZ, subnormals of the
    compute type are zeros."""
    if not _flushes_subnormals(backend):
        return x64
    tiny = float(_finfo(_compute_dtype(dtype)).tiny)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x64) < tiny, np.copysign(0.0, x64), x64)


def _ieee_overflow(expected: np.ndarray, dtype: str, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """``expected`` with results too large for ``dtype`` made +-inf, and the mask of the
    elements to compare: those within a rounding of the overflow threshold may be either."""
    threshold = _overflow_threshold(dtype)
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(expected)
        over = magnitude >= threshold * (1 + rtol)
        ambiguous = (magnitude > threshold * (1 - rtol)) & ~over & np.isfinite(expected)
    return np.where(over, np.copysign(np.inf, expected), expected), ~ambiguous


def _allow_flushed(backend: Backend, actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """Under FTZ, a result below the compute type's smallest normal may be (signed) zero."""
    if not _flushes_subnormals(backend):
        return expected
    tiny = float(_finfo(_compute_dtype(dtype)).tiny)
    with np.errstate(invalid="ignore"):
        flushed = (actual == 0) & (np.abs(expected) < tiny * (1 + 2.0**-16))
    return np.where(flushed, actual, expected)


def _make_input(backend: Backend, data: np.ndarray, dtype: str, offset: int | None):
    """``data`` as a ``backend`` array: fresh, or (``offset`` given) a contiguous view at that
    element offset into a larger 1-D buffer whose other elements are NaN (a read outside the
    view shows up as NaN). Returns ``(array, buffer or None)``."""
    if offset is None:
        with np.errstate(invalid="ignore", over="ignore"):
            return backend.asarray(data, dtype), None
    n = data.size
    padded = np.full(offset + n + 7, NAN)
    padded[offset : offset + n] = data.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        buffer = backend.asarray(padded, dtype)
    return buffer[offset : offset + n].reshape(data.shape), buffer


def _guarded_out(backend: Backend, shape: tuple[int, ...], dtype: str, offset: int):
    """A contiguous ``out`` view at ``offset`` inside a NaN-filled buffer, 5 NaNs after it."""
    n = math.prod(shape)
    buffer = backend.asarray(np.full(offset + n + 5, NAN), dtype)
    return buffer, buffer[offset : offset + n].reshape(shape)


def _check_guards(backend: Backend, buffer, offset: int, n: int) -> None:
    values = backend.to_numpy(buffer)
    outside = np.concatenate([values[:offset], values[offset + n :]])
    assert np.isnan(outside).all(), f"stray write outside out= (offset {offset}, size {n})"


def _draw_offset(data, backend: Backend, label: str) -> int | None:
    """None (a fresh array) or the element offset of a view into a larger buffer."""
    views = backend.framework in VIEW_FRAMEWORKS
    return data.draw(st.one_of(st.none(), st.integers(0, 9)) if views else st.none(), label=label)


def _draw_layout(data, backend: Backend, inputs: int = 1) -> tuple[list[int | None], str, int]:
    """(input offsets, out mode, out offset). Out modes: "new" (the op allocates), "fresh" (a
    new array), "view" (a guarded view at an offset), "inplace" (into the first input)."""
    views = backend.framework in VIEW_FRAMEWORKS
    offsets = [_draw_offset(data, backend, f"input{i}_offset") for i in range(inputs)]
    modes = ["new"] if backend.is_jax else ["new", "fresh", "inplace"] + (["view"] if views else [])
    mode = data.draw(st.sampled_from(modes), label="out_mode")
    out_offset = data.draw(st.integers(0, 9), label="out_offset") if mode == "view" else 0
    return offsets, mode, out_offset


def _call_with_out(
    backend: Backend, fn, args: tuple, inputs: list, shape, dtype: str, mode: str, out_offset: int
):
    """Calls ``fn(*args, out=...)`` per ``mode``; returns ``(result, guard buffer or None)``."""
    x = inputs[0]
    if mode == "new":
        result = backend.run(fn, *args)
        check_native(backend, result, dtype, shape)
        return result, None
    buffer = None
    if mode == "fresh":
        out = backend.asarray(np.full(shape, NAN), dtype)
    elif mode == "view":
        buffer, out = _guarded_out(backend, shape, dtype, out_offset)
    else:
        out = x
    result = fn(*args, out=out)
    assert result is out, "out= must be returned"
    backend.synchronize()
    return result, buffer


# ---------------------------------------------------------------------------------------------
# scale
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ALL, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_scale_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(), label="shape")
    values = data.draw(float_arrays(shape, dtype, specials=(NAN, math.inf, -math.inf, -0.0)), label="x")
    factor = data.draw(scalars(dtype), label="factor")
    factor_type = data.draw(st.sampled_from([float, np.float64]), label="factor_type")
    (offset,), mode, out_offset = _draw_layout(data, backend)

    x, x_buffer = _make_input(backend, values, dtype, offset)
    x_before = _snapshot(backend, x)
    result, guard = _call_with_out(
        backend, scale_lib.scale, (x, factor_type(factor)), [x], shape, dtype, mode, out_offset
    )
    if guard is not None:
        _check_guards(backend, guard, out_offset, math.prod(shape))
    if mode != "inplace":
        np.testing.assert_array_equal(backend.to_numpy(x), x_before, err_msg="input modified")
    if x_buffer is not None:
        _check_guards(backend, x_buffer, offset, math.prod(shape))  # padding untouched

    rtol = TOLERANCES[dtype][0]
    with np.errstate(invalid="ignore", over="ignore"):
        expected = _as_seen_by_kernel(backend, x_before, dtype) * np.float64(factor)
    expected, compared = _ieee_overflow(expected, dtype, rtol)
    actual = backend.to_numpy(result)
    expected = _allow_flushed(backend, actual, expected, dtype)
    assert_close(actual[compared], expected[compared], dtype)
    zeros = (expected == 0) & compared  # exact zeros keep the IEEE sign (x * -0.0, -x * 0.0 ...)
    np.testing.assert_array_equal(
        np.signbit(actual[zeros]), np.signbit(expected[zeros]), err_msg="sign of zero"
    )


# ---------------------------------------------------------------------------------------------
# axpby
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ALL, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_axpby_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(), label="shape")
    # |a x| + |b y| stays finite in the compute type; a 16-bit result may overflow.
    emax = int(_finfo(_compute_dtype(dtype)).maxexp) - 3
    max_abs = 2.0**500 if dtype == "float64" else None
    x_values = data.draw(float_arrays(shape, dtype, max_abs=max_abs), label="x")
    y_values = data.draw(float_arrays(shape, dtype, max_abs=max_abs), label="y")
    largest = max(1.0, float(np.max(np.abs(x_values), initial=0)), float(np.max(np.abs(y_values), initial=0)))
    a = data.draw(scalars(dtype, max_abs=2.0**emax / largest), label="a")
    b = data.draw(scalars(dtype, max_abs=2.0**emax / largest), label="b")
    (x_offset, y_offset), mode, out_offset = _draw_layout(data, backend, inputs=2)
    if mode == "inplace" and data.draw(st.booleans(), label="inplace_into_y"):
        mode = "inplace_y"

    x, x_buffer = _make_input(backend, x_values, dtype, x_offset)
    y, y_buffer = _make_input(backend, y_values, dtype, y_offset)
    x_before, y_before = _snapshot(backend, x), _snapshot(backend, y)
    if mode == "inplace_y":
        result = scale_lib.axpby(x, y, a, b, out=y)
        assert result is y
        guard = None
    else:
        result, guard = _call_with_out(
            backend, scale_lib.axpby, (x, y, a, b), [x, y], shape, dtype, mode, out_offset
        )
    if guard is not None:
        _check_guards(backend, guard, out_offset, math.prod(shape))
    if mode != "inplace":
        np.testing.assert_array_equal(backend.to_numpy(x), x_before, err_msg="x modified")
    if mode != "inplace_y":
        np.testing.assert_array_equal(backend.to_numpy(y), y_before, err_msg="y modified")
    for buffer, offset in ((x_buffer, x_offset), (y_buffer, y_offset)):
        if buffer is not None:
            _check_guards(backend, buffer, offset, math.prod(shape))

    with np.errstate(invalid="ignore", over="ignore"):
        ax = np.float64(a) * _as_seen_by_kernel(backend, x_before, dtype)
        by = np.float64(b) * _as_seen_by_kernel(backend, y_before, dtype)
        expected = ax + by
    expected, compared = _ieee_overflow(expected, dtype, REDUCTION_TOLERANCES[dtype][0])
    actual = backend.to_numpy(result)
    assert actual.shape == expected.shape
    _assert_sum_close(actual[compared], expected[compared], (np.abs(ax) + np.abs(by))[compared], dtype)


def _assert_sum_close(actual: np.ndarray, expected: np.ndarray, terms: np.ndarray, dtype: str) -> None:
    """``actual`` is ``expected = a x + b y`` computed in finite precision.

    Where the terms do not cancel (``|expected| >= (|a x| + |b y|) / 2``), this is
    assert_close(reduction=True). Where they do, rounding each term in the compute type (and
    ``float32(a)``, documented) leaves an error of a few units of the terms, not of their sum:
    the bound there is the REDUCTION_TOLERANCES rtol of ``|a x| + |b y|``, plus atol.
    """
    rtol, atol = REDUCTION_TOLERANCES[dtype]
    with np.errstate(invalid="ignore"):
        cancelling = np.abs(expected) < terms / 2  # False for inf and NaN
    assert_close(actual[~cancelling], expected[~cancelling], dtype, reduction=True)
    error = np.abs(actual[cancelling] - expected[cancelling])
    bound = rtol * terms[cancelling] + atol
    bad = ~(error <= bound)  # NaN fails
    if bad.any():
        i = np.flatnonzero(cancelling)[np.flatnonzero(bad)[:5]]
        raise AssertionError(
            f"{int(bad.sum())} cancelling sums off by more than {rtol} * (|a x| + |b y|) + {atol}: "
            f"at flat indices {i.tolist()}, got {actual[cancelling][bad][:5]}, expected "
            f"{expected[cancelling][bad][:5]} (|a x| + |b y| = {terms[cancelling][bad][:5]})"
        )


# ---------------------------------------------------------------------------------------------
# rms_norm
# ---------------------------------------------------------------------------------------------
def _rms_norm_magnitudes(dtype: str) -> dict[str, float]:
    if dtype == "float16":
        return {"min_abs": 2.0**-24}  # every float16 is safe in float32 accumulation
    e = 200 if dtype == "float64" else 30
    return {"min_abs": 2.0**-e, "max_abs": 2.0**e}


def _eps_in_kernel(backend: Backend, eps: float, dtype: str) -> float:
    """eps as the kernel adds it: in the compute type, and under DAZ a subnormal is 0."""
    seen = float(np.float32(eps)) if _compute_dtype(dtype) == "float32" else eps
    return float(_as_seen_by_kernel(backend, np.array(seen), dtype))


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


# ---------------------------------------------------------------------------------------------
# flatnonzero
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", NOT_JIT, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_flatnonzero_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(), label="shape")
    subnormal = float(_finfo(dtype).smallest_subnormal)
    specials = (NAN, -0.0, 0.0, math.inf, -math.inf, subnormal, -3 * subnormal)
    values = data.draw(float_arrays(shape, dtype, specials=specials), label="x")
    offset = _draw_offset(data, backend, "input_offset")

    x, _ = _make_input(backend, values, dtype, offset)
    expected = np.flatnonzero(backend.to_numpy(x))
    result = scale_lib.flatnonzero(x)
    check_native(backend, result, "int64", expected.shape)
    np.testing.assert_array_equal(np.asarray(backend.to_numpy(result), dtype=np.int64), expected)


# ---------------------------------------------------------------------------------------------
# l2_norm
# ---------------------------------------------------------------------------------------------
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

    seen = _as_seen_by_kernel(backend, x64, dtype)
    with np.errstate(over="ignore"):
        expected = np.sqrt(np.sum(seen**2))
    rtol = REDUCTION_TOLERANCES[dtype][0]
    expected, compared = _ieee_overflow(np.asarray(expected), dtype, rtol)
    actual = backend.to_numpy(result)
    assert_close(actual[compared], expected[compared], dtype, reduction=True)
