# SPDX-License-Identifier: Apache-2.0
"""The public ops. Each takes arrays of any supported framework and returns the same kind.

Each op is one section: its declaration (an :class:`~scale_lib._spec.OpSpec`: the exported
function, its inputs, scalar attributes, output and vjp), registered once with
:func:`~scale_lib._dispatch.register`, and its typed public function. Sections start with a
``# ===== op: <name> =====`` line, which the template tools use to add and remove ops.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar

from ._dispatch import register, registered_specs
from ._spec import Attr, Input, JaxOptions, OpSpec, Output

ArrayT = TypeVar("ArrayT")


# ===== op: scale =====
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


# ===== op: axpby =====
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


# ===== op: rms_norm =====
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


# ===== op: flatnonzero =====
# An output whose size depends on the data, allocated by the library.
_flatnonzero = register(OpSpec("flatnonzero", output=Output(dtype="int64", allocated_by_library=True)))


def flatnonzero(x: ArrayT) -> ArrayT:
    """The indices of the non-zero elements of ``x``, flattened in row-major order, as int64
    (like ``numpy.flatnonzero``). NaN counts as non-zero, ``-0.0`` as zero.

    The size of the result depends on the data, so the library allocates it: with the caller's
    framework allocator where it publishes one (PyTorch, Paddle), else itself, handing the array
    to the caller's framework through DLPack without a copy. There is no ``out=``. On CUDA the
    call waits for the count (a device-to-host copy), so it cannot be captured in a CUDA graph.
    JAX arrays work eagerly, not under ``jax.jit`` (XLA shapes are static); PyTorch's
    ``torch.compile`` sees a data-dependent size.

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array of any shape.

    Returns:
        A 1-D int64 array of the caller's framework and device.
    """
    return _flatnonzero.call((x,))


# ===== op: l2_norm =====
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


# ===== op: silu_and_mul =====
# A kernel written in Triton (kernels/triton/silu_and_mul.py), compiled ahead of time.
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
    from ._namespace import array_namespace

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


# ===== op: cumsum =====
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


# ===== op: softmax =====
# The example of a CUDA kernel compiled at run time (docs/nvrtc.md): NVRTC specialises it on the
# row length, dtype and GPU at the first call; the ahead-of-time kernel is the fallback.
def _softmax_vjp(grad: Any, out: Any, x: Any) -> tuple[Any, ...]:
    # d softmax: out * (grad - sum(grad * out) over the row).
    from ._namespace import array_namespace

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


# ===== end of ops =====
OPS: tuple[OpSpec, ...] = registered_specs()
"""Every declared op, in declaration order (``spec.public`` tells the public ones)."""
