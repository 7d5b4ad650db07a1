# SPDX-License-Identifier: Apache-2.0
"""A CUDA kernel compiled at run time by NVRTC, specialised on the row length, dtype and GPU,
with an ahead-of-time fallback (docs/nvrtc.md).

softmax's declaration, registered once, and its typed public function."""

from __future__ import annotations

from typing import Any

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, Input, OpSpec


# The example of a CUDA kernel compiled at run time (docs/nvrtc.md): NVRTC specialises it on the
# row length, dtype and GPU at the first call; the ahead-of-time kernel is the fallback.
def _softmax_vjp(grad: Any, out: Any, x: Any) -> tuple[Any, ...]:
    # d softmax: out * (grad - sum(grad * out) over the row).
    from scale_lib._namespace import array_namespace

    xp = array_namespace(out)
    dot = xp.sum(grad * out, axis=-1)
    return (out * (grad - xp.reshape(dot, (*dot.shape, 1))),)


_softmax = register(
    OpSpec(
        "softmax",
        inputs=(Input("x", min_ndim=1),),
        vjp=_softmax_vjp,
        sharding="rows",
    )
)


def softmax(x: ArrayT, *, out: ArrayT | None = None) -> ArrayT:
    """``out = exp(x - max(x)) / sum(exp(x - max(x)))`` over the last dimension.

    On CUDA the first call for a row length, dtype and GPU compiles a kernel specialised on
    them with NVRTC (``pip install 'scale-lib[nvrtc]'``), cached in memory and on disk (see
    ``scale_lib.clear_kernel_cache()``); without NVRTC, or for rows longer than 32768 elements
    (16384 in float64), the ahead-of-time kernel for any row length runs. The first call for new
    values cannot happen during CUDA graph capture: call once before capturing. Runs on the CPU
    and CUDA GPUs.

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array of 1 or more dimensions;
            every leading dimension is a batch of rows. Accumulation is in float32 (float64 for
            float64). A NaN makes its row NaN.
        out: Optional array to write into, like ``x`` (may be ``x``; not for JAX).

    Returns:
        ``out``, or a new array like ``x``. Differentiable (PyTorch, JAX, Paddle).
    """
    return _softmax.call((x,), (), out)
