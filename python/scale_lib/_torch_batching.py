# SPDX-License-Identifier: Apache-2.0
"""``torch.vmap`` batching rules for the custom ops, derived from each op's declaration as its
sharding rules are (``_op.sharding_of``), so an op a fork adds is batched without code of its own.

``torch.func.vmap``, ``jacrev``, ``jacfwd``, ``torch.autograd.functional.jacobian(vectorize=True)``
and ``torch.autograd.grad(is_grads_batched=True)`` call the op on tensors with one more (batch)
dimension. Where the op treats leading dimensions as independent (``"elementwise"``: every
element; ``"rows"``: every row of the last dimension), the batch becomes one more leading
dimension and the op runs once; an unbatched input that must match is broadcast (a copy, since
kernels take contiguous arrays), and a per-feature input (a weight) stays one vector for all rows.
Otherwise (a reduction, a per-example weight, an output summed over rows) the op runs once per
batch element and the results are stacked. Ops whose result size depends on the data cannot be
batched: ``TypeError``.
"""

from __future__ import annotations

from typing import Any

import torch

from ._bound_op import BoundOp, check_one_device, sharding_of


def register(op: BoundOp, qualname: str, functional: Any, library: Any) -> None:
    """Register the batching rule of the functional custom op ``qualname`` (``functional``: its
    ``OpOverload``)."""
    torch.library.register_vmap(qualname, _rule(op, functional), lib=library)


def _rule(op: BoundOp, functional: Any) -> Any:
    n = op.n_inputs
    sharding = sharding_of(op)

    def rule(info: Any, in_dims: tuple[Any, ...], *args: Any) -> tuple[Any, int]:
        if op.spec.output.allocated_by_library:
            raise TypeError(
                f"{op.name} cannot be batched by torch.vmap: the size of its result depends on the data"
            )
        inputs, attrs = args[:n], args[n:]
        batched = tuple(d is not None for d in in_dims[:n])
        # The batch dimension first: the op's leading dimension (a view; kernels that need a
        # contiguous array get one below).
        moved = tuple(
            t if d is None or t is None else t.movedim(d, 0) for t, d in zip(inputs, in_dims[:n], strict=True)
        )
        size = info.batch_size
        if _folds(op, sharding, batched, moved):
            folded = tuple(
                None
                if t is None
                else t.contiguous()
                if b
                else t
                if feature
                else t.expand(size, *t.shape).contiguous()
                for t, b, feature in zip(moved, batched, sharding.per_feature, strict=True)
            )
            return functional(*folded, *attrs), 0
        if size == 0:  # no example to run: the fake implementation gives one's result
            named = [(name, t.device) for name, t in zip(op.input_names, moved, strict=True) if t is not None]
            check_one_device(op, named)  # (which the meta examples below cannot tell)
            example = functional(*(_meta_example(t, b) for t, b in zip(moved, batched, strict=True)), *attrs)
            return moved[0].new_empty((0, *example.shape), dtype=example.dtype), 0
        results = [  # an example of a batch not in dimension 0 is strided: made contiguous
            functional(*(t[i].contiguous() if b else t for t, b in zip(moved, batched, strict=True)), *attrs)
            for i in range(size)
        ]
        return torch.stack(results), 0

    return rule


def _folds(op: BoundOp, sharding: Any, batched: tuple[bool, ...], moved: tuple[Any, ...]) -> bool:
    """Whether the batch can be one more leading dimension of a single call."""
    if sharding.kind == "elementwise":
        return True
    if sharding.kind != "rows":
        return False
    if any(b and feature for b, feature in zip(batched, sharding.per_feature, strict=True)):
        return False  # a per-example weight: the kernel takes one weight for all its rows
    x = moved[0]
    ndim = x.ndim - 1 if batched[0] else x.ndim
    # Every leading dimension of the folded x (the batch, then an example's) is a leading
    # dimension of the output, in order: the batch stays one. An output summed over rows (a
    # weight gradient) would sum over the batch too, also where an example is one row.
    return ndim >= 1 and sharding.output_dims(ndim + 1)[:ndim] == list(range(ndim))


def _meta_example(t: Any, batched: bool) -> Any:
    """One example of input ``t`` (batch first where ``batched``) as a meta tensor (no data)."""
    if t is None:
        return None
    return torch.empty(t.shape[1:] if batched else t.shape, dtype=t.dtype, device="meta")
