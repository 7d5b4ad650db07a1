# SPDX-License-Identifier: Apache-2.0
"""A CUDA kernel compiled at run time by NVRTC, specialised on the row length, dtype and GPU,
with an ahead-of-time fallback (docs/nvrtc.md).

softmax's declaration, registered once, and its typed public function."""

from __future__ import annotations

from typing import Any

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, Input, OpSpec, Output

# The example of a CUDA kernel compiled at run time (docs/nvrtc.md): NVRTC specialises it on the
# row length, dtype and GPU at the first call; the ahead-of-time kernel is the fallback.
_softmax = register(
    OpSpec(
        "softmax",
        inputs=(Input("x", min_ndim=1),),
        vjp=lambda grad, out, x: _softmax_vjp(grad, out),
        sharding="rows",
    )
)

# The backward, grad_x = y * (grad - sum(grad * y)) over the row for y = softmax(x): a private op
# (one kernel), with derivatives of its own in each framework's array functions, so that
# second-order gradients of softmax are right.
_softmax_backward = register(
    OpSpec(
        "softmax_backward",
        inputs=(Input("y", min_ndim=1), Input("grad")),
        output=Output(like="y"),
        vjp=lambda cotangent, out, y, grad: _softmax_backward_vjp(cotangent, y, grad),
        jvp=lambda tangents, out, y, grad: _softmax_backward_jvp(tangents, y, grad),
        sharding="rows",
        public=False,
    )
)


def _softmax_vjp(grad: Any, out: Any) -> tuple[Any]:
    return (_softmax_backward.call((out, grad)),)


def _row_dot(a: Any, b: Any) -> Any:
    """sum(a * b) over the last dimension, kept as a dimension of size 1."""
    from scale_lib._namespace import array_namespace

    xp = array_namespace(a)
    dot = xp.sum(a * b, axis=-1)
    return xp.reshape(dot, (*dot.shape, 1))


def _softmax_backward_vjp(cotangent: Any, y: Any, grad: Any) -> tuple[Any, Any]:
    # grad_x = y * (grad - s), s = sum(grad * y): with c the cotangent of grad_x,
    # d/dgrad = y * (c - sum(c * y)) (the op itself), d/dy = c * (grad - s) - grad * sum(c * y).
    return (
        cotangent * (grad - _row_dot(grad, y)) - grad * _row_dot(cotangent, y),
        _softmax_backward.call((y, cotangent)),
    )


def _softmax_backward_jvp(tangents: tuple[Any, Any], y: Any, grad: Any) -> Any:
    # d grad_x = dy * (grad - s) + y * (dgrad - sum(dgrad * y) - sum(grad * dy)).
    tangent_y, tangent_grad = tangents
    result = None
    if tangent_y is not None:
        result = tangent_y * (grad - _row_dot(grad, y)) - y * _row_dot(grad, tangent_y)
    if tangent_grad is not None:
        part = _softmax_backward.call((y, tangent_grad))
        result = part if result is None else result + part
    return result


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
