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
