"""`pytest --require-gpu` (the GPU session's run): an installed framework whose CUDA tests would
skip for want of a GPU or of its CUDA build fails the run before any test, instead of skipping.
The rule is checked here on made-up machines, and on this one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from backends import GPU_FRAMEWORKS, _module, gpu_shortfalls, has_gpu, probe_gpu_shortfalls

import scale_lib

EVERYTHING = dict.fromkeys(GPU_FRAMEWORKS, True)


def test_a_gpu_machine_with_every_cuda_build_passes() -> None:
    assert gpu_shortfalls(EVERYTHING, EVERYTHING, EVERYTHING, library_cuda=True) == []


def test_cupy_importable_without_a_gpu_fails() -> None:
    sees_gpu = {**EVERYTHING, "cupy": False}
    (shortfall,) = gpu_shortfalls(EVERYTHING, sees_gpu, EVERYTHING, library_cuda=True)
    assert shortfall.startswith("cupy is installed but sees no CUDA GPU")


def test_a_cpu_only_torch_or_jax_fails() -> None:
    sees_gpu = {**EVERYTHING, "torch": False, "jax": False}
    found = gpu_shortfalls(EVERYTHING, sees_gpu, {**EVERYTHING, "torch": False}, library_cuda=True)
    assert [s.split()[0] for s in found] == ["torch", "jax"]


def test_paddles_cpu_build_is_allowed_but_not_a_cuda_one_without_gpu() -> None:
    # PyPI has no Paddle 3 GPU build: its CPU build on a GPU machine is expected.
    no_gpu = {**EVERYTHING, "paddle": False}
    assert gpu_shortfalls(EVERYTHING, no_gpu, no_gpu, library_cuda=True) == []
    (shortfall,) = gpu_shortfalls(EVERYTHING, no_gpu, EVERYTHING, library_cuda=True)
    assert shortfall.startswith("paddle is installed but sees no CUDA GPU")


def test_frameworks_not_installed_are_no_shortfall() -> None:
    nothing = dict.fromkeys(GPU_FRAMEWORKS, False)
    assert gpu_shortfalls(nothing, nothing, nothing, library_cuda=True) == []


def test_a_library_without_cuda_fails() -> None:
    (shortfall,) = gpu_shortfalls(EVERYTHING, EVERYTHING, EVERYTHING, library_cuda=False)
    assert "without CUDA" in shortfall


def test_this_machine() -> None:
    # Every installed framework that sees no GPU here is named (on a machine without a GPU:
    # each one installed), and so is a library built without CUDA.
    found = " ".join(probe_gpu_shortfalls())
    for framework in ("torch", "jax", "cupy"):
        if _module(framework) is not None and not has_gpu(framework):
            assert f"{framework} is installed but sees no CUDA GPU" in found
    assert ("built without CUDA" in found) == (not scale_lib.cuda_available())


def test_the_option_fails_the_run_before_any_test() -> None:
    # The real run, where it must fail: one that would skip CUDA tests. Where nothing would skip
    # (a GPU machine with every CUDA build), it runs this test file alone instead.
    expected_failure = bool(probe_gpu_shortfalls())
    # A run of its own: not an xdist worker's (pytest-benchmark, where installed, refuses to
    # configure under one when warnings are errors).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "--require-gpu", "-q", "-p", "no:cacheprovider",
         "-p", "no:benchmark", __file__, "-k", "not the_option"],
        capture_output=True, text=True, cwd=Path(__file__).parent, timeout=600,
        env={**env, "SCALE_LIB_REQUIRE_GPU": ""},
    )  # fmt: skip
    if expected_failure:
        assert child.returncode == 4, child.stdout + child.stderr  # pytest's usage error
        assert "--require-gpu: CUDA tests would skip" in child.stderr
    else:
        assert child.returncode == 0, child.stdout + child.stderr
