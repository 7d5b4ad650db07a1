# SPDX-License-Identifier: Apache-2.0
"""A kernel written in Triton, compiled ahead of time (no Triton at run time).

silu_and_mul's declaration, registered once, and its typed public function."""

from __future__ import annotations

from typing import Any

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, Input, OpSpec, Output


# A kernel written in Triton (kernels/silu_and_mul/silu_and_mul.py), compiled ahead of time.
def _check_gate(shape: tuple[int, ...]) -> None:
    if shape[-1] % 2:
        raise ValueError(f"x's last dimension must be even (the two halves of the gate); got shape {shape}")


def _gate_halved(shape: tuple[int, ...]) -> tuple[int, ...]:
    # A 0-d x has no gate: the library refuses it (x must have at least 1 dimension).
    return (*shape[:-1], shape[-1] // 2) if shape else shape


_GATE = Input("x", min_ndim=1, check=_check_gate)

_silu_and_mul_backward = register(
    OpSpec(
        "silu_and_mul_backward",
        inputs=(
            _GATE,
            Input("grad", shape=_gate_halved, shape_text="x's shape with the last dimension halved"),
        ),
        sharding="rows",
        public=False,
        triton=True,
    )
)
_silu_and_mul = register(
    OpSpec(
        "silu_and_mul",
        inputs=(_GATE,),
        output=Output(shape=lambda x: _gate_halved(tuple(x.shape))),
        vjp=lambda grad, out, x: (_silu_and_mul_backward.call((x, grad)),),
        jvp=lambda tangents, out, x: _silu_and_mul_jvp(tangents[0], out, x),
        sharding="rows",
        triton=True,
    )
)


def _silu_and_mul_jvp(tangent: Any, out: Any, x: Any) -> Any:
    # The backward kernel with a gradient of ones gives both halves' partial derivatives,
    # (silu'(a) * b, silu(a)); the tangent is their product with the tangent's halves, summed.
    from scale_lib._namespace import array_namespace

    partials = _silu_and_mul_backward.call((x, array_namespace(out).ones_like(out)))
    product = partials * tangent
    half = out.shape[-1]
    return product[..., :half] + product[..., half:]


def silu_and_mul(x: ArrayT, *, out: ArrayT | None = None) -> ArrayT:
    """The SwiGLU gate of LLaMA-style MLPs: for ``x`` of shape ``(..., 2 * d)``,
    ``out = silu(x[..., :d]) * x[..., d:]`` of shape ``(..., d)``, with
    ``silu(a) = a / (1 + exp(-a))``.

    The CUDA kernel is written in Triton, compiled ahead of time into the library (no Triton at
    run time); the CPU kernel is its C++ twin. Both compute in float32 (float64 for float64).

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array of 1 or more dimensions whose
            last dimension is even.
        out: Optional output of shape ``(..., d)``, ``x``'s dtype and device (not for JAX). It
            must not overlap ``x``.

    Returns:
        ``out``, or a new contiguous array of shape ``(..., d)``. Differentiable (PyTorch, JAX,
        Paddle); works under ``torch.compile``, ``jax.jit`` and ``jax.vmap``.
    """
    return _silu_and_mul.call((x,), (), out)
