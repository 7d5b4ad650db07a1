# SPDX-License-Identifier: Apache-2.0
"""Scratch memory from the caller's framework, never a hidden ``cudaMalloc``.

l2_norm's declaration, registered once, and its typed public function."""

from __future__ import annotations

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, OpSpec, Output

# A two-pass reduction that needs scratch memory.
_l2_norm = register(
    OpSpec(
        "l2_norm",
        output=Output(shape=lambda x: ()),
        # d|x|/dx = x / |x| (NaN at x = 0, as jnp.linalg.norm's gradient)
        vjp=lambda grad, out, x: (x * (grad / out),),
        jvp=lambda tangents, out, x: (x * tangents[0]).sum() / out,  # x . t / |x|
        workspace="l2_norm_workspace_bytes",
        sharding="reduction",
    )
)


def l2_norm(x: ArrayT) -> ArrayT:
    """The Euclidean norm of all elements of ``x``: ``sqrt(sum(x**2))``, accumulated in float64,
    as a 0-d array of ``x``'s dtype. Deterministic: the same input gives the same bits.

    On CUDA the reduction takes two passes with scratch memory between them, which comes from the
    caller's framework (PyTorch's or Paddle's allocator, jax-tvm-ffi's workspace under JAX) or,
    for CuPy, is allocated by scale_lib with CuPy and passed in; never from a hidden
    ``cudaMalloc``.

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array of any shape.

    Returns:
        A 0-d array of the caller's framework, device and dtype. Differentiable; under
        ``jax.vmap`` one norm per batch element.
    """
    return _l2_norm.call((x,))
