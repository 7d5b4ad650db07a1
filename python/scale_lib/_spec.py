# SPDX-License-Identifier: Apache-2.0
"""BoundOp declarations: what an exported function takes and returns, as data.

Nothing here knows a framework or the compiled library. Each op's module in ``ops/`` declares it as an
:class:`OpSpec`; ``_dispatch.register`` binds it to the library and to every framework.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

Shape = tuple[int, ...]
# The array type of a public function: it returns the kind of array it takes.
ArrayT = TypeVar("ArrayT")

FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Input:
    """A tensor argument, in ABI order.

    Every input after the first has the first input's dtype unless ``dtype`` names another, and
    the first input's shape unless ``shape`` maps the first input's shape to the one expected.
    These rules are checked in Python only where the library cannot check them itself (JAX
    tracing, PyTorch fake tensors); eager calls are checked in C++.

    ``shape_text`` says in words what ``shape`` computes, for the error message. An input with a
    declared ``shape`` may also have leading dimensions of size 1 (``jax.vmap`` passes an
    unbatched one that way): its kernel's checks must accept them too, and its gradient is
    reshaped to them (``BoundOp.vjp``).

    ``rows``: the array may be rows of a wider one (the last dimension contiguous, the leading
    ones evenly spaced rows, as ``x[:, :hidden]``); otherwise it must be contiguous. Like the
    other rules, checked in Python only for abstract arrays.

    ``check``: a further rule on the array's shape that the kernel enforces (``x``'s last
    dimension even, say): raises ``ValueError`` with the library's message. Like the rules
    above, called only for abstract arrays.

    ``optional`` inputs may be ``None`` (``ffi::Optional`` at the ABI). XLA calls have no
    absent buffer, so for JAX an absent optional input becomes ``jax_stand_in(first_input)``: a
    value with the same effect (ones for a weight).
    """

    name: str
    optional: bool = False
    dtype: str | None = None
    shape: Callable[[Shape], Shape] | None = None
    shape_text: str = ""
    min_ndim: int = 0
    rows: bool = False
    jax_stand_in: Callable[[Any], Any] | None = None
    check: Callable[[Shape], None] | None = None


@dataclass(frozen=True)
class Attr:
    """A scalar argument after the inputs: ``type`` is ``float``, ``int`` or ``bool``.

    Values are checked and converted from the declared type in one place (``_op.convert_attrs``);
    ``minimum`` is an inclusive lower bound.
    """

    name: str
    type: type
    minimum: float | None = None


@dataclass(frozen=True)
class Output:
    """The output, on the first input's framework and device. Its shape and dtype are those of
    the input named ``like``, unless ``shape`` (a function of the input shapes) or ``dtype`` (a
    name) says otherwise. ``allocated_by_library``: the library allocates and returns it (its
    size depends on the data), so there is no ``out=``. ``rows``: a given ``out`` may be rows of a
    wider array, as for :class:`Input`."""

    like: str = "x"
    shape: Callable[..., Shape] | None = None
    dtype: str | None = None
    allocated_by_library: bool = False
    rows: bool = False


@dataclass(frozen=True)
class JaxOptions:
    """How the op becomes an XLA FFI call; read only by the JAX adapter.

    ``vmap_method``: how ``jax.vmap`` batches the call (see ``jax.ffi.ffi_call``); the kernel
    then sees every batched input with the batch as leading dimensions. ``cuda_graph_safe``: the
    kernel neither allocates nor synchronises, so XLA may capture it in a CUDA graph.
    """

    vmap_method: str = "broadcast_all"
    cuda_graph_safe: bool = True


@dataclass(frozen=True)
class OpSpec:
    """An exported function ``name(out, *inputs, *attrs)``, or ``name(*inputs, *attrs) -> out``
    when the library allocates the output.

    Args:
        name: the exported function; also the JAX target ``<package>.<name>`` and the PyTorch
            custom op ``torch.ops.<package>.<name>``.
        inputs: the tensor arguments, in ABI order.
        attrs: the scalar arguments after the inputs.
        output: how the output is made.
        vjp: ``vjp(grad_out, out, *inputs, *attrs) -> tuple of input gradients (or None)``,
            written with public ops so it works for every framework; ``None`` if the op is not
            differentiable.
        jvp: ``jvp(tangents, out, *inputs, *attrs) -> tangent of out``: forward-mode
            derivative (``jax.jvp``, ``jax.jacfwd``, ``torch.func.jvp``, ``torch.func.jacfwd``,
            ``torch.autograd.forward_ad``). ``tangents`` has one entry per input, an array of
            that input's shape, or ``None`` where the input is absent or has no tangent (zero).
            Written with public ops or :func:`~scale_lib.array_namespace` math, like ``vjp``. An
            op declared ``linear`` needs none: its tangent is the op applied to the tangents.
            Without either, forward mode is refused with ``TypeError``.
        workspace: name of the exported ``f(numel of x, numel of out) -> bytes`` of scratch the
            CUDA kernel needs. The op then also exports ``<name>_with_workspace(out, workspace,
            *inputs)`` for callers whose framework publishes no allocator.
        dtypes: the dtypes the first input may have.
        devices: where the library has kernels for the op (``"cpu"``, ``"cuda"``).
        sharding: how the op treats distributed arrays (PyTorch ``DTensor``, JAX ``jax.jit``
            over sharded arrays): ``"elementwise"`` (inputs of the first input's shape, every
            element independent), ``"rows"`` (the last dimension whole, leading ones
            independent), ``"reduction"`` (one value from the whole array) or ``None`` (no rule:
            distributed arrays are refused). Under ``"rows"`` an input whose ``shape`` rule
            gives the last dimension of the first input holds one value per feature (a weight)
            and is used whole; every other input must have the first input's shape or its
            leading dimensions. The rules are in ``_torch.py`` and ``_jax.py``.
        linear: the op is linear in its tensor inputs jointly (``f(x + x') = f(x) + f(x')``,
            as ``scale`` is in ``x``), so inputs held as partial sums or averages across devices
            (PyTorch ``Partial``) give an output that stays partial, without communication, and
            its forward-mode derivative is the op itself applied to the tangents. The sharding
            rules read it only for ``"elementwise"`` ops.
        public: whether ``scale_lib.<name>`` is the op's public function (private ops are
            pieces of another op's vjp).
        triton: the op's CUDA kernel is written in Triton (``kernels/<op>/<op>.py``): a library built
            without the Triton kernels (``build_info()["triton"] == ""``) has no CUDA kernel for
            it, and a CUDA array raises ``ValueError`` naming the op.
        jax: options only the JAX adapter reads.
    """

    name: str
    inputs: tuple[Input, ...] = (Input("x"),)
    attrs: tuple[Attr, ...] = ()
    output: Output = field(default_factory=Output)
    vjp: Callable[..., tuple[Any, ...]] | None = None
    jvp: Callable[..., Any] | None = None
    workspace: str | None = None
    dtypes: tuple[str, ...] = FLOATING_DTYPES
    devices: tuple[str, ...] = ("cpu", "cuda")
    sharding: str | None = None
    linear: bool = False
    public: bool = True
    triton: bool = False
    jax: JaxOptions = field(default_factory=JaxOptions)
