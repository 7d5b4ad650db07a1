"""Every CPU kernel gives the same bits whichever instruction set its loops run on and whatever
the thread count: the library picks baseline, AVX2 or AVX-512 loops at run time
(kernels/cpu_float.h) and ``SCALE_LIB_CPU_SIMD`` caps the level. Driven by the declared ops:
each public op with a CPU kernel, in every floating dtype, on rows long enough for every loop's
vector body and tail."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cases import declared_cases

SIMD_LEVELS = ["baseline", "avx2", "avx512"]
DTYPES = ["float16", "bfloat16", "float32", "float64"]
# Rows longer than a vector body and its tail, and rows short enough for a kernel that converts
# a short 16-bit row whole and a longer one a chunk at a time to take its other path.
SHAPES = [(3, 2 * 4099), (4, 1000)]


def _np_dtype(dtype: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


def results() -> dict[str, np.ndarray]:
    """Every public CPU op's result in every dtype, as raw bits."""
    out = {}
    for case in declared_cases("cpu"):
        for dtype in DTYPES:
            for shape in SHAPES:
                inputs = [a.astype(_np_dtype(dtype)) for a in case.numpy_inputs(36, shape).values()]
                result = np.asarray(case.call(*inputs))
                out[f"{case.name} {dtype} {shape}"] = result.view(f"u{result.dtype.itemsize}")
    return out


_CHILD = textwrap.dedent(
    """
    import sys, importlib
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    np.savez(sys.argv[3], **getattr(importlib.import_module(sys.argv[2]), sys.argv[4])())
    """
)


def assert_same_bits_on_level(level: str, module: str, function: str, tmp_path: Path) -> None:
    """``module.function()`` (raw bits by name) in a child capped at ``level`` on one thread
    equals this process's (the widest set this CPU has, its default threads). The level is read
    once per process: a child each."""
    env = {**os.environ, "SCALE_LIB_CPU_SIMD": level, "SCALE_LIB_NUM_THREADS": "1"}
    out = tmp_path / "results.npz"
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(Path(__file__).parent), module, str(out), function],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    theirs = np.load(out)
    ours = getattr(sys.modules[module], function)()
    assert sorted(theirs.files) == sorted(ours)
    for name, bits in ours.items():
        np.testing.assert_array_equal(theirs[name], bits, err_msg=f"{name} on {level}")


@pytest.mark.parametrize("level", SIMD_LEVELS)
def test_every_cpu_op_gives_the_same_bits_on_every_instruction_set(level: str, tmp_path: Path) -> None:
    assert_same_bits_on_level(level, __name__, "results", tmp_path)


def every_16_bit_value() -> dict[str, np.ndarray]:
    """``scale`` (the op every library keeps) of every float16 and bfloat16 bit pattern, by
    factors that keep, halve (into subnormals) and triple (past the largest finite value) each:
    the bulk 16-bit conversions of every instruction set on NaNs, infinities and subnormals."""
    import scale_lib

    every = np.arange(1 << 16, dtype=np.uint16)
    out = {}
    for dtype in ("float16", "bfloat16"):
        for factor in (1.0, 0.5, 3.0):
            result = scale_lib.scale(every.view(_np_dtype(dtype)), factor)
            out[f"{dtype} x{factor}"] = result.view(np.uint16)
    return out


@pytest.mark.parametrize("level", SIMD_LEVELS)
def test_16_bit_conversions_give_the_same_bits_on_every_instruction_set(level: str, tmp_path: Path) -> None:
    assert_same_bits_on_level(level, __name__, "every_16_bit_value", tmp_path)


def test_16_bit_conversions_round_to_nearest_even() -> None:
    """Against NumPy's own float32 product rounded to the 16-bit type (nearest-even); a NaN stays
    a NaN (its payload quieted)."""
    for name, bits in every_16_bit_value().items():
        dtype, factor = name.split(" x")
        every = np.arange(1 << 16, dtype=np.uint16).view(_np_dtype(dtype))
        with np.errstate(invalid="ignore", over="ignore"):  # NaN inputs; tripled past the largest
            expected = (every.astype(np.float32) * np.float32(factor)).astype(_np_dtype(dtype))
        got = bits.view(_np_dtype(dtype))
        nan = np.isnan(expected.astype(np.float32))
        assert np.array_equal(np.isnan(got.astype(np.float32)), nan), name
        np.testing.assert_array_equal(got.view(np.uint16)[~nan], expected.view(np.uint16)[~nan], err_msg=name)
