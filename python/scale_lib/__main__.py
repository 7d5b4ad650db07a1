"""``python -m scale_lib``: call scale from every installed framework and device, and say so."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

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


def main() -> int:
    info = scale_lib.build_info()
    cuda = f"CUDA {info['cuda_version']} ({info['cuda_architectures']})" if info["cuda"] else "CPU only"
    print(f"scale_lib {scale_lib.__version__}: {cuda}")
    print(f"scale_lib.scale(x, {FACTOR}) with x = [0, 1, 2, 3]:")
    failures = 0
    for framework, device, make in _cases():
        if device == "cuda" and not info["cuda"]:
            print(f"  {framework:8s} {device:5s} skipped: scale_lib was built without CUDA")
            continue
        x, expected = make()
        fn = scale_lib.scale
        if framework == "jax.jit":
            fn = _try_import("jax").jit(lambda v: scale_lib.scale(v, FACTOR))
            y = fn(x)
        else:
            y = fn(x, FACTOR)
        ok = _as_list(y) == _as_list(expected)
        failures += not ok
        print(
            f"  {framework:8s} {device:5s} -> {_as_list(y)}  {type(y).__module__}.{type(y).__name__}"
            f"  {'ok' if ok else 'WRONG'}"
        )
    missing = [m for m in ("numpy", "torch", "jax", "paddle", "cupy") if _try_import(m) is None]
    if missing:
        print("not installed (skipped): " + ", ".join(missing))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
