"""The public ops. Each takes arrays of any supported framework and returns the same kind."""

from __future__ import annotations

import numbers
import sys
from typing import Any, TypeVar

from ._op import Op

ArrayT = TypeVar("ArrayT")


def _real_scalar(value: Any, arg_name: str) -> float:
    if type(value) is float or type(value) is int:  # the common case, without an ABC check
        return float(value)
    # bool is a numbers.Real, but scaling by True is almost certainly a mistake.
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{arg_name} must be a concrete Python number, not a traced JAX value: it is a "
            "compile-time attribute of the XLA call. Under jax.jit, close over it or mark it "
            "static (static_argnums)"
        )
    raise TypeError(f"{arg_name} must be a real number (int or float); got {type(value).__name__}")


_scale = Op(
    "scale",
    attrs=(("factor", float),),
    vjp=lambda grad, factor: scale(grad, factor),  # d(x * f)/dx = f
    cuda_graph_safe=True,
)


# [scale_api.begin]
def scale(x: ArrayT, factor: float, *, out: ArrayT | None = None) -> ArrayT:
    """Multiply every element of ``x`` by ``factor``: ``out = x * factor``.

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array of any shape, from NumPy,
            PyTorch, JAX, PaddlePaddle or CuPy, on the CPU or a CUDA GPU.
        factor: A real Python or NumPy number. 16-bit inputs are computed in float32 and
            rounded to nearest-even; float32 uses ``float32(factor)``.
        out: Optional array to write into, with the dtype, shape and device of ``x``. It may be
            ``x`` itself (in place), but must not otherwise overlap it. Not allowed for JAX
            arrays, which are immutable.

    Returns:
        ``out`` if given, else a new array of the framework, device, dtype and shape of ``x``.
        For JAX arrays this works eagerly and under ``jax.jit``.

    Raises:
        TypeError: ``x``/``out`` is not an array, has an unsupported or mismatched dtype, or
            ``factor`` is not a real number; ``out`` given with a JAX ``x``.
        ValueError: shape or device mismatch, a non-contiguous array, a read-only ``out``, an
            unsupported device, or a CUDA array with a CPU-only build.
    """
    return _scale.call(x, (_real_scalar(factor, "factor"),), out)
# [scale_api.end]
