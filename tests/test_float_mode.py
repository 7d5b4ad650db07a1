"""The CPU kernels compute in one floating-point environment, whatever the caller's: IEEE's
default, round to nearest-even with subnormal numbers honoured (no flush-to-zero, no
denormals-are-zero) and no traps, on the calling thread and on every pool thread.

So the same input gives the same bits from an IEEE caller, from a caller that turned
flush-to-zero on (``torch.set_flush_denormal(True)``) before or after the library's thread pool
started, from JAX (whose CPU threads flush), and with one thread or several; and from a caller
in any rounding direction (``fesetround``), also when the pool was started in one, or with
floating-point traps enabled (``feenableexcept``), whose own environment is as it was after each
call. Every op with a CPU kernel is checked (``declared_cases``), on inputs large enough to be
split across the pool. Each configuration runs in a subprocess: the environment and the pool are
per process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cases import declared_cases

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch.set_flush_denormal switches the caller's mode",
)

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
    # 2**19 elements: enough for every op to use 2 threads (a reduction splits 2**16-element
    # blocks, at least 4 a thread; elementwise and row-wise ops 2**15 elements a thread).
    SHAPE = (128, 4096)

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


def _child_result(code: str, args: list[str], threads: int, unsupported: str) -> Any:
    """The JSON a child Python running ``code`` prints last, with ``threads`` pool threads;
    a skip saying ``unsupported`` where it prints "unsupported"."""
    env = {**os.environ, "SCALE_LIB_NUM_THREADS": str(threads)}
    child = subprocess.run(
        [sys.executable, "-c", code, str(TESTS), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    if result == "unsupported":
        pytest.skip(unsupported)
    return result


def _run(mode: str, threads: int) -> dict:
    return _child_result(
        _CHILD, [mode], threads, "this CPU has no flush-to-zero mode for torch.set_flush_denormal"
    )


@pytest.fixture(scope="module")
def ieee_one_thread() -> dict:
    result = _run("ieee", 1)
    assert set(result) == {f"{n}:{d}" for n in CASES for d in ("float32", "bfloat16", "float64")}
    for key, (digests, nonzero) in result.items():
        # In float64 a sum of squares of subnormals is 0 by IEEE rules; float32's is not.
        assert nonzero or not key.endswith(":float32"), f"{key}: all zeros in the IEEE mode"
        assert len(set(digests)) == 1, f"{key}: different bits from call to call"
    return result


@needs_torch
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


@needs_torch
def test_same_bits_inside_jax_cpu_threads(ieee_one_thread: dict) -> None:
    pytest.importorskip("jax_tvm_ffi")
    result = _run("jax", 4)
    for key, (digests, _) in result.items():
        assert digests == ieee_one_thread[key][0], f"{key}: JAX's CPU threads changed the result"


# <fenv.h>'s constants, which differ by architecture: the rounding directions and the exceptions
# that trap (an overflow, an invalid operation, a division by zero).
_FENV = {
    "x86_64": ({"nearest": 0, "downward": 0x400, "upward": 0x800, "towardzero": 0xC00}, 0x1 | 0x4 | 0x8),
    "aarch64": ({"nearest": 0, "upward": 0x400000, "downward": 0x800000, "towardzero": 0xC00000}, 0x7),
}
_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
DIRECTIONS = ["upward", "downward", "towardzero"]

# Every op and dtype, called in the caller's environment `env`: the sha256 of each result, and
# whether the caller's environment was as before after every call. `order` is the sequence of
# environments, the first of which starts the pool; "traps" is round-to-nearest with overflow,
# invalid-operation and division-by-zero traps on (the inputs overflow: a kernel that ran with
# them would kill the process).
_ROUNDING_CHILD = textwrap.dedent(
    """
    import ctypes, ctypes.util, hashlib, json, sys
    import ml_dtypes, numpy as np
    sys.path.insert(0, sys.argv[1])
    from backends import numpy_dtype
    from cases import declared_cases

    ROUNDING, TRAPS = json.loads(sys.argv[2])
    order = sys.argv[3].split(",")
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    # 2**19 elements: enough for every op to use 2 threads (a reduction splits 2**16-element
    # blocks, at least 4 a thread; elementwise and row-wise ops 2**15 elements a thread).
    SHAPE = (128, 4096)

    def inputs(case, dtype):
        rng = np.random.default_rng(0)
        np_dtype = numpy_dtype(dtype)
        arrays = []
        for i, s in enumerate(case.shapes(SHAPE).values()):
            values = rng.standard_normal(s)
            if i == 0:
                # Near the largest finite value, in x's odd rows (every thread's share has some;
                # the even rows keep row-wise results finite): what overflows to inf when
                # rounding to nearest is the largest finite value in another direction, so that
                # scaling by 2 (exact otherwise) depends on the direction too.
                big = values.reshape(-1, s[-1])[1::2, ::97]
                big[...] = 0.75 * float(ml_dtypes.finfo(np_dtype).max) * np.sign(big)
            arrays.append(values.astype(np_dtype))
        return arrays

    def digest(result):
        return hashlib.sha256(np.ascontiguousarray(np.asarray(result)).tobytes()).hexdigest()

    # The caller's environment as its own float32 arithmetic sees it: 1/3, -1/3 and 2/3 round
    # apart in every direction from round-to-nearest.
    PROBE = np.array([1.0, -1.0, 2.0], np.float32)

    def probe():
        return (PROBE / np.float32(3.0)).tobytes().hex()

    # Made before any change of the environment: NumPy's own arithmetic follows it.
    INPUTS = [
        (case, dtype, inputs(case, dtype))
        for case in declared_cases("cpu")
        for dtype in ("float32", "bfloat16", "float64")
    ]

    def enter(env):
        if env == "traps":
            libm.fesetround(ROUNDING["nearest"])
            # feenableexcept is glibc's; it returns -1 where the CPU cannot trap (most ARM).
            if not hasattr(libm, "feenableexcept") or libm.feenableexcept(TRAPS) == -1:
                print(json.dumps("unsupported"))
                sys.exit(0)
        else:
            libm.fesetround(ROUNDING[env])

    def leave(env):
        if env == "traps":
            libm.fedisableexcept(TRAPS)
        libm.fesetround(ROUNDING["nearest"])

    out = {"probes": {}}
    for env in order:
        enter(env)
        before = (libm.fegetround(), probe(), env == "traps" and libm.fegetexcept())
        digests, restored = {}, True
        for case, dtype, arrays in INPUTS:
            digests[f"{case.name}:{dtype}"] = digest(case.call(*arrays))
            restored &= (libm.fegetround(), probe(), env == "traps" and libm.fegetexcept()) == before
        leave(env)
        out[env] = [digests, restored]
        out["probes"][env] = before[1]
    print(json.dumps(out))
    """
)


def _run_rounding(order: list[str]) -> dict:
    if _ARCH not in _FENV:
        pytest.skip(f"no <fenv.h> constants here for {platform.machine()}")
    return _child_result(
        _ROUNDING_CHILD,
        [json.dumps(_FENV[_ARCH]), ",".join(order)],
        2,
        "this CPU or C library cannot trap floating-point exceptions",
    )


@pytest.fixture(scope="module")
def in_every_direction() -> dict:
    """The pool started by a round-to-nearest call, then every rounding direction in turn."""
    result = _run_rounding(["nearest", *DIRECTIONS])
    assert set(result["nearest"][0]) == {
        f"{n}:{d}" for n in CASES for d in ("float32", "bfloat16", "float64")
    }
    # The caller's own arithmetic did round in each direction around the calls.
    probes = result["probes"]
    assert all(probes[d] != probes["nearest"] for d in DIRECTIONS), probes
    return result


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_same_bits_in_every_rounding_direction(in_every_direction: dict, direction: str) -> None:
    digests, restored = in_every_direction[direction]
    nearest, _ = in_every_direction["nearest"]
    changed = [key for key in nearest if digests[key] != nearest[key]]
    assert not changed, f"rounding {direction} in the caller changed the results of {changed}"
    assert restored, f"the caller's rounding {direction} was not restored after a call"


def test_same_bits_after_the_pool_started_rounding_upward(in_every_direction: dict) -> None:
    # The pool's threads start in the environment of the thread that starts them: here, one
    # rounding upward. Neither that call nor the round-to-nearest calls after it may round so.
    result = _run_rounding(["upward", "nearest"])
    nearest, _ = in_every_direction["nearest"]
    for env in ("upward", "nearest"):
        digests, restored = result[env]
        changed = [key for key in nearest if digests[key] != nearest[key]]
        assert not changed, f"a pool started rounding upward changed {changed} ({env} caller)"
        assert restored, f"the caller's environment ({env}) was not restored after a call"


def test_same_bits_with_traps_enabled(in_every_direction: dict) -> None:
    # Overflowing inputs with the overflow trap on: inf, as IEEE says, and no signal.
    digests, restored = _run_rounding(["traps"])["traps"]
    nearest, _ = in_every_direction["nearest"]
    changed = [key for key in nearest if digests[key] != nearest[key]]
    assert not changed, f"the caller's enabled traps changed the results of {changed}"
    assert restored, "the caller's traps were not enabled again after a call"
