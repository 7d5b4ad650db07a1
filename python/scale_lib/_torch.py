# SPDX-License-Identifier: Apache-2.0
"""PyTorch: every op is also a PyTorch custom op, ``torch.ops.scale_lib.<op>`` (and ``<op>_out``
for ``out=``), with a fake implementation for torch.compile and torch.export and, where the op
defines a vjp, an autograd formula.

Plain eager calls on tensors that need no gradient go straight to the library: the custom-op
dispatcher costs several microseconds a call, the library call under one. Everything PyTorch
itself must see takes the custom op: tracing under torch.compile/torch.export, tensor subclasses
(FakeTensor, FunctionalTensor, Parameter, DTensor, ...), meta tensors and tensors that require
grad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._adapter import Adapter
from ._op import Op
from ._spec import Shape

try:
    import torch

    # Module-level aliases keep the per-call check cheap; dynamo still recognises the function.
    _Tensor = torch.Tensor
    _grad_enabled = torch.is_grad_enabled
    _dynamo_compiling = torch.compiler.is_dynamo_compiling
except ImportError:  # scale_lib works without PyTorch
    torch = None

NAMESPACE = "scale_lib"
_SCHEMA_TYPE = {float: "float", int: "int", bool: "bool"}

# The torch.library.Library fragment must live as long as the process: dropping it deregisters
# the ops. importlib.reload re-runs this module in the same namespace, so keep what is there.
_library: Any = globals().get("_library")


def _wants_custom_op(t: Any) -> bool:
    # Every term is evaluated on the common (direct) path, so each must be cheap.
    return (
        type(t) is not _Tensor  # FakeTensor, FunctionalTensor, Parameter, DTensor, ...
        or (t.requires_grad and _grad_enabled())
        or t.is_meta  # the fake implementation computes meta tensors
        or _dynamo_compiling()  # torch.compile traces this code: put the op in its graph
    )


class TorchAdapter(Adapter):
    name = module = "torch"

    def __init__(self) -> None:
        # op name -> (functional custom op, out= custom op or None)
        self._custom_ops: dict[str, tuple[Any, Any]] = {}

    def array_type(self) -> type | None:
        return None if torch is None else torch.Tensor

    def takes_call(self, op: Op, inputs: tuple[Any, ...]) -> bool:
        # A plain loop: any() over a generator costs a few hundred ns on every eager call.
        for t in inputs:  # noqa: SIM110
            if isinstance(t, _Tensor) and _wants_custom_op(t):
                return True
        return False

    def call(self, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        x = inputs[0]
        if x.device.type not in ("cpu", "cuda", "meta"):
            raise ValueError(f"x is on unsupported device {x.device}; scale_lib supports cpu and cuda")
        op.check_device(x.device.type)
        functional, out_variant = self._custom_ops[op.name]
        if out is None:
            return functional(*inputs, *attrs)
        if _grad_enabled() and any(getattr(t, "requires_grad", False) for t in inputs):
            raise ValueError(
                "out= does not support autograd, and an input requires grad: call without out=, or "
                "under torch.no_grad()"
            )
        out_variant(out, *inputs, *attrs)
        return out

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        if shape is None and dtype is None:
            return torch.empty_like(like, memory_format=torch.contiguous_format)
        return torch.empty(
            like.shape if shape is None else shape,
            dtype=like.dtype if dtype is None else getattr(torch, dtype),
            device=like.device,
        )

    def adopt(self, result: Any) -> Any:
        # The library allocated through PyTorch's own allocator: already a torch.Tensor.
        return result if isinstance(result, _Tensor) else torch.from_dlpack(result)

    def register(self, op: Op) -> None:
        """Define ``scale_lib::<op>`` (and ``scale_lib::<op>_out``), once per process."""
        global _library
        if torch is None:
            return
        if _library is None:
            _library = torch.library.Library(NAMESPACE, "FRAGMENT")
        namespace = getattr(torch.ops, NAMESPACE)
        if not hasattr(namespace, op.name):  # a re-imported copy of scale_lib reuses the definition
            _define(op)
        out_variant = None if op.spec.output.allocated_by_library else getattr(namespace, f"{op.name}_out")
        self._custom_ops[op.name] = (getattr(namespace, op.name), out_variant)


ADAPTER = TorchAdapter()


def _new_output(op: Op, inputs: tuple[Any, ...]) -> Any:
    like = inputs[op.like_index]
    if op.output_is_like_input:
        return ADAPTER.empty(like)
    return ADAPTER.empty(like, op.output_shape(inputs), op.spec.output.dtype)


def _check_fake(op: Op, inputs: tuple[Any, ...], out: Any = None) -> None:
    """What the library checks, for fake tensors that never reach it."""
    op.check_abstract(inputs)
    op.check_device(inputs[0].device.type)
    named = [(n, t) for n, t in zip(op.input_names, inputs, strict=True) if t is not None]
    if out is not None:
        named.append(("out", out))
    if len({t.device for _, t in named}) > 1:
        raise ValueError(
            f"{op.name}: every array must be on one device; got "
            + ", ".join(f"{n} on {t.device}" for n, t in named)
        )


def _define(op: Op) -> None:
    spec, n = op.spec, op.n_inputs
    args = ", ".join(
        [f"Tensor{'?' if i.optional else ''} {i.name}" for i in spec.inputs]
        + [f"{_SCHEMA_TYPE[a.type]} {a.name}" for a in spec.attrs]
    )
    qualname = f"{NAMESPACE}::{op.name}"
    devices = tuple(spec.devices)  # kernels only where the op has them (a CUDA-only op: "cuda")
    _library.define(f"{op.name}({args}) -> Tensor")

    if spec.output.allocated_by_library:

        def functional(*args: Any) -> Any:
            return op.fn(*args)  # the library allocates through torch's allocator

        def fake(*args: Any) -> Any:
            _check_fake(op, args[:n])
            # The length depends on the data: an unbacked symbolic size.
            size = torch.library.get_ctx().new_dynamic_size()
            dtype = getattr(torch, spec.output.dtype) if spec.output.dtype else args[0].dtype
            return args[0].new_empty((size,), dtype=dtype)

    else:
        _library.define(f"{op.name}_out(Tensor(a!) out, {args}) -> ()")

        def functional(*args: Any) -> Any:
            out = _new_output(op, args[:n])
            op.fn(out, *args)
            return out

        def fake(*args: Any) -> Any:
            _check_fake(op, args[:n])
            return _new_output(op, args[:n])

        def out_variant(out: Any, *args: Any) -> None:
            op.fn(out, *args)

        def fake_out(out: Any, *args: Any) -> None:
            _check_fake(op, args[:n], out)
            expected = _new_output(op, args[:n])
            if out.shape != expected.shape or out.dtype != expected.dtype:
                raise ValueError(
                    f"out must have shape {tuple(expected.shape)} and dtype {expected.dtype}; got "
                    f"{tuple(out.shape)} and {out.dtype}"
                )

        torch.library.impl(f"{qualname}_out", devices, out_variant, lib=_library)
        torch.library.register_fake(f"{qualname}_out", fake_out, lib=_library)

    torch.library.impl(qualname, devices, functional, lib=_library)
    torch.library.register_fake(qualname, fake, lib=_library)
    if spec.vjp is not None:
        setup_context, backward = _autograd(op, spec.vjp)
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=_library)


def _autograd(
    op: Op, vjp: Callable[..., tuple[Any, ...]]
) -> tuple[Callable[..., None], Callable[..., tuple[Any, ...]]]:
    n = op.n_inputs

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
