"""PaddlePaddle integration: calls that autograd must see run as a ``paddle.autograd.PyLayer``
whose backward is the op's vjp. Other calls go straight to the library."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._op import Op


def needs_autograd(x: Any) -> bool:
    return not x.stop_gradient and sys.modules["paddle"].is_grad_enabled()


def call(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
    if out is not None:
        raise ValueError(
            "out= does not support autograd, and an input requires grad (stop_gradient=False): "
            "call without out=, or under paddle.no_grad()"
        )
    if op.vjp is None:
        raise TypeError(f"{op.name} is not differentiable: pass tensors with stop_gradient=True")
    return _layer(op, op.vjp).apply(*inputs, *attrs)


@functools.cache
def _layer(op: Op, vjp: Callable[..., tuple[Any, ...]]) -> Any:
    from . import _frameworks

    paddle: Any = sys.modules["paddle"]
    n = len(op.inputs)

    class OpLayer(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:
            inputs, attrs = args[:n], args[n:]
            out = op.allocate(_frameworks.PADDLE, inputs)
            op.fn(out, *inputs, *attrs)
            ctx.present = [t is not None for t in inputs]
            ctx.save_for_backward(*(t for t in inputs if t is not None), out)
            ctx.attrs = attrs
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            *saved, out = ctx.saved_tensor()
            saved_inputs = iter(saved)
            inputs = [next(saved_inputs) if present else None for present in ctx.present]
            grads = vjp(grad.contiguous(), out, *inputs, *ctx.attrs)
            # PyLayer wants one gradient per tensor argument: absent optional inputs have none.
            return tuple(g for g, present in zip(grads, ctx.present, strict=True) if present)

    OpLayer.__name__ = OpLayer.__qualname__ = f"scale_lib_{op.name}"
    return OpLayer
