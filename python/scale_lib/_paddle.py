# SPDX-License-Identifier: Apache-2.0
"""PaddlePaddle: plain calls go straight to the library (Paddle publishes its stream and its
allocator to TVM-FFI); calls that autograd must see run as a ``paddle.autograd.PyLayer`` whose
backward is the op's vjp.

Under ``paddle.jit.to_static`` the package is never rewritten by Paddle's AST translation (see
"Static graphs" below): with ``full_graph=False`` (SOT, the default) an op runs eagerly between
the compiled parts of the graph; with ``full_graph=True`` the ops see static-graph values, which
hold no data, and refuse them with a TypeError naming the op.
"""

from __future__ import annotations

import abc
import functools
import sys
import types
from typing import Any

from ._adapter import FRAMEWORK, LIBRARY, Adapter, AllocatingAdapter
from ._bound_op import BoundOp
from ._spec import Shape


class _NoGradient(TypeError):
    """An op without a vjp called on tensors that need a gradient. Its own class so that a
    backward can tell it from other errors (see "Second-order gradients")."""


class PaddleAdapter(AllocatingAdapter):
    name = module = "paddle"
    array_name = "paddle.Tensor"

    def array_type(self) -> type | None:
        paddle = sys.modules.get("paddle")
        if paddle is None:
            return None
        _leave_out_of_to_static(paddle)
        return _paddle_arrays(paddle)

    def register(self, op: BoundOp) -> None:
        # Paddle imported first (the usual order): the package is kept out of paddle.jit's AST
        # translation before any function can be translated. Otherwise on the first call.
        paddle = sys.modules.get("paddle")
        if paddle is not None:
            _leave_out_of_to_static(paddle)

    def route(self, op: BoundOp, inputs: tuple[Any, ...], out: Any) -> int:
        paddle = sys.modules["paddle"]
        for t in inputs:  # refused by call(): see "Auto-parallel" and "Static graphs" below
            if isinstance(t, paddle.Tensor):
                if t.is_dist():
                    return FRAMEWORK
            elif t is not None and isinstance(t, _static_values(paddle)):
                return FRAMEWORK
        # An integer result (indices) has no gradient: nothing for autograd to see.
        if not op.output_has_gradient:
            return LIBRARY
        needs_grad = any(isinstance(t, paddle.Tensor) and not t.stop_gradient for t in inputs)
        return FRAMEWORK if needs_grad and paddle.is_grad_enabled() else LIBRARY

    def call(self, op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        _refuse_static(op, inputs)
        _refuse_distributed(op, inputs)
        if out is not None:
            raise ValueError(
                "out= does not support autograd, and an input requires grad (stop_gradient=False): "
                "call without out=, or under paddle.no_grad()"
            )
        if op.spec.vjp is None:
            raise _NoGradient(f"{op.name} is not differentiable: pass tensors with stop_gradient=True")
        paddle = sys.modules["paddle"]
        slots = tuple(i for i, t in enumerate(inputs) if isinstance(t, paddle.Tensor) and not t.stop_gradient)
        return _layer(op).apply([inputs[i] for i in slots], _Hidden(inputs, slots), *attrs)

    def check_out(self, out: Any, arg_name: str) -> None:
        if not out.stop_gradient:
            raise ValueError(
                f"{arg_name} needs a gradient (stop_gradient=False); scale_lib does not write into "
                f"it. Write into {arg_name}.detach() to update its values"
            )

    def check_foreign(self, a: Any, arg_name: str, runner: Adapter) -> None:
        paddle = sys.modules["paddle"]
        if not isinstance(a, paddle.Tensor):  # a static-graph value, which holds no data
            raise TypeError(
                f"{arg_name} is a Paddle static-graph value ({type(a).__name__}), but this call "
                f"runs on {runner.array_name} (its first input's framework): pass the first input "
                "as a paddle.Tensor"
            )
        if not a.stop_gradient and paddle.is_grad_enabled():
            raise ValueError(
                f"{arg_name} needs a gradient (stop_gradient=False), but this call runs on "
                f"{runner.array_name} (its first input's framework), whose result would drop it: "
                f"pass the first input as a paddle.Tensor, or {arg_name}.detach()"
            )

    def written(self, out: Any) -> None:
        # Autograd must see the write as in-place: a tensor saved for backward and written
        # since is an error in backward(), as after Paddle's own in-place ops.
        out._bump_inplace_version()

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        paddle = sys.modules["paddle"]
        if shape is None and dtype is None:
            return paddle.empty_like(like)
        return paddle.empty(
            list(like.shape if shape is None else shape),
            dtype=like.dtype if dtype is None else dtype,
            device=like.place,
        )

    def adopt(self, result: Any) -> Any:
        # The library allocated through Paddle's own allocator: already a paddle.Tensor.
        return result if isinstance(result, sys.modules["paddle"].Tensor) else super().adopt(result)


ADAPTER = PaddleAdapter()


# =============================================================================================
# Autograd
# =============================================================================================
# PyLayer makes each tensor argument of apply() a slot of its own, and paddle.grad(outputs,
# inputs) marks the slots that lead to no requested input as not needing a gradient: a backward
# must then return None there, but cannot see which slots those are (Paddle raises ValueError
# for a tensor returned in one). So the tensors that need a gradient are passed as one list, a
# single slot that Paddle never prunes (it prunes only among several slots); everything else
# (tensors that need none, other frameworks' arrays, None) reaches forward out of Paddle's sight,
# in a _Hidden. A backward then returns a gradient for every tensor of the list, and
# paddle.grad of any subset of the inputs works.
class _Hidden:
    """Arguments of a PyLayer that Paddle must not take for inputs of its own."""

    __slots__ = ("slots", "values")

    def __init__(self, values: Any, slots: tuple[int, ...] = ()) -> None:
        self.values = values  # the op's inputs, or the gradients a _refusal returns
        self.slots = slots  # the positions in the op's inputs of the tensors passed as the list


@functools.cache
def _layer(op: BoundOp) -> Any:
    paddle: Any = sys.modules["paddle"]

    class OpLayer(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx: Any, needing: list[Any], hidden: _Hidden, *attrs: Any) -> Any:
            # Under paddle.jit.to_static's SOT, Paddle translates every Python frame it sees
            # start, this one too (apply() calls it from C++): it would run the kernel call on
            # static-graph values before giving up. psdb.fallback() there has the frame, and the
            # calls it makes, run as plain Python; outside a translation it does nothing.
            sot = sys.modules.get("paddle.jit.sot.psdb")
            if sot is not None:
                sot.fallback(recursive=True)
            passed = dict(zip(hidden.slots, needing, strict=True))  # the list's tensors, as given
            inputs = tuple(passed.get(i, t) for i, t in enumerate(hidden.values))
            out = ADAPTER.empty(inputs[op.like_index], *_shape_dtype(op, inputs))
            op.fn(out, *inputs, *attrs)
            ctx.present = [t is not None for t in inputs]
            ctx.slots = hidden.slots
            ctx.save_for_backward(*(t for t in inputs if t is not None), out)
            ctx.attrs = attrs
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            *saved, out = ctx.saved_tensor()
            saved_inputs = iter(saved)
            inputs = [next(saved_inputs) if present else None for present in ctx.present]
            grad = grad.contiguous()
            # Grad mode is on in a backward only for paddle.grad(..., create_graph=True): the
            # gradients are then functions to differentiate in turn.
            if paddle.is_grad_enabled():
                try:
                    grads = op.vjp(grad, out, inputs, ctx.attrs)
                except _NoGradient:  # the vjp calls ops without one: see below
                    return _once_differentiable(op, grad, out, inputs, ctx.attrs, ctx.slots)
            else:
                grads = op.vjp(grad, out, inputs, ctx.attrs)
            return [grads[i] for i in ctx.slots]

    OpLayer.__name__ = OpLayer.__qualname__ = f"scale_lib_{op.name}"
    return OpLayer


# Second-order gradients. The vjp of an op is made of ops: where they all have a vjp (scale's is
# scale), paddle.grad(..., create_graph=True) records them and the gradient can be
# differentiated again. Where one has none (a kernel that computes a backward), the first-order
# gradient is still computed (paddle.autograd.jacobian and others pass create_graph=True for
# first order alone), outside the graph, and handed on through a _refusal layer, whose backward
# raises: differentiating that gradient again is a TypeError naming the public op, never a
# silently wrong or missing second derivative. Paddle reports an exception raised in a backward
# as an OSError whose message holds the original's type and text.
def _once_differentiable(
    op: BoundOp, grad: Any, out: Any, inputs: list[Any], attrs: tuple[Any, ...], slots: tuple[int, ...]
) -> list[Any]:
    paddle = sys.modules["paddle"]
    with paddle.no_grad():
        grads = op.vjp(grad, out, inputs, attrs)
    # What the gradients depend on: the incoming gradient and the op's inputs.
    needing = [t for t in (grad, *inputs) if isinstance(t, paddle.Tensor) and not t.stop_gradient]
    wanted = [grads[i] for i in slots]
    if not needing:
        return wanted
    given = [g for g in wanted if g is not None]
    refused = _refusal(op).apply(needing, _Hidden(given))
    refused = iter([refused] if isinstance(refused, paddle.Tensor) else refused)  # one or a tuple
    return [None if g is None else next(refused) for g in wanted]


@functools.cache
def _refusal(op: BoundOp) -> Any:
    paddle: Any = sys.modules["paddle"]
    message = (
        f"scale_lib.{op.name} is differentiable once in Paddle: its second-order gradients "
        "(a gradient taken with paddle.grad(..., create_graph=True) and differentiated again, "
        "as in a gradient penalty or a Hessian) are not supported"
    )

    class Refusal(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx: Any, needing: list[Any], hidden: _Hidden) -> Any:
            # New tensors: an output that is also an input would be taken for an in-place write.
            grads = [g.clone() if any(g is t for t in needing) else g for g in hidden.values]
            return tuple(grads) if len(grads) != 1 else grads[0]

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            raise TypeError(message)

    Refusal.__name__ = Refusal.__qualname__ = f"scale_lib_{op.name}_second_order"
    return Refusal


def _shape_dtype(op: BoundOp, inputs: tuple[Any, ...]) -> tuple[Shape | None, str | None]:
    if op.output_is_like_input:
        return None, None
    return op.output_shape(inputs), op.spec.output.dtype


# =============================================================================================
# Auto-parallel: distributed tensors are refused
# =============================================================================================
# Paddle runs an operator on distributed tensors (paddle.distributed.shard_tensor) through the
# operator's SPMD rule, which only Paddle's own operators and C++ custom operators built with
# Paddle can declare; a TVM-FFI function called from Python cannot. A distributed tensor's
# DLPack export is not its local shard, so passing it on would compute the wrong values: it is
# refused, and the ops run on each rank's shard under paddle.distributed.local_map.
def _refuse_distributed(op: BoundOp, inputs: tuple[Any, ...]) -> None:
    for spec, t in zip(op.spec.inputs, inputs, strict=True):
        if isinstance(t, sys.modules["paddle"].Tensor) and t.is_dist():
            raise ValueError(
                f"{spec.name} is a Paddle distributed tensor; scale_lib ops have no Paddle "
                "auto-parallel (SPMD) rule. Call the op on each rank's shard with "
                "paddle.distributed.local_map"
            )


# =============================================================================================
# Static graphs: paddle.jit.to_static
# =============================================================================================
# With full_graph=True, to_static rewrites the Python source of every function it reaches (AST
# translation) and runs it on static-graph values, which hold no data. The package's own
# functions are left out of the rewriting (paddle.jit.ignore_module): they are not written for
# it, and rewritten they fail inside the package with errors that name no op. Run as they are,
# they see the static-graph values and refuse them, naming the op: a TVM-FFI function is not an
# operator a static graph can hold. With full_graph=False (SOT, to_static's default), Paddle runs
# what it cannot compile eagerly, and the ops run as in dynamic mode, autograd included.
@functools.cache
def _leave_out_of_to_static(paddle: Any) -> None:
    # Paddle skips the functions defined under an ignored module's directory, and also collects
    # every function reachable from the module through module attributes, recursively: from the
    # package itself, that is every framework it refers to (all of PyTorch, with the warnings of
    # its deprecated attributes). A stand-in that holds only the package's path gives the first
    # without the second.
    stand_in = types.ModuleType(__package__)
    stand_in.__file__ = sys.modules[__package__].__file__
    paddle.jit.ignore_module([stand_in])


@functools.cache
def _static_values(paddle: Any) -> tuple[type, ...]:
    """The classes of static-graph values: PIR's (to_static's) and the legacy static mode's
    (whose isinstance() also takes a paddle.Tensor in dynamic mode: test for that first)."""
    return (paddle.pir.Value, paddle.static.Variable)


@functools.cache
def _paddle_arrays(paddle: Any) -> type:
    """What the dispatcher takes for a Paddle array: paddle.Tensor, and static-graph values, so
    that an op given one refuses it by name instead of as "not an array"."""

    class PaddleArray(abc.ABC):  # noqa: B024 - a virtual base class: isinstance() only
        pass

    for cls in (paddle.Tensor, *_static_values(paddle)):
        PaddleArray.register(cls)
    return PaddleArray


def _refuse_static(op: BoundOp, inputs: tuple[Any, ...]) -> None:
    paddle = sys.modules["paddle"]
    statics = _static_values(paddle)
    for spec, t in zip(op.spec.inputs, inputs, strict=True):
        # Not a paddle.Tensor first: in dynamic mode, isinstance(tensor, paddle.static.Variable)
        # is true.
        if not isinstance(t, paddle.Tensor) and isinstance(t, statics):
            raise TypeError(
                f"scale_lib.{op.name} cannot run in a Paddle static graph: {spec.name} is a "
                "static-graph value, as under paddle.jit.to_static(..., full_graph=True), which "
                "holds no data. Use paddle.jit.to_static(..., full_graph=False), where the op runs "
                "eagerly between the compiled parts, or call it outside the static function"
            )
