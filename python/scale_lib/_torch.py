"""PyTorch integration: every op is also a PyTorch custom op, ``torch.ops.scale_lib.<op>`` (and
``<op>_out`` for ``out=``), with a fake implementation for torch.compile and torch.export and,
where the op defines a vjp, an autograd formula.

Plain eager calls on tensors that need no gradient go straight to the library: the custom-op
dispatcher costs about 8 us a call, the library call under 1 us. Everything PyTorch itself must
see takes the custom op: tracing under torch.compile/torch.export, tensor subclasses (FakeTensor,
FunctionalTensor, Parameter, ...) and tensors that require grad.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

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

_library: Any = None  # the torch.library.Library fragment; must live as long as the process
_packets: dict[str, tuple[Any, Any]] = {}  # op name -> (functional op, out= op)


def wants_custom_op(x: Any) -> bool:
    # Every term is evaluated on the common (direct) path, so each must be cheap.
    return (
        type(x) is not _Tensor  # FakeTensor, FunctionalTensor, Parameter, ... (torch.export)
        or (x.requires_grad and _grad_enabled())
        or x.is_meta  # the fake implementation computes meta tensors
        or _dynamo_compiling()  # torch.compile traces this code: put the op in its graph
    )


def call(op: Op, x: Any, attrs: tuple[Any, ...], out: Any) -> Any:
    if x.device.type not in ("cpu", "cuda", "meta"):
        raise ValueError(
            f"x is on unsupported device {x.device}; scale_lib supports cpu and cuda"
        )
    functional, out_variant = _packets[op.name]
    if out is None:
        return functional(x, *attrs)
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "out= does not support autograd, and x requires grad: call without out=, or under "
            "torch.no_grad()"
        )
    out_variant(out, x, *attrs)
    return out


def register(op: Op) -> None:
    """Define ``scale_lib::<op>`` and ``scale_lib::<op>_out`` (once per process)."""
    global _library
    if torch is None:
        return
    if _library is None:
        _library = torch.library.Library(NAMESPACE, "FRAGMENT")
    namespace = getattr(torch.ops, NAMESPACE)
    if not hasattr(namespace, op.name):  # a re-imported copy of scale_lib reuses the definition
        _define(op)
    _packets[op.name] = (getattr(namespace, op.name), getattr(namespace, f"{op.name}_out"))


def _define(op: Op) -> None:
    attrs = "".join(f", {_SCHEMA_TYPE[kind]} {name}" for name, kind in op.attrs)
    qualname = f"{NAMESPACE}::{op.name}"
    _library.define(f"{op.name}(Tensor x{attrs}) -> Tensor")
    _library.define(f"{op.name}_out(Tensor(a!) out, Tensor x{attrs}) -> ()")

    def functional(x: Any, *attrs: Any) -> Any:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        op.fn(out, x, *attrs)
        return out

    def out_variant(out: Any, x: Any, *attrs: Any) -> None:
        op.fn(out, x, *attrs)

    def fake(x: Any, *attrs: Any) -> Any:
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def fake_out(out: Any, x: Any, *attrs: Any) -> None:
        return None

    torch.library.impl(qualname, ("cpu", "cuda"), functional, lib=_library)
    torch.library.impl(f"{qualname}_out", ("cpu", "cuda"), out_variant, lib=_library)
    torch.library.register_fake(qualname, fake, lib=_library)
    torch.library.register_fake(f"{qualname}_out", fake_out, lib=_library)
    if op.vjp is not None:
        torch.library.register_autograd(
            qualname, _backward(op.vjp), setup_context=_setup_context, lib=_library
        )


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.attrs = inputs[1:]


def _backward(vjp: Callable[..., Any]) -> Callable[..., Any]:
    def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:
        # Incoming gradients may be expanded views (the gradient of a sum is); kernels need
        # contiguous input. The vjp calls public ops, so double backward works too.
        return (vjp(grad.contiguous(), *ctx.attrs), *(None for _ in ctx.attrs))

    return backward
