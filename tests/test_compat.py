"""Which TVM-FFI and which NVIDIA driver the library accepts, and the clear errors outside that."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tvm_ffi

import scale_lib
from scale_lib import _lib

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}
    )


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


# ---------------------------------------------------------------------------------------------
# TVM-FFI
# ---------------------------------------------------------------------------------------------
def test_supported_range_is_declared_once() -> None:
    """pyproject.toml's dependency, the import-time check and the nox sessions name one range."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = f"apache-tvm-ffi>={_dotted(_lib.TVM_FFI_LOWEST)},<{_dotted(_lib.TVM_FFI_BELOW)}"
    assert declared in pyproject["project"]["dependencies"]
    noxfile = (ROOT / "noxfile.py").read_text()
    lowest = re.search(r'^TVM_FFI_LOWEST = "(.+)"', noxfile, re.M)
    highest = re.search(r'^TVM_FFI_HIGHEST = "(.+)"', noxfile, re.M)
    assert lowest and _lib._release(lowest.group(1)) == _lib.TVM_FFI_LOWEST
    assert highest and _lib.TVM_FFI_LOWEST <= _lib._release(highest.group(1)) < _lib.TVM_FFI_BELOW


def test_installed_tvm_ffi_is_supported() -> None:
    assert _lib.TVM_FFI_LOWEST <= _lib._release(tvm_ffi.__version__) < _lib.TVM_FFI_BELOW


@pytest.mark.parametrize(
    ("version", "release"),
    [("0.1.15.post2", (0, 1, 15)), ("0.1.11", (0, 1, 11)), ("0.2.0rc1", (0, 2, 0)), ("1", (1,))],
)
def test_release_parsing(version: str, release: tuple[int, ...]) -> None:
    assert _lib._release(version) == release


@pytest.mark.parametrize("reported", ["0.2.0", "1.0.0", "0.1.10", "0.0.9"])
def test_import_refuses_an_unsupported_tvm_ffi(reported: str) -> None:
    # A fresh interpreter where apache-tvm-ffi reports another version: import fails at once,
    # naming the version found and the range needed.
    child = _run(f"import tvm_ffi; tvm_ffi.__version__ = {reported!r}; import scale_lib")
    assert child.returncode != 0
    wanted = f">={_dotted(_lib.TVM_FFI_LOWEST)},<{_dotted(_lib.TVM_FFI_BELOW)}"
    assert f"ImportError: scale_lib supports apache-tvm-ffi {wanted}, but apache-tvm-ffi {reported}" in (
        child.stderr
    )


def test_import_accepts_the_supported_range_ends() -> None:
    newest = f"{_lib.TVM_FFI_BELOW[0]}.{_lib.TVM_FFI_BELOW[1] - 1}.99"
    for reported in (_dotted(_lib.TVM_FFI_LOWEST), newest):
        child = _run(f"import tvm_ffi; tvm_ffi.__version__ = {reported!r}; import scale_lib")
        assert child.returncode == 0, child.stderr


def test_abi_check_names_both_versions() -> None:
    message = r"compiled against TVM-FFI 0\.1\.16, but the loaded libtvm_ffi is TVM-FFI 0\.2\.0 \("
    with pytest.raises(ImportError, match=message + r"apache-tvm-ffi 0\.2\.0\)"):
        _lib.check_tvm_ffi_abi("0.1.16", "0.2.0", "0.2.0")
    _lib.check_tvm_ffi_abi("0.1.16", "0.1.12", "0.1.11")  # same minor: accepted


def test_build_info_records_both_tvm_ffi_versions() -> None:
    info = scale_lib.build_info()
    compiled, loaded = _lib._release(info["tvm_ffi_compiled"]), _lib._release(info["tvm_ffi_runtime"])
    assert len(compiled) == 3 and len(loaded) == 3
    assert compiled[:2] == loaded[:2]


# ---------------------------------------------------------------------------------------------
# NVIDIA driver
# ---------------------------------------------------------------------------------------------
# A CUDA tensor over host memory (numpy's DLPack export with the device type rewritten): the
# driver check runs before anything touches the data.
_FAKE_CUDA_CALL = """
import ctypes, numpy as np, tvm_ffi, scale_lib
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
a = np.ones(4, np.float32)
capsule = a.__dlpack__(max_version=(1, 0))
# DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags, then the DLTensor's
# data pointer and device type.
ctypes.c_int32.from_address(get(capsule, b"dltensor_versioned") + 40).value = 2  # kDLCUDA
t = tvm_ffi.from_dlpack(capsule)
try:
    scale_lib.lib.scale(t, t, 2.0)
except RuntimeError as e:
    print("RuntimeError:", e)
print("cpu still works:", scale_lib.scale(np.arange(3, dtype=np.float32), 2.0).tolist())
"""


def _cuda_build() -> dict[str, str]:
    if not scale_lib.cuda_available():
        pytest.skip("CPU-only build: no CUDA driver check")
    return scale_lib.build_info()


def test_build_info_reports_cuda_runtime_and_driver() -> None:
    info = _cuda_build()
    runtime = _lib._release(info["cuda_runtime_version"])
    assert len(runtime) == 2
    assert info["cuda_driver_minimum"] == f"{runtime[0]}.0"
    assert info["cuda_driver_version"] == "" or len(_lib._release(info["cuda_driver_version"])) == 2


@pytest.mark.parametrize("driver", [(11, 8), (12, 0)])
def test_old_driver_raises_naming_both_versions(driver: tuple[int, int]) -> None:
    info = _cuda_build()
    needed = info["cuda_driver_minimum"]
    encoded = 1000 * driver[0] + 10 * driver[1]
    if encoded >= 1000 * _lib._release(needed)[0]:
        pytest.skip(f"a driver for CUDA {_dotted(driver)} is new enough for this build")
    child = _run(_FAKE_CUDA_CALL, SCALE_LIB_FAKE_CUDA_DRIVER_VERSION=str(encoded))
    assert child.returncode == 0, child.stderr
    assert (
        f"RuntimeError: the NVIDIA driver is too old for scale_lib's CUDA kernels: it supports CUDA "
        f"{_dotted(driver)}, and this build (CUDA runtime {info['cuda_runtime_version']}) needs a "
        f"driver for CUDA {needed} or newer"
    ) in child.stdout, child.stdout
    assert "cpu still works: [0.0, 2.0, 4.0]" in child.stdout


def test_new_enough_driver_passes_the_check() -> None:
    info = _cuda_build()
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU is present; a fake CUDA pointer must not reach it")
    # The driver the build needs, exactly: the check passes and the call reaches CUDA, which
    # fails on the fake pointer (or for lack of a GPU) with CUDA's own error, not the check's.
    major = _lib._release(info["cuda_driver_minimum"])[0]
    child = _run(_FAKE_CUDA_CALL, SCALE_LIB_FAKE_CUDA_DRIVER_VERSION=str(1000 * major))
    assert child.returncode == 0, child.stderr
    assert "too old" not in child.stdout
    assert "cpu still works" in child.stdout
