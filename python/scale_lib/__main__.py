"""``python -m scale_lib``: call scale from every installed framework and device, and say so.

Each framework is tried on its own: one that is installed but fails to import or to start (a
broken install, ``JAX_PLATFORMS`` naming no platform it has) is reported on its own line, and
the others still run. The exit status is 1 when a call gave a wrong result or raised, or an
installed framework failed to start; frameworks that are not installed are listed as skipped.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tvm_ffi

import scale_lib

FACTOR = 2.5


def _import(name: str) -> Any:
    """The framework ``name``, or None when it is not installed. Any other failure to import it
    (a broken install, a library it cannot load) is raised: the report shows it on the
    framework's line."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name == name:
            return None
        raise


Case = tuple[str, str, Callable[[], tuple[Any, Any]]]


# One function per framework: its cases, each (framework, device, make) where make() returns
# (x, reference x * FACTOR). They run one framework at a time, so that a framework that fails to
# start (JAX_PLATFORMS naming no platform, a CUDA library that will not load) is reported on its
# own line and the others are still tried.
def _numpy_cases(np: Any) -> list[Case]:
    return [("numpy", "cpu", lambda: (np.arange(4, dtype=np.float32), np.arange(4) * FACTOR))]


def _torch_cases(torch: Any) -> list[Case]:
    cases: list[Case] = []
    for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):

        def make_torch(dev: str = dev) -> tuple[Any, Any]:
            return torch.arange(4.0, device=dev), torch.arange(4.0, device=dev) * FACTOR

        cases.append(("torch", dev, make_torch))
    return cases


def _jax_cases(jax: Any) -> list[Case]:
    if _import("jax_tvm_ffi") is None:
        return []
    cases: list[Case] = []
    for platform in {d.platform for d in jax.devices()} | {"cpu"}:

        def make_jax(platform: str = platform) -> tuple[Any, Any]:
            x = jax.device_put(jax.numpy.arange(4.0), jax.devices(platform)[0])
            return x, x * FACTOR

        dev = "cuda" if platform == "gpu" else platform
        cases += [("jax", dev, make_jax), ("jax.jit", dev, make_jax)]
    return cases


def _paddle_cases(paddle: Any) -> list[Case]:
    def make_paddle() -> tuple[Any, Any]:
        return paddle.arange(4, dtype="float32"), paddle.arange(4, dtype="float32") * FACTOR

    return [("paddle", "cpu", make_paddle)]


def _cupy_cases(cupy: Any) -> list[Case]:
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return []
    except Exception:  # noqa: BLE001 - CuPy without a working CUDA runtime: no GPU
        return []
    return [("cupy", "cuda", lambda: (cupy.arange(4, dtype=cupy.float32), cupy.arange(4) * FACTOR))]


FRAMEWORKS: tuple[tuple[str, Callable[[Any], list[Case]]], ...] = (
    ("numpy", _numpy_cases),
    ("torch", _torch_cases),
    ("jax", _jax_cases),
    ("paddle", _paddle_cases),
    ("cupy", _cupy_cases),
)


def _failure(error: BaseException) -> str:
    """An exception on one line: its type and the first line of its message."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


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
    print(f"  library: {info['library']}: {info['library_reason']}")
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
    missing = []
    for name, cases_of in FRAMEWORKS:
        try:
            module = _import(name)
            if module is None:
                missing.append(name)
                continue
            cases = cases_of(module)
        except Exception as error:  # noqa: BLE001 - the framework's own failure to start
            failures += 1
            print(f"  {name:8s} {'':5s} -> {_failure(error)}")
            continue
        failures += sum(not _report(case, bool(info["cuda"])) for case in cases)
    if missing:
        print("not installed (skipped): " + ", ".join(missing))
    return 1 if failures else 0


def _report(case: Case, with_cuda: bool) -> bool:
    """Call scale on the case's array and print the outcome; False when it failed."""
    framework, device, make = case
    if device == "cuda" and not with_cuda:
        print(f"  {framework:8s} {device:5s} skipped: scale_lib was built without CUDA")
        return True
    try:
        x, expected = make()
        if framework == "jax.jit":
            y = sys.modules["jax"].jit(lambda v: scale_lib.scale(v, FACTOR))(x)
        else:
            y = scale_lib.scale(x, FACTOR)
        got = _as_list(y)  # JAX reports a kernel's error when the result is read
        want = _as_list(expected)
    except Exception as error:  # noqa: BLE001 - e.g. a driver older than the build needs
        print(f"  {framework:8s} {device:5s} -> {_failure(error)}")
        return False
    ok = got == want
    print(
        f"  {framework:8s} {device:5s} -> {got}  {type(y).__module__}.{type(y).__name__}"
        f"  {'ok' if ok else 'WRONG'}"
    )
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
