"""PyTorch integration: every op is also a PyTorch custom op, ``torch.ops.scale_lib.<op>`` (and
``<op>_out`` for ``out=``), with a fake implementation for torch.compile and torch.export and,
where the op defines a vjp, an autograd formula.

Plain eager calls on tensors that need no gradient go straight to the library: the custom-op
dispatcher costs about 8 us a call, the library call under 1 us. Everything PyTorch itself must
see takes the custom op: tracing under torch.compile/torch.export, tensor subclasses (FakeTensor,
FunctionalTensor, Parameter, ...) and tensors that require grad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

try:
    import torch

    # Module-level aliases keep the per-call check cheap; dynamo still recognises the function.
    _Tensor = torch.Tensor
    _grad_enabled = torch.is_grad_enabled
    _dynamo_compiling = torch.compiler.is_dynamo_compiling
except ImportError:  # scale_lib works without PyTorch
    torch = None

if TYPE_CHECKING:
    from ._op import Op

NAMESPACE = "scale_lib"
_SCHEMA_TYPE = {float: "float", int: "int", bool: "bool"}

# The torch.library.Library fragment must live as long as the process: dropping it deregisters
# the ops. importlib.reload re-runs this module in the same namespace, so keep what is there.
_library: Any = globals().get("_library")
_packets: dict[str, tuple[Any, Any]] = globals().get("_packets", {})  # name -> (op, out= op)


def wants_custom_op(x: Any) -> bool:
    # Every term is evaluated on the common (direct) path, so each must be cheap.
    return (
        type(x) is not _Tensor  # FakeTensor, FunctionalTensor, Parameter, ... (torch.export)
        or (x.requires_grad and _grad_enabled())
        or x.is_meta  # the fake implementation computes meta tensors
        or _dynamo_compiling()  # torch.compile traces this code: put the op in its graph
    )


def call(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
    x = inputs[0]
    if x.device.type not in ("cpu", "cuda", "meta"):
        raise ValueError(f"x is on unsupported device {x.device}; scale_lib supports cpu and cuda")
    functional, out_variant = _packets[op.name]
    if out is None:
        return functional(*inputs, *attrs)
    if _grad_enabled() and any(getattr(t, "requires_grad", False) for t in inputs):
        raise ValueError(
            "out= does not support autograd, and an input requires grad: call without out=, or "
            "under torch.no_grad()"
        )
    out_variant(out, *inputs, *attrs)
    return out


def register(op: Op) -> None:
    """Define ``scale_lib::<op>`` (and ``scale_lib::<op>_out``), once per process."""
    global _library
    if torch is None:
        return
    if _library is None:
        _library = torch.library.Library(NAMESPACE, "FRAGMENT")
    namespace = getattr(torch.ops, NAMESPACE)
    if not hasattr(namespace, op.name):  # a re-imported copy of scale_lib reuses the definition
        _define(op)
    out_packet = None if op.output.allocated_by_library else getattr(namespace, f"{op.name}_out")
    _packets[op.name] = (getattr(namespace, op.name), out_packet)


def _define(op: Op) -> None:
    from . import _frameworks

    n = len(op.inputs)
    args = ", ".join(
        [f"Tensor{'?' if i.optional else ''} {i.name}" for i in op.inputs]
        + [f"{_SCHEMA_TYPE[kind]} {name}" for name, kind in op.attrs]
    )
    qualname = f"{NAMESPACE}::{op.name}"
    _library.define(f"{op.name}({args}) -> Tensor")

    if op.output.allocated_by_library:

        def functional(*args: Any) -> Any:
            return op.fn(*args)  # the library allocates through torch's allocator

        def fake(*args: Any) -> Any:
            # The length depends on the data: an unbacked symbolic size.
            size = torch.library.get_ctx().new_dynamic_size()
            dtype = getattr(torch, op.output.dtype) if op.output.dtype else args[0].dtype
            return args[0].new_empty((size,), dtype=dtype)

    else:
        _library.define(f"{op.name}_out(Tensor(a!) out, {args}) -> ()")

        def functional(*args: Any) -> Any:
            out = op.allocate(_frameworks.TORCH, args[:n])
            op.fn(out, *args)
            return out

        def fake(*args: Any) -> Any:
            return op.allocate(_frameworks.TORCH, args[:n])

        def out_variant(out: Any, *args: Any) -> None:
            op.fn(out, *args)

        def fake_out(out: Any, *args: Any) -> None:
            return None

        torch.library.impl(f"{qualname}_out", ("cpu", "cuda"), out_variant, lib=_library)
        torch.library.register_fake(f"{qualname}_out", fake_out, lib=_library)

    torch.library.impl(qualname, ("cpu", "cuda"), functional, lib=_library)
    torch.library.register_fake(qualname, fake, lib=_library)
    if op.vjp is not None:
        setup_context, backward = _autograd(op, op.vjp)
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=_library)


def _autograd(
    op: Op, vjp: Callable[..., tuple[Any, ...]]
) -> tuple[Callable[..., None], Callable[..., tuple[Any, ...]]]:
    n = len(op.inputs)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs[:n], output)
        ctx.attrs = inputs[n:]

    def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:
        *tensors, output = ctx.saved_tensors
        # Incoming gradients may be expanded views (the gradient of a sum is); kernels need
        # contiguous input. The vjp calls public ops, so double backward works where they do.
        grads = vjp(grad.contiguous(), output, *tensors, *ctx.attrs)
        return (*grads, *(None for _ in ctx.attrs))

    return setup_context, backward
