# SPDX-License-Identifier: Apache-2.0
"""PaddlePaddle: plain calls go straight to the library (Paddle publishes its stream and its
allocator to TVM-FFI); calls that autograd must see run as a ``paddle.autograd.PyLayer`` whose
backward is the op's vjp."""

from __future__ import annotations

import functools
import sys
from typing import Any

from ._adapter import Adapter
from ._op import Op
from ._spec import Shape


class PaddleAdapter(Adapter):
    name = module = "paddle"
    publishes_allocator = True
    guards_out = True

    def array_type(self) -> type | None:
        paddle = sys.modules.get("paddle")
        return None if paddle is None else paddle.Tensor

    def takes_call(self, op: Op, inputs: tuple[Any, ...]) -> bool:
        paddle = sys.modules["paddle"]
        for t in inputs:  # distributed tensors are refused by call(); see "Auto-parallel" below
            if isinstance(t, paddle.Tensor) and t.is_dist():
                return True
        # An integer result (indices) has no gradient: nothing for autograd to see.
        if not op.output_has_gradient:
            return False
        return any(isinstance(t, paddle.Tensor) and not t.stop_gradient for t in inputs) and (
            paddle.is_grad_enabled()
        )

    def call(self, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        _refuse_distributed(op, inputs)
        if out is not None:
            raise ValueError(
                "out= does not support autograd, and an input requires grad (stop_gradient=False): "
                "call without out=, or under paddle.no_grad()"
            )
        if op.spec.vjp is None:
            raise TypeError(f"{op.name} is not differentiable: pass tensors with stop_gradient=True")
        return _layer(op).apply(*inputs, *attrs)

    def check_out(self, out: Any, arg_name: str) -> None:
        if not out.stop_gradient:
            raise ValueError(
                f"{arg_name} needs a gradient (stop_gradient=False); scale_lib does not write into "
                f"it. Write into {arg_name}.detach() to update its values"
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


@functools.cache
def _layer(op: Op) -> Any:
    paddle: Any = sys.modules["paddle"]
    n = op.n_inputs

    class OpLayer(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:
            inputs, attrs = args[:n], args[n:]
            out = ADAPTER.empty(inputs[op.like_index], *_shape_dtype(op, inputs))
            op.fn(out, *inputs, *attrs)
            ctx.present = [t is not None for t in inputs]
            # What Paddle wants back for each input: a gradient for a Paddle tensor that needs
            # one, None for one that does not (stop_gradient), nothing for any other argument
            # (None, another framework's array).
            ctx.wants = [None if not isinstance(t, paddle.Tensor) else not t.stop_gradient for t in inputs]
            ctx.save_for_backward(*(t for t in inputs if t is not None), out)
            ctx.attrs = attrs
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            *saved, out = ctx.saved_tensor()
            saved_inputs = iter(saved)
            inputs = [next(saved_inputs) if present else None for present in ctx.present]
            grads = op.vjp(grad.contiguous(), out, inputs, ctx.attrs)
            return tuple(
                g if wanted else None
                for g, wanted in zip(grads, ctx.wants, strict=True)
                if wanted is not None
            )

    OpLayer.__name__ = OpLayer.__qualname__ = f"scale_lib_{op.name}"
    return OpLayer


def _shape_dtype(op: Op, inputs: tuple[Any, ...]) -> tuple[Shape | None, str | None]:
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
def _refuse_distributed(op: Op, inputs: tuple[Any, ...]) -> None:
    for spec, t in zip(op.spec.inputs, inputs, strict=True):
        if isinstance(t, sys.modules["paddle"].Tensor) and t.is_dist():
            raise ValueError(
                f"{spec.name} is a Paddle distributed tensor; scale_lib ops have no Paddle "
                "auto-parallel (SPMD) rule. Call the op on each rank's shard with "
                "paddle.distributed.local_map"
            )
