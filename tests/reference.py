"""NumPy float64 references and the per-dtype tolerances every test compares with."""

from __future__ import annotations

import numpy as np

# (rtol, atol) per dtype, the only place tolerances are set. A result rounded once to the output
# dtype is within half a unit in the last place: 2^-11 (float16), 2^-8 (bfloat16), 2^-24
# (float32, plus float32(factor) rounding); float64 matches the reference to the last bit but one.
# atol covers results that underflow to (sub)normals.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-7),
    "bfloat16": (8e-3, 1e-38),
    "float32": (3e-7, 1e-44),
    "float64": (1e-15, 0.0),
}


# Ops that reduce (norms, sums, gradients) add accumulation error to the final rounding:
# float32 accumulation over up to ~2^17 terms for the 16-bit and float32 types.
REDUCTION_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (2e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (3e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str, reduction: bool = False) -> None:
    """``actual`` (float64 copy of a result) matches the float64 ``expected`` for ``dtype``."""
    rtol, atol = (REDUCTION_TOLERANCES if reduction else TOLERANCES)[dtype]
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


def random_data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Float64 normal data (never zeros: they hide unwritten outputs)."""
    return np.asarray(np.random.default_rng(seed).standard_normal(shape), dtype=np.float64)


def scale_reference(x: np.ndarray, factor: float) -> np.ndarray:
    """``x * factor`` in float64, ``x`` being the float64 copy of the (rounded) input."""
    return x.astype(np.float64) * np.float64(factor)
