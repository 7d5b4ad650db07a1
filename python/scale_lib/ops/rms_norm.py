# SPDX-License-Identifier: Apache-2.0
"""A reduction kernel, an optional tensor, strided rows.

rms_norm's declaration, registered once, and its typed public function."""

from __future__ import annotations

import sys
from typing import Any

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, Attr, Input, JaxOptions, OpSpec, Output


# A reduction kernel, with an optional tensor argument.
def _ones_for_weight(x: Any) -> Any:
    # JAX has no "absent" FFI buffer: a weight of ones is the same computation.
    return sys.modules["jax.numpy"].ones(x.shape[-1:], x.dtype)


def _last_dim(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[-1:]


def _leading_dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-1]


_WEIGHT = Input(
    "weight",
    optional=True,
    shape=_last_dim,
    shape_text="the last dimension of x",
    jax_stand_in=_ones_for_weight,
)
_ROWS = JaxOptions(vmap_method="expand_dims")  # an unbatched weight stays one row

_rms_norm = register(
    OpSpec(
        "rms_norm",
        inputs=(Input("x", min_ndim=1, rows=True), _WEIGHT),
        attrs=(Attr("eps", float, minimum=0.0),),
        output=Output(rows=True),
        vjp=lambda grad, out, x, weight, eps: _rms_norm_vjp(grad, x, weight, eps),
        jvp=lambda tangents, out, x, weight, eps: _rms_norm_jvp(tangents, x, weight, eps),
        sharding="rows",
        jax=_ROWS,
    )
)

# The backward pieces: private ops, so that PyTorch (compiled backward included), JAX and Paddle
# run them like any other op.
_rms_norm_rstd = register(
    OpSpec(
        "rms_norm_rstd",
        inputs=(Input("x", min_ndim=1, rows=True),),
        attrs=(Attr("eps", float, minimum=0.0),),
        output=Output(shape=lambda x: x.shape[:-1], dtype="float64"),
        sharding="rows",
        public=False,
        jax=_ROWS,
    )
)
_RSTD = Input("rstd", dtype="float64", shape=_leading_dims, shape_text="the leading dimensions of x")
_rms_norm_backward = register(
    OpSpec(
        "rms_norm_backward",
        inputs=(Input("grad", min_ndim=1), Input("x", rows=True), _WEIGHT, _RSTD),
        output=Output(like="grad"),
        sharding="rows",
        public=False,
        jax=_ROWS,
    )
)
_rms_norm_weight_grad = register(
    OpSpec(
        "rms_norm_weight_grad",
        inputs=(Input("grad", min_ndim=1), Input("x", rows=True), _RSTD),
        output=Output(like="grad", shape=lambda grad, x, rstd: x.shape[-1:]),
        sharding="rows",
        public=False,
        jax=_ROWS,  # per-example weight gradients: one sum per batch element
    )
)


def _rms_norm_vjp(grad: Any, x: Any, weight: Any, eps: float) -> tuple[Any, Any]:
    rstd = _rms_norm_rstd.call((x,), (eps,))
    grad_x = _rms_norm_backward.call((grad, x, weight, rstd))
    grad_weight = None if weight is None else _rms_norm_weight_grad.call((grad, x, rstd))
    return grad_x, grad_weight


def _rms_norm_jvp(tangents: tuple[Any, Any], x: Any, weight: Any, eps: float) -> Any:
    # The Jacobian in x of x * rstd is symmetric, so its product with a tangent is the backward
    # kernel's (weight applied after); in the weight, the op itself with the tangent as weight.
    tangent_x, tangent_weight = tangents
    result = None
    if tangent_x is not None:
        rstd = _rms_norm_rstd.call((x,), (eps,))
        result = _rms_norm_backward.call((tangent_x, x, None, rstd))
        if weight is not None:
            result = result * weight
    if tangent_weight is not None:
        by_weight = _rms_norm.call((x, tangent_weight), (eps,))
        result = by_weight if result is None else result + by_weight
    return result


def rms_norm(
    x: ArrayT, weight: ArrayT | None = None, eps: float = 1e-6, *, out: ArrayT | None = None
) -> ArrayT:
    """Root-mean-square normalisation over the last dimension:
    ``out = x / sqrt(mean(x**2, axis=-1, keepdims=True) + eps) * weight``.

    Args:
        x: A float16, bfloat16, float32 or float64 array of 1 or more dimensions; every leading
            dimension is a batch of rows. Accumulation is in float32 (float64 for float64).
            Rows may be a strided slice of a wider array (``x[:, :hidden]``): the last dimension
            must be contiguous, the rows evenly spaced.
        weight: Optional scale of shape ``(x.shape[-1],)`` and ``x``'s dtype; ``None`` for none.
        eps: Non-negative, added to the mean square.
        out: Optional output with ``x``'s shape, dtype and device (may be ``x``; not for JAX).

    Returns:
        ``out``, or a new contiguous array like ``x``. Differentiable in ``x`` and ``weight``
        (PyTorch, JAX, Paddle); works under ``torch.compile``, ``jax.jit`` and ``jax.vmap``.
    """
    return _rms_norm.call((x, weight), (eps,), out)
