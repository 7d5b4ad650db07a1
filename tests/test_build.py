"""The built library: metadata, the bare ABI, symbol hygiene, and CPU-only builds."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm_ffi
from backends import ALL_BACKENDS, backend_params, has_gpu

import scale_lib


def _loaded_library() -> Path:
    """The library this process actually mapped (libscale_lib.so, or the release wheel's CUDA 12
    or CUDA 13 one: build_info() names it)."""
    name = scale_lib.build_info()["library"]
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith("/" + name):
            return Path(line.split(maxsplit=5)[5])
    raise AssertionError(f"{name} is not mapped")


def _gpu_present() -> bool:
    return Path("/dev/nvidiactl").exists() or any(
        b.mod is not None and has_gpu(b.framework) for b in ALL_BACKENDS
    )


def test_build_info() -> None:
    info = scale_lib.build_info()
    assert info["version"] == scale_lib.__version__
    assert isinstance(info["cuda"], bool) and info["cuda"] == scale_lib.cuda_available()
    if info["cuda"]:
        assert info["cuda_architectures"] and info["cuda_version"]


def test_distribution_version_matches() -> None:
    try:
        assert importlib.metadata.version("scale-lib") == scale_lib.__version__
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("scale_lib is imported from a source tree, not an installed distribution")


def test_bare_abi_is_outputs_first() -> None:
    assert isinstance(scale_lib.lib, tvm_ffi.Module)
    x = np.arange(5, dtype=np.float32)
    out = np.zeros_like(x)
    assert scale_lib.lib.scale(out, x, 3.0) is None
    np.testing.assert_array_equal(out, x * 3)


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_only_abi_symbols_are_exported() -> None:
    nm = subprocess.run(
        ["nm", "-D", "--defined-only", str(_loaded_library())], capture_output=True, text=True, check=True
    ).stdout
    functions = {line.split()[-1] for line in nm.splitlines() if line.split()[1] == "T"}
    assert {"__tvm_ffi_scale", "__tvm_ffi_build_info"} <= functions
    assert all(name.startswith("__tvm_ffi_") for name in functions), sorted(functions)
    assert not [s for s in nm.split() if s.startswith("cuda")], "CUDA runtime symbols leak"


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) is not installed")
def test_cuda_runtime_is_linked_statically() -> None:
    dynamic = subprocess.run(
        ["readelf", "-d", str(_loaded_library())], capture_output=True, text=True, check=True
    ).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert not [line for line in needed if "cudart" in line or "python" in line], needed


def test_cpu_only_build_rejects_cuda_tensors(fake_device_tensor) -> None:
    if scale_lib.cuda_available():
        pytest.skip("CUDA build; the CPU-only build runs this (nox -s tests_cpu_only)")
    x = fake_device_tensor(np.ones(4, np.float32), device_type=2)  # kDLCUDA
    out = fake_device_tensor(np.ones(4, np.float32), device_type=2)
    with pytest.raises(ValueError, match="x is a CUDA tensor, but scale_lib was built without CUDA support"):
        scale_lib.lib.scale(out, x, 2.0)


@pytest.mark.parametrize("backend", [p for p in backend_params() if p.values[0].device == "cuda"])
@pytest.mark.gpu
def test_cpu_only_build_rejects_real_gpu_arrays(backend) -> None:
    if scale_lib.cuda_available():
        pytest.skip("CUDA build; the CPU-only build runs this")
    if backend.mod is None or not backend.skip_reason().startswith("scale_lib was built without CUDA"):
        pytest.skip(backend.skip_reason() or "GPU present")
    x = backend.asarray(np.ones(4), "float32")
    # Eager calls are checked in Python; under jax.jit the array's placement is unknown until XLA
    # runs the kernel, so the library's error arrives as XLA's runtime error.
    errors = (
        (ValueError, backend.mod.errors.JaxRuntimeError) if backend.framework == "jax_jit" else ValueError
    )
    with pytest.raises(errors, match="scale_lib was built without CUDA support"):
        backend.run(scale_lib.scale, x, 2.0)


def test_cuda_build_without_gpu_raises_not_crashes() -> None:
    if not scale_lib.cuda_available():
        pytest.skip("CPU-only build")
    if _gpu_present():
        pytest.skip("a GPU is present; a fake CUDA pointer must not reach it")
    # In a subprocess: if the library crashed, only the child would die.
    code = """
import numpy as np, tvm_ffi, scale_lib
from scale_lib._numpy import _capsule_pointer, _DLManagedTensorVersioned
a = np.ones(4, np.float32)
capsule = a.__dlpack__(max_version=(1, 0))
managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
managed.dl_tensor.device_type = 2
t = tvm_ffi.from_dlpack(capsule)
try:
    scale_lib.lib.scale(t, t, 2.0)
except RuntimeError as e:
    print("RuntimeError:", e)
"""
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert child.returncode == 0, child.stderr
    assert "RuntimeError: CUDA Runtime Error" in child.stdout, child.stdout
