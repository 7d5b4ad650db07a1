"""JAX glue: every op is an XLA FFI target, registered through jax-tvm-ffi.

XLA allocates the output and passes it to the library as a view, so JAX arrays are never
written in place. Targets are named ``scale_lib.<op>`` and registered once per process, for the
CPU and GPU platforms: when scale_lib is imported after JAX, or else on the first JAX call. A
CPU-only build registers the GPU target too, so that under ``jax.jit`` on a GPU the library's own
"built without CUDA support" error is what the user sees.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable

from ._lib import WITH_CUDA

if TYPE_CHECKING:
    from ._op import Op

_OPS: list[Op] = []
_registered = False
_lock = threading.Lock()


def add_op(op: Op) -> None:
    _OPS.append(op)


def register_targets() -> None:
    """Register every op's XLA FFI target (idempotent, thread-safe)."""
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        try:
            import jax_tvm_ffi
        except ImportError as err:
            raise ImportError(
                "scale_lib needs jax-tvm-ffi to run on JAX arrays: pip install 'scale-lib[jax]'"
            ) from err
        # jax-tvm-ffi keeps every registration for the life of the process (1024 at most), so
        # the names already registered are recorded on it: a re-executed copy of this module
        # (importlib.reload, a fresh import after sys.modules was cleared) registers nothing.
        done: set[str] = jax_tvm_ffi.__dict__.setdefault("_scale_lib_registered_targets", set())
        for op in _OPS:
            if op.jax_target in done:
                continue
            arg_spec = ["rets", "args", *(f"attrs.{name}" for name, _ in op.attrs)]
            for platform in ("cpu", "gpu"):
                jax_tvm_ffi.register_ffi_target(
                    op.jax_target,
                    op.fn,
                    arg_spec,
                    platform=platform,
                    allow_cuda_graph=op.cuda_graph_safe,
                )
            done.add(op.jax_target)
        _registered = True


def register_if_jax_imported() -> None:
    if "jax" in sys.modules:
        register_targets()


def _attribute(value: Any) -> Any:
    # XLA attributes are typed: pass Python scalars with the width the C++ signature expects.
    import numpy as np

    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value)
    return np.float64(value)


def _check_platform(x: Any) -> None:
    import jax

    if isinstance(x, jax.core.Tracer):
        return  # placement is decided at lowering time; XLA picks the target by platform
    platform = next(iter(x.devices())).platform
    if platform in ("gpu", "cuda") and not WITH_CUDA:
        raise ValueError(
            "x is a JAX array on the GPU, but scale_lib was built without CUDA support. "
            "Rebuild with the CUDA toolkit (nvcc) installed, or pass a CPU array"
        )
    if platform not in ("cpu", "gpu", "cuda"):
        raise ValueError(
            f"x is a JAX array on unsupported platform {platform!r}; scale_lib supports cpu and gpu"
        )


def call(op: Op, x: Any, attrs: tuple[Any, ...]) -> Any:
    """Run ``op`` on JAX array ``x`` through XLA; same checks as the library, raised in Python."""
    if str(x.dtype) not in op.dtypes:
        raise TypeError(
            f"x has unsupported dtype {x.dtype}; expected one of {', '.join(op.dtypes)}"
        )
    _check_platform(x)
    register_targets()
    return _differentiable(op)(x, attrs)


def _ffi_call(op: Op, x: Any, attrs: tuple[Any, ...]) -> Any:
    import jax

    result = jax.ShapeDtypeStruct(x.shape, x.dtype)
    kwargs = {name: _attribute(value) for (name, _), value in zip(op.attrs, attrs)}
    # broadcast_all: under jax.vmap the kernel sees the batched array, which an elementwise
    # kernel handles as is -- a batching rule, not a loop over the batch.
    return jax.ffi.ffi_call(op.jax_target, result, vmap_method="broadcast_all")(x, **kwargs)


@functools.cache
def _differentiable(op: Op) -> Callable[[Any, tuple[Any, ...]], Any]:
    """``op`` as a JAX function of ``(x, attrs)``, with a custom VJP where the op has one."""
    if op.vjp is None:
        return functools.partial(_ffi_call, op)
    import jax

    f = jax.custom_vjp(functools.partial(_ffi_call, op), nondiff_argnums=(1,))

    def forward(x: Any, attrs: tuple[Any, ...]) -> tuple[Any, None]:
        return _ffi_call(op, x, attrs), None

    def backward(attrs: tuple[Any, ...], _: None, grad: Any) -> tuple[Any]:
        return (op.vjp(grad, *attrs),)

    f.defvjp(forward, backward)
    return f
