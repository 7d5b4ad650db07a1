# SPDX-License-Identifier: Apache-2.0
"""An elementwise kernel at the memory roofline.

scale's declaration, registered once, and its typed public function."""

from __future__ import annotations

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, Attr, OpSpec

# [scale_op.begin]
_scale = register(
    OpSpec(
        "scale",
        attrs=(Attr("factor", float),),
        vjp=lambda grad, out, x, factor: (scale(grad, factor),),  # d(x * f)/dx = f
        sharding="elementwise",
        linear=True,
    )
)
# [scale_op.end]


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
        Differentiable (PyTorch, JAX, Paddle); works under ``torch.compile``, ``jax.jit`` and
        ``jax.vmap``.

    Raises:
        TypeError: ``x``/``out`` is not an array, has an unsupported or mismatched dtype, or
            ``factor`` is not a real number; ``out`` given with a JAX ``x``.
        ValueError: shape or device mismatch, a non-contiguous array, a read-only ``out``, an
            unsupported device, or a CUDA array with a CPU-only build.
    """
    return _scale.call((x,), (factor,), out)


# [scale_api.end]
