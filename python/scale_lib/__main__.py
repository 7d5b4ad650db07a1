"""``python -m scale_lib``: call scale from every installed framework and device, and say so."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tvm_ffi

import scale_lib

FACTOR = 2.5


def _try_import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


Case = tuple[str, str, Callable[[], tuple[Any, Any]]]


def _cases() -> list[Case]:
    """(framework, device, make) where make() returns (x, reference x * FACTOR)."""
    cases: list[Case] = []
    np = _try_import("numpy")
    if np is not None:
        cases.append(("numpy", "cpu", lambda: (np.arange(4, dtype=np.float32), np.arange(4) * FACTOR)))
    torch = _try_import("torch")
    if torch is not None:
        for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):

            def make_torch(dev: str = dev) -> tuple[Any, Any]:
                return torch.arange(4.0, device=dev), torch.arange(4.0, device=dev) * FACTOR

            cases.append(("torch", dev, make_torch))
    jax = _try_import("jax")
    if jax is not None and _try_import("jax_tvm_ffi") is not None:
        for platform in {d.platform for d in jax.devices()} | {"cpu"}:

            def make_jax(platform: str = platform) -> tuple[Any, Any]:
                x = jax.device_put(jax.numpy.arange(4.0), jax.devices(platform)[0])
                return x, x * FACTOR

            dev = "cuda" if platform == "gpu" else platform
            cases += [("jax", dev, make_jax), ("jax.jit", dev, make_jax)]
    paddle = _try_import("paddle")
    if paddle is not None:

        def make_paddle() -> tuple[Any, Any]:
            return paddle.arange(4, dtype="float32"), paddle.arange(4, dtype="float32") * FACTOR

        cases.append(("paddle", "cpu", make_paddle))
    cupy = _try_import("cupy")
    if cupy is not None:
        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                cases.append(
                    ("cupy", "cuda", lambda: (cupy.arange(4, dtype=cupy.float32), cupy.arange(4) * FACTOR))
                )
        except Exception:  # noqa: BLE001 - CuPy without a working CUDA runtime: no GPU
            pass
    return cases


def _as_list(a: Any) -> list[float]:
    if hasattr(a, "tolist"):
        return [float(v) for v in a.tolist()]
    return [float(v) for v in a.numpy().tolist()]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _driver_lines(info: dict[str, Any]) -> list[str]:
    """The CUDA runtime built in, the installed driver, and whether they go together."""
    runtime, minimum, driver = (
        info["cuda_runtime_version"],
        info["cuda_driver_minimum"],
        info["cuda_driver_version"],
    )
    lines = [f"  CUDA runtime {runtime} (linked in); needs a driver for CUDA {minimum} or newer"]
    if not driver:
        return [*lines, "  NVIDIA driver: none found: CUDA arrays cannot be used"]
    module = Path("/proc/driver/nvidia/version")
    # "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  580.95.05  ...": the first
    # dotted number after "Module" is the release.
    text = module.read_text() if module.exists() else ""
    found_release = re.search(r"Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    release = found_release.group(1) if found_release else ""
    found = f"  NVIDIA driver{f' {release}' if release else ''}: supports CUDA {driver}: "
    if _version(driver) >= _version(runtime):
        return [*lines, found + "matches (the runtime's version or newer)"]
    if _version(driver) >= _version(minimum):
        return [
            *lines,
            found + f"compatible (CUDA {minimum}+ minor-version compatibility: the built-in machine "
            f"code runs; PTX for GPUs newer than the build needs a driver for CUDA {runtime})",
        ]
    return [*lines, found + "TOO OLD: CUDA calls raise RuntimeError; update the driver"]


def main() -> int:
    info = scale_lib.build_info()
    cuda = f"CUDA {info['cuda_version']} ({info['cuda_architectures']})" if info["cuda"] else "CPU only"
    print(f"scale_lib {scale_lib.__version__}: {cuda}")
    if info["cuda"]:
        print("\n".join(_driver_lines(info)))
        triton = (
            f"compiled by Triton {info['triton']}" if info["triton"] else "not built (no CUDA for their ops)"
        )
        print(f"  Triton kernels: {triton}")
    print(
        f"  TVM-FFI: compiled against {info['tvm_ffi_compiled']}, loaded {info['tvm_ffi_runtime']} "
        f"(apache-tvm-ffi {tvm_ffi.__version__})"
    )
    print(f"scale_lib.scale(x, {FACTOR}) with x = [0, 1, 2, 3]:")
    failures = 0
    for framework, device, make in _cases():
        if device == "cuda" and not info["cuda"]:
            print(f"  {framework:8s} {device:5s} skipped: scale_lib was built without CUDA")
            continue
        x, expected = make()
        fn = scale_lib.scale
        try:
            if framework == "jax.jit":
                y = _try_import("jax").jit(lambda v: scale_lib.scale(v, FACTOR))(x)
            else:
                y = fn(x, FACTOR)
            got = _as_list(y)  # JAX reports a kernel's error when the result is read
        except RuntimeError as error:  # e.g. a driver older than the build needs
            failures += 1
            print(f"  {framework:8s} {device:5s} -> {type(error).__name__}: {error}")
            continue
        ok = got == _as_list(expected)
        failures += not ok
        print(
            f"  {framework:8s} {device:5s} -> {got}  {type(y).__module__}.{type(y).__name__}"
            f"  {'ok' if ok else 'WRONG'}"
        )
    missing = [m for m in ("numpy", "torch", "jax", "paddle", "cupy") if _try_import(m) is None]
    if missing:
        print("not installed (skipped): " + ", ".join(missing))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
