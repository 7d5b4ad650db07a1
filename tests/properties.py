"""Shared machinery of the property-based tests (Hypothesis): each op's property tests live in
its own tests/test_<op>.py and check it against a NumPy float64 reference.

Where the matrix tests (test_scale.py, every test_<op>.py) check fixed shapes and data, these
draw shapes (0-d, zero-size and size-1 dimensions included), dtypes, data, scalar arguments and
memory layouts (views at an offset into a larger buffer, strided rows, ``out=`` fresh, in place
or inside a guarded buffer), run the op on every backend and compare with float64 NumPy computed
from the values the kernel actually sees (``backend.to_numpy`` of the rounded input).

Profiles (registered here, chosen by the environment variable SCALE_LIB_HYPOTHESIS_PROFILE):

  ci        the default: 25 examples per test and backend, derandomized (the same examples on
            every run, from the test's source), no example database, no deadline.
  thorough  500 random examples per test and backend, no deadline; failures are saved to
            Hypothesis's example database (.hypothesis/) and replayed first on the next run.

    SCALE_LIB_HYPOTHESIS_PROFILE=thorough python -m pytest tests -k property

The profile is applied to the property tests only (a decorator per test, PROFILE_SETTINGS), so
that it does not change the settings of other tests. Hypothesis prints a failing example as the draws of
``data``, with a ``@reproduce_failure`` blob that replays it (under ci, a failure also recurs on
every run: the examples are derandomized).

The domains, and why (each is a documented behaviour, not a tolerance):

* Scalars (``factor``, ``a``, ``b``) are 0 or normal numbers of the compute type (float32 for
  16-bit and float32 inputs, float64 for float64): the kernels compute with ``float32(factor)``,
  as documented, so a factor that is subnormal or out of range in float32 is not the factor the
  kernel multiplies by.
* A result too large for the dtype must be +-inf (IEEE); values within a rounding of the
  overflow threshold may be either, and are not compared.
* Subnormal inputs and results are exact IEEE values on every backend: the CPU kernels honour
  subnormals whatever the calling thread's mode (XLA's CPU threads flush them for JAX's own ops;
  ours do not), so no element is excused for being flushed to zero.
"""

from __future__ import annotations

import math
import os

import numpy as np
from backends import (
    DTYPES,
    Backend,
    backend_params,
    check_native,
    numpy_dtype,
)
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

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
NOT_JIT = [p for p in ALL if p.values[0].framework != "jax_jit"]  # for ops that cannot be jitted


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
def _ieee_overflow(expected: np.ndarray, dtype: str, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """``expected`` with results too large for ``dtype`` made +-inf, and the mask of the
    elements to compare: those within a rounding of the overflow threshold may be either."""
    threshold = _overflow_threshold(dtype)
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(expected)
        over = magnitude >= threshold * (1 + rtol)
        ambiguous = (magnitude > threshold * (1 - rtol)) & ~over & np.isfinite(expected)
    return np.where(over, np.copysign(np.inf, expected), expected), ~ambiguous


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
