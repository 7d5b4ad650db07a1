"""Test backends: one per (framework, device), each able to make arrays from NumPy data, read
them back as float64 NumPy, and call an op the way that framework's users do.

A backend whose framework or device is missing skips with the reason; it never fails.
"""

from __future__ import annotations

import functools
import importlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import scale_lib

DTYPES = ("float16", "bfloat16", "float32", "float64")
# The library's headers, for kernels a test builds itself (tvm_ffi.cpp.load_inline).
INCLUDE = Path(__file__).resolve().parent.parent / "include"


def skip_without_nvcc(what: str) -> None:
    """Skip, naming ``what`` the test would build, where no nvcc is found."""
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip(f"nvcc is needed to build {what}")


def capture_cuda_graph(step: Callable[[], Any]) -> tuple[Any, Any]:
    """(a torch.cuda.CUDAGraph of ``step()``, the captured call's result), ``step`` warmed up
    on a side stream first, as capture requires."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = step()
    return graph, result


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@functools.cache
def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:  # also a framework that is installed but broken
        return None


@functools.cache
def has_gpu(framework: str) -> bool:
    try:
        if framework == "torch":
            return bool(_module("torch").cuda.is_available())
        if framework == "cupy":
            return _module("cupy").cuda.runtime.getDeviceCount() > 0
        if framework == "paddle":
            paddle = _module("paddle")
            return paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
        if framework in ("jax", "jax_jit"):
            return any(d.platform == "gpu" for d in _module("jax").devices())
    except Exception:  # noqa: BLE001 - a framework without a working GPU runtime has no GPU
        return False
    return False


_IMPORT_NAME = {"jax_jit": "jax"}

# [gpu_required.begin]
# The frameworks with CUDA arrays, and the one whose CUDA build may be missing on a GPU machine:
# Paddle 3's GPU build is not on PyPI, so a GPU run may have its CPU build alone.
GPU_FRAMEWORKS = ("torch", "jax", "cupy", "paddle")
GPU_BUILD_OPTIONAL = ("paddle",)


def gpu_shortfalls(
    installed: dict[str, bool], sees_gpu: dict[str, bool], cuda_build: dict[str, bool], library_cuda: bool
) -> list[str]:
    """Why CUDA tests would skip for want of a GPU build where a GPU is required (pytest
    --require-gpu): the library built without CUDA, or an installed framework that sees no GPU
    (its CPU-only build, or no driver), unless it is one whose GPU build may be missing
    (GPU_BUILD_OPTIONAL) and this is its CPU-only build. A framework not installed is no
    shortfall: its tests skip as "not installed" wherever they run."""
    found = []
    if not library_cuda:
        found.append("scale_lib was built without CUDA: every CUDA test would skip")
    for framework in GPU_FRAMEWORKS:
        if not installed.get(framework) or sees_gpu.get(framework):
            continue
        if framework in GPU_BUILD_OPTIONAL and not cuda_build.get(framework):
            continue  # its CPU-only build: nothing to run on the GPU
        found.append(f"{framework} is installed but sees no CUDA GPU (a CPU-only build, or no driver)")
    return found


def probe_gpu_shortfalls() -> list[str]:
    """:func:`gpu_shortfalls` for the frameworks and library of this process."""
    installed = {f: _module(f) is not None for f in GPU_FRAMEWORKS}
    shortfalls = []
    if installed["jax"] and _module("jax_tvm_ffi") is None:
        shortfalls.append("jax is installed without jax-tvm-ffi: its tests would skip")
    cuda_build = {}
    if installed["paddle"]:
        try:
            cuda_build["paddle"] = bool(_module("paddle").device.is_compiled_with_cuda())
        except Exception:  # noqa: BLE001 - a broken Paddle build counts as a CPU one
            cuda_build["paddle"] = False
    sees_gpu = {f: installed[f] and has_gpu(f) for f in GPU_FRAMEWORKS}
    return shortfalls + gpu_shortfalls(installed, sees_gpu, cuda_build, scale_lib.cuda_available())


# [gpu_required.end]


@dataclass(frozen=True)
class Backend:
    framework: str  # numpy, torch, paddle, cupy, jax (eager), jax_jit
    device: str  # cpu or cuda

    @property
    def id(self) -> str:
        return f"{self.framework}-{self.device}"

    @property
    def is_jax(self) -> bool:
        return self.framework in ("jax", "jax_jit")

    @property
    def mod(self) -> Any:
        return _module(_IMPORT_NAME.get(self.framework, self.framework))

    def skip_reason(self) -> str | None:
        import_name = _IMPORT_NAME.get(self.framework, self.framework)
        if self.mod is None:
            return f"{import_name} is not installed"
        if self.is_jax and _module("jax_tvm_ffi") is None:
            return "jax-tvm-ffi is not installed"
        if self.device == "cuda":
            if not has_gpu(self.framework):
                return f"no CUDA GPU visible to {import_name}"
            if not scale_lib.cuda_available():
                return "scale_lib was built without CUDA (see test_build.py)"
        return None

    def skip_if_unavailable(self) -> None:
        reason = self.skip_reason()
        if reason:
            pytest.skip(reason)

    # -- arrays ------------------------------------------------------------------------------
    def asarray(self, data: np.ndarray, dtype: str) -> Any:
        """``data`` (any NumPy array) converted to ``dtype`` on this backend."""
        host = np.array(data, dtype=numpy_dtype(dtype), order="C")  # keeps 0-d arrays 0-d
        fw = self.framework
        if fw == "numpy":
            return host
        if fw == "torch":
            torch = self.mod
            t = torch.from_numpy(host.astype(np.float32) if dtype == "bfloat16" else host)
            return t.to(device=self.device, dtype=getattr(torch, dtype))
        if self.is_jax:
            jax = self.mod
            return jax.device_put(host, self._jax_device())
        if fw == "paddle":
            paddle = self.mod
            place = paddle.CUDAPlace(0) if self.device == "cuda" else paddle.CPUPlace()
            t = paddle.to_tensor(host.astype(np.float32) if dtype == "bfloat16" else host, place=place)
            return t.astype(dtype)
        if fw == "cupy":
            if dtype == "bfloat16":
                pytest.skip("CuPy has no bfloat16 dtype")
            return self.mod.asarray(host)
        raise AssertionError(fw)

    def to_numpy(self, a: Any) -> np.ndarray:
        """A float64 NumPy copy of backend array ``a``."""
        fw = self.framework
        if fw == "numpy":
            return np.asarray(a).astype(np.float64)
        if fw == "torch":  # .to() returns the tensor itself if it is already float64 on the CPU
            return a.detach().to("cpu", self.mod.float64).numpy().copy()
        if self.is_jax:
            return np.asarray(a).astype(np.float64)
        if fw == "paddle":
            return a.astype("float64").cpu().numpy()
        if fw == "cupy":
            return self.mod.asnumpy(a).astype(np.float64)
        raise AssertionError(fw)

    def is_native(self, a: Any) -> bool:
        """Whether ``a`` is an array of this framework on this device."""
        fw = self.framework
        if fw == "numpy":
            return type(a) is np.ndarray
        if fw == "torch":
            return isinstance(a, self.mod.Tensor) and a.device.type == self.device
        if self.is_jax:
            return isinstance(a, self.mod.Array) and self._jax_platform(a) == self._jax_platform_name
        if fw == "paddle":
            return isinstance(a, self.mod.Tensor) and (
                a.place.is_gpu_place() if self.device == "cuda" else a.place.is_cpu_place()
            )
        if fw == "cupy":
            return isinstance(a, self.mod.ndarray)
        raise AssertionError(fw)

    def guarded_out(self, shape: tuple[int, ...], dtype: str, sentinel: float, guard: int = 16):
        """A contiguous ``out`` view inside a larger buffer, all filled with ``sentinel``.

        Returns ``(buffer, out)``: after a call, ``buffer[:guard]`` and ``buffer[-guard:]`` must
        still hold the sentinel (no stray writes) and ``out`` must hold no sentinel (no missing
        writes). The offset also exercises the DLPack ``byte_offset``/data-pointer handling.
        """
        assert not self.is_jax, "JAX arrays are immutable"
        n = int(np.prod(shape))
        buffer = self.asarray(np.full(n + 2 * guard, sentinel), dtype)
        return buffer, buffer[guard : guard + n].reshape(shape)

    def run(self, fn: Callable[..., Any], x: Any, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(x, *args, **kwargs)`` as this backend's users do (inside jax.jit for jax_jit)."""
        if self.framework == "jax_jit":
            return self.mod.jit(lambda v: fn(v, *args, **kwargs))(x)
        return fn(x, *args, **kwargs)

    def synchronize(self) -> None:
        if self.device != "cuda":
            return
        if self.framework == "torch":
            self.mod.cuda.synchronize()
        elif self.framework == "cupy":
            self.mod.cuda.Device().synchronize()

    # -- JAX placement -----------------------------------------------------------------------
    @property
    def _jax_platform_name(self) -> str:
        return "gpu" if self.device == "cuda" else "cpu"

    def _jax_device(self) -> Any:
        return self.mod.devices(self._jax_platform_name)[0]

    @staticmethod
    def _jax_platform(a: Any) -> str:
        return next(iter(a.devices())).platform


FRAMEWORKS = ("numpy", "torch", "paddle", "cupy", "jax", "jax_jit")
_DEVICES = {
    "numpy": ("cpu",),
    "torch": ("cpu", "cuda"),
    "paddle": ("cpu", "cuda"),
    "cupy": ("cuda",),
    "jax": ("cpu", "cuda"),
    "jax_jit": ("cpu", "cuda"),
}

ALL_BACKENDS = tuple(Backend(fw, dev) for fw in FRAMEWORKS for dev in _DEVICES[fw])


def backend_params(backends=ALL_BACKENDS) -> list[Any]:
    """``pytest.param`` per backend, GPU ones marked ``gpu``."""
    return [pytest.param(b, id=b.id, marks=[pytest.mark.gpu] if b.device == "cuda" else []) for b in backends]


MUTABLE_BACKENDS = [p for p in backend_params() if not p.values[0].is_jax]
JAX_BACKENDS = [p for p in backend_params() if p.values[0].is_jax]


def backend_out_params(backends=ALL_BACKENDS) -> list[Any]:
    """(backend, out_mode) params: "out" (write into a given array) only where arrays are
    mutable, so JAX gets "new" alone."""
    params = []
    for p in backend_params(backends):
        backend = p.values[0]
        for out_mode in ("new",) if backend.is_jax else ("new", "out"):
            params.append(pytest.param(backend, out_mode, id=f"{backend.id}-{out_mode}", marks=p.marks))
    return params


def check_native(backend: Backend, result: Any, dtype: str, shape: tuple[int, ...]) -> None:
    """``result`` is an array of ``backend``'s framework and device, with this dtype and shape."""
    assert backend.is_native(result), f"{type(result)} is not a {backend.id} array"
    assert str(result.dtype).endswith(dtype), f"dtype {result.dtype} is not {dtype}"
    assert tuple(result.shape) == tuple(shape), f"shape {tuple(result.shape)} is not {shape}"


def shape_id(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "0d"


# -- inputs of more than 2^31 elements (tests marked large) ----------------------------------
LARGE_N = 2**31 + 4099  # past int32, with a tail that fills no 16-byte pack


def marked_ones(torch: Any, n: int) -> Any:
    """float16 CUDA ones, with distinct values at indices past 2^31."""
    x = torch.ones(n, dtype=torch.float16, device="cuda")
    x[2**31 + 7] = 3.0
    x[-1] = -2.0
    return x
