# SPDX-License-Identifier: Apache-2.0
"""PyTorch autograd for the custom ops: reverse mode from the op's declared vjp, forward mode
from its declared jvp (or, for a linear op, the op itself), for ``torch.autograd``,
``torch.autograd.forward_ad`` and the ``torch.func`` transforms alike.

``torch.library.register_autograd`` builds an ``autograd.Function`` that has neither a forward-mode
formula nor the ``setup_context`` that ``torch.func`` transforms (``grad``, ``jacrev``, ``jvp``,
``jacfwd``, ``vmap`` of a backward) require, so each op registers its own Function at the
dispatcher's Autograd key. Its forward runs the op below autograd; ``generate_vmap_rule`` lets
``torch.func.vmap`` batch forward, backward and jvp, each of which calls custom ops, which have a
batching rule of their own (``_torch_batching.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.autograd.forward_ad as forward_ad

from ._bound_op import BoundOp

# How many derivative formulas on batched gradients run now, in any thread (read on every eager
# call, so a plain list element; exact, since changed under the lock), and how many this thread
# is inside.
RUNNING = [0]
_lock = threading.Lock()
_inside = threading.local()
_legacy_batched = torch._C._functorch.is_legacy_batchedtensor


def through_dispatcher() -> bool:
    """Whether this thread runs a derivative formula on batched gradients or tangents
    (``torch.autograd.grad(is_grads_batched=True)``, ``jacobian(vectorize=True)``): its op calls
    then take PyTorch's dispatcher, since what it computes from them is batched too, with no
    storage the library could read, which shows in no state the public function could check
    more cheaply. Callers test ``RUNNING[0]`` first."""
    return getattr(_inside, "depth", 0) > 0


def _formula(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(ctx: Any, *args: Any) -> Any:
        for a in args:  # a loop: a generator costs more than the check, on every backward
            if isinstance(a, torch.Tensor) and _legacy_batched(a):
                break
        else:
            return fn(ctx, *args)  # its op calls take the routes of any other call
        with _lock:
            RUNNING[0] += 1
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            return fn(ctx, *args)
        finally:
            _inside.depth -= 1
            with _lock:
                RUNNING[0] -= 1

    return run


def register(
    op: BoundOp, qualname: str, functional: Any, library: Any, kernel: Callable[..., Any]
) -> Callable[..., Any]:
    """Register ``op``'s autograd formulas for the custom op ``qualname`` (``functional``: its
    ``OpOverload``; ``kernel``: its CPU and CUDA implementation) at the Autograd key of
    ``library``. Returns how to call the op from Python (see :func:`_caller`)."""

    def forward(*args: Any) -> Any:
        with torch._C._AutoDispatchBelowAutograd():
            return functional(*args)

    function = _function(op, forward, qualname.replace("::", "_"))
    apply = _applier(function)
    below_autograd = torch._C._after_autograd_keyset
    # The keys left below autograd for dense tensors of one device the op has kernels on (with
    # or without ADInplaceOrView, which the keyset of a call under no_grad leaves out): nothing
    # (no mode, subclass, functionalization, meta or fake tensor) comes between autograd and the
    # kernel, which is then called as it is, not through a second pass of the dispatcher.
    keys = torch._C.DispatchKey
    backends = [torch._C.DispatchKeySet(getattr(keys, device.upper())) for device in op.devices]
    dense = {k.raw_repr() for k in backends} | {k.add(keys.ADInplaceOrView).raw_repr() for k in backends}

    def autograd_impl(keyset: Any, *args: Any) -> Any:
        if torch.is_grad_enabled() or forward_ad._current_level >= 0:
            return apply(*args)
        below = keyset & below_autograd
        if below.raw_repr() in dense:
            return kernel(*args)
        return functional.redispatch(below, *args)

    library.impl(qualname, autograd_impl, "Autograd", with_keyset=True)
    return _caller(apply, functional)


def eager_function(op: BoundOp, qualname: str, forward: Callable[..., Any]) -> Callable[..., Any]:
    """``op``'s autograd function with ``forward`` (the library call itself) for eager calls on
    plain tensors: the function the custom op's Autograd kernel applies, without the dispatcher
    on either side. Applied only where no torch.func transform is active."""
    return _raw_apply(_function(op, forward, qualname.replace("::", "_")))


def _raw_apply(function: Any) -> Callable[..., Any]:
    # autograd.Function.apply binds the arguments to forward's signature (inspect.signature: most
    # of a small op's cost) and unwraps torch.func wrappers left from a finished transform before
    # its C++ apply; forward takes *args, so binding changes nothing.
    return super(torch.autograd.Function, function).apply


def _applier(function: Any) -> Callable[..., Any]:
    """``function.apply`` as the custom op's Autograd kernel runs it: the C++ apply directly
    where no torch.func transform is active (the Python apply's own path there)."""
    apply = _raw_apply(function)
    unwrap_if_dead = torch._C._functorch.unwrap_if_dead

    def run(*args: Any) -> Any:
        if torch._C._are_functorch_transforms_active():
            return function.apply(*args)
        return apply(*(unwrap_if_dead(a) if isinstance(a, torch.Tensor) else a for a in args))

    return run


def _caller(apply: Callable[..., Any], functional: Any) -> Callable[..., Any]:
    """``op(*args)``: the custom op, or the autograd.Function applied directly where a
    ``torch.func`` transform that differentiates (``grad``, ``jvp``, ``jacrev``, ``jacfwd``,
    ``hessian``) is active, and where forward-mode dual tensors are given: PyTorch runs an
    autograd.Function under those only when it is applied from Python, not from inside a
    dispatcher kernel, and then batches it (``generate_vmap_rule``) at any nesting. Under
    ``vmap`` and ``functionalize`` alone it is the custom op, which has rules for them."""
    functorch = torch._C._functorch
    differentiating = (functorch.TransformType.Grad, functorch.TransformType.Jvp)

    def call(*args: Any) -> Any:
        if functorch.peek_interpreter_stack() is not None:
            if any(i.key() in differentiating for i in functorch.get_interpreter_stack()):
                return apply(*args)
        elif has_tangent(args):
            return apply(*args)
        return functional(*args)

    return call


def has_tangent(args: tuple[Any, ...]) -> bool:
    """Whether any of ``args`` is a forward-mode dual tensor (``torch.autograd.forward_ad``)."""
    if forward_ad._current_level < 0:  # dual tensors exist only inside a level
        return False
    return any(isinstance(t, torch.Tensor) and forward_ad.unpack_dual(t).tangent is not None for t in args)


def _function(op: BoundOp, forward: Callable[..., Any], name: str) -> Any:
    n = op.n_inputs
    backward = _backward(op) if op.spec.vjp is not None else _refuse_backward(op)
    jvp = _jvp(op) if op.has_jvp else _refuse_jvp(op)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        tensors = inputs[:n]
        ctx.attrs = inputs[n:]
        # Absent optional inputs are None: saved as such, restored as such.
        ctx.save_for_backward(*tensors, output)
        # The jvp runs only in the forward pass, inside a forward-mode level (torch.func.jvp
        # opens one too): without one, nothing reads what it would save.
        if forward_ad._current_level >= 0 or torch._C._are_functorch_transforms_active():
            ctx.save_for_forward(*tensors, output)
        ctx.set_materialize_grads(False)

    return type(
        name,  # grad_fn: <name>Backward
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "setup_context": staticmethod(setup_context),
            "backward": staticmethod(_formula(backward)),
            "jvp": staticmethod(_formula(jvp)),
            # vmap of forward, backward and jvp: each calls custom ops, batched by their own rule.
            "generate_vmap_rule": True,
        },
    )


def _backward(op: BoundOp) -> Any:
    def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:
        *tensors, output = ctx.saved_tensors
        no_attr_grads = (None,) * len(ctx.attrs)
        if grad is None:
            return (None,) * len(tensors) + no_attr_grads
        # Incoming gradients may be expanded views (the gradient of a sum is); kernels need
        # contiguous input. The vjp calls public ops, so double backward works where they do.
        return op.vjp(grad.contiguous(), output, tensors, ctx.attrs) + no_attr_grads

    return backward


def _refuse_backward(op: BoundOp) -> Any:
    """Without a formula PyTorch only warns and treats the op as a constant, which gives silently
    wrong gradients: for an op that computes (part of) another op's backward, second-order
    gradients (``create_graph=True``, ``gradgradcheck``, ``hessian``) of that op."""
    message = (
        f"scale_lib.{op.name} has no gradient (it declares no vjp). Where it computes the backward "
        "of another op, that op is differentiable once in PyTorch: its second-order gradients "
        "(create_graph=True, torch.autograd.functional.hessian, gradgradcheck) are not supported"
    )

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        raise TypeError(message)

    return backward


def _jvp(op: BoundOp) -> Any:
    n = op.n_inputs

    def jvp(ctx: Any, *tangents: Any) -> Any:
        *tensors, output = ctx.saved_tensors
        tangent = op.jvp(tangents[:n], output, tensors, ctx.attrs)
        # Forward mode needs a tangent for the output, also where every input's is zero.
        return torch.zeros_like(output) if tangent is None else tangent

    return jvp


def _refuse_jvp(op: BoundOp) -> Any:
    def jvp(ctx: Any, *tangents: Any) -> Any:
        op.refuse_jvp()

    return jvp
