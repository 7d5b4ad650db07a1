# SPDX-License-Identifier: Apache-2.0
"""A scan along the last dimension: shared launchers that take the operator, a scheme per
shape, the same bits on every run.

cumsum's declaration, registered once, and its typed public function."""

from __future__ import annotations

from typing import Any

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, Attr, Input, OpSpec


# A scan along the last dimension (the shared scan launchers, kernels/scan.h).
# [cumsum_vjp.begin]
def _cumsum_vjp(grad: Any, out: Any, x: Any, reverse: bool) -> tuple[Any, ...]:
    # out[..., i] sums the values of the row up to i (reverse: from i to the end), so the
    # value at j reaches every out[..., i] with i >= j (reverse: i <= j): its gradient is the
    # scan of grad the other way, which cumsum itself computes (also differentiable).
    g = cumsum(grad, reverse=not reverse)
    return (g,)


# [cumsum_vjp.end]
_cumsum = register(
    OpSpec(
        "cumsum",
        inputs=(Input("x", min_ndim=1),),
        attrs=(Attr("reverse", bool),),
        vjp=_cumsum_vjp,
        sharding="rows",
    )
)


def cumsum(x: ArrayT, reverse: bool = False, *, out: ArrayT | None = None) -> ArrayT:
    """The running sum along the last dimension: ``out[..., i] = sum(x[..., :i + 1])``
    (with ``reverse``: ``sum(x[..., i:])``).

    16-bit inputs are summed in float32, float32 in float32, float64 in float64. On CUDA the
    same input gives the same bits on every call. Runs on the CPU and CUDA GPUs.

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array of 1 or more dimensions.
        reverse: Scan from the end of each row instead (default: from its start).
        out: Optional array to write into, like ``x`` (may be ``x``; not for JAX).

    Returns:
        ``out``, or a new array like ``x``. Differentiable (PyTorch, JAX, Paddle).
    """
    return _cumsum.call((x,), (reverse,), out)
