"""PaddlePaddle integration: calls that autograd must see run as a ``paddle.autograd.PyLayer``
whose backward is the op's vjp. Other calls go straight to the library."""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._op import Op


def needs_autograd(x: Any) -> bool:
    return not x.stop_gradient and sys.modules["paddle"].is_grad_enabled()


def call(op: Op, x: Any, attrs: tuple[Any, ...], out: Any) -> Any:
    if out is not None:
        raise ValueError(
            "out= does not support autograd, and x requires grad (stop_gradient=False): call "
            "without out=, or under paddle.no_grad()"
        )
    if op.vjp is None:
        raise TypeError(f"{op.name} is not differentiable: pass a tensor with stop_gradient=True")
    return _layer(op).apply(x, *attrs)


@functools.cache
def _layer(op: Op) -> Any:
    paddle = sys.modules["paddle"]

    class OpLayer(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx: Any, x: Any, *attrs: Any) -> Any:
            ctx.attrs = attrs
            out = paddle.empty_like(x)
            op.fn(out, x, *attrs)
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return op.vjp(grad.contiguous(), *ctx.attrs)

    OpLayer.__name__ = OpLayer.__qualname__ = f"scale_lib_{op.name}"
    return OpLayer
