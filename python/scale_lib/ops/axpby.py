# SPDX-License-Identifier: Apache-2.0
"""A kernel shipped as an embedded CUBIN.

axpby's declaration, registered once, and its typed public function."""

from __future__ import annotations

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, Attr, Input, OpSpec

from .scale import scale

# A kernel shipped as an embedded CUBIN.
_axpby = register(
    OpSpec(
        "axpby",
        inputs=(Input("x"), Input("y")),
        attrs=(Attr("a", float), Attr("b", float)),
        vjp=lambda grad, out, x, y, a, b: (scale(grad, a), scale(grad, b)),
        sharding="elementwise",
        linear=True,  # in (x, y) jointly
    )
)


def axpby(x: ArrayT, y: ArrayT, a: float = 1.0, b: float = 1.0, *, out: ArrayT | None = None) -> ArrayT:
    """``out = a * x + b * y``, elementwise, in one pass over memory.

    The CUDA kernels are compiled to a multi-architecture CUBIN/fatbin at build time, embedded
    in the library and launched through TVM-FFI's CUBIN launcher (see the docs' CUBIN page).

    Args:
        x, y: Contiguous arrays of the same float dtype, shape and device (any framework; ``y``
            may come from another framework than ``x`` on the same device).
        a, b: Real numbers; computed in float32 for 16-bit inputs, as ``scale``.
        out: Optional output (may be ``x`` or ``y`` for in-place use; not for JAX).

    Returns:
        ``out``, or a new array like ``x``. Differentiable in ``x`` and ``y``.
    """
    return _axpby.call((x, y), (a, b), out)
