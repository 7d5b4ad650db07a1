"""The CPU kernels compute in one floating-point mode, whatever the caller's: subnormal numbers are
honoured (no flush-to-zero, no denormals-are-zero) on the calling thread and on every pool thread.

So the same input gives the same bits from an IEEE caller, from a caller that turned
flush-to-zero on (``torch.set_flush_denormal(True)``) before or after the library's thread pool
started, from JAX (whose CPU threads flush), and with one thread or several. Every op with a CPU
kernel is checked (``declared_cases``), on inputs of subnormal values large enough to be split
across the pool. Each configuration runs in a subprocess: the mode and the pool are per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cases import declared_cases

pytest.importorskip("torch", reason="torch.set_flush_denormal switches the caller's mode")

TESTS = Path(__file__).resolve().parent
CASES = [c.name for c in declared_cases("cpu")]

# For each op and dtype: the sha256 of every output's bytes, three calls in a row, and whether
# the first output has a non-zero element (so that a kernel that flushes cannot pass).
_CHILD = textwrap.dedent(
    """
    import hashlib, json, sys
    import ml_dtypes, numpy as np, torch
    sys.path.insert(0, sys.argv[1])
    from backends import numpy_dtype
    from cases import declared_cases

    mode = sys.argv[2]
    SHAPE = (64, 4096)  # 2**18 elements: split across the pool's threads

    def inputs(case, dtype):
        rng = np.random.default_rng(0)
        np_dtype = numpy_dtype(dtype)
        tiny = float(ml_dtypes.finfo(np_dtype).smallest_subnormal)
        # x: multiples of the smallest subnormal, so every non-zero element is subnormal; the
        # other inputs (a weight, y): the same at even positions, small integers at odd ones.
        arrays = []
        for i, s in enumerate(case.shapes(SHAPE).values()):
            values = rng.integers(-64, 65, s) * tiny
            if i > 0:
                odd = np.arange(values.size).reshape(s) % 2 == 1
                values = np.where(odd, rng.integers(1, 5, s), values)
            arrays.append(values.astype(np_dtype))
        return arrays

    def digest(result):
        return hashlib.sha256(np.ascontiguousarray(np.asarray(result)).tobytes()).hexdigest()

    # Made before any mode change: NumPy's own arithmetic flushes under flush-to-zero.
    INPUTS = [
        (case, dtype, inputs(case, dtype))
        for case in declared_cases("cpu")
        for dtype in ("float32", "bfloat16", "float64")
    ]

    def run_all(wrap=lambda a: a):
        out = {}
        for case, dtype, arrays in INPUTS:
            results = [case.call(*map(wrap, arrays)) for _ in range(3)]
            out[f"{case.name}:{dtype}"] = [
                [digest(r) for r in results],
                bool(np.any(np.atleast_1d(np.asarray(results[0])).view(np.uint8) != 0)),
            ]
        return out

    if mode == "ftz-before":
        run_all()  # the pool starts in the IEEE mode
    if mode.startswith("ftz"):
        if not torch.set_flush_denormal(True):
            print(json.dumps("unsupported"))
            sys.exit(0)
    result = run_all()
    if mode == "jax":
        import jax
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_enable_x64", True)
        result = run_all(jax.numpy.asarray)
    print(json.dumps(result))
    """
)


def _run(mode: str, threads: int) -> dict:
    env = {**os.environ, "SCALE_LIB_NUM_THREADS": str(threads)}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(TESTS), mode],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    if result == "unsupported":
        pytest.skip("this CPU has no flush-to-zero mode for torch.set_flush_denormal")
    return result


@pytest.fixture(scope="module")
def ieee_one_thread() -> dict:
    result = _run("ieee", 1)
    assert set(result) == {f"{n}:{d}" for n in CASES for d in ("float32", "bfloat16", "float64")}
    for key, (digests, nonzero) in result.items():
        # In float64 a sum of squares of subnormals is 0 by IEEE rules; float32's is not.
        assert nonzero or not key.endswith(":float32"), f"{key}: all zeros in the IEEE mode"
        assert len(set(digests)) == 1, f"{key}: different bits from call to call"
    return result


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("mode", ["ieee", "ftz-before", "ftz-after"])
def test_same_bits_whatever_the_callers_mode_and_thread_count(
    ieee_one_thread: dict, mode: str, threads: int
) -> None:
    result = _run(mode, threads)
    for key, (digests, _) in result.items():
        assert digests == ieee_one_thread[key][0], (
            f"{key}: caller mode {mode!r} with {threads} threads changed the result"
        )


def test_same_bits_inside_jax_cpu_threads(ieee_one_thread: dict) -> None:
    pytest.importorskip("jax_tvm_ffi")
    result = _run("jax", 4)
    for key, (digests, _) in result.items():
        assert digests == ieee_one_thread[key][0], f"{key}: JAX's CPU threads changed the result"
