# SPDX-License-Identifier: Apache-2.0
"""JAX: an op's XLA FFI call, and the rules that let XLA partition and batch it.

XLA cannot see into an FFI call: without a rule it replicates the inputs (an all-gather) and
the output. Each op's XLA call is wrapped in jax.experimental.custom_partitioning with a Shardy
sharding rule derived from its declared sharding kind, and in jax.custom_batching.custom_vmap
(custom_partitioning has no batching rule of its own; vmap adds a leading batch dimension,
sharded like any other batch dimension). ``_jax`` (the adapter) calls :func:`partitioned`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ._bound_op import BoundOp, sharding_of

_WORKSPACE_SLACK = 256  # jax-tvm-ffi aligns each allocation in the workspace to 128 bytes


def target(op: BoundOp) -> str:
    return f"scale_lib.{op.name}"


def _attribute(value: Any) -> Any:
    # XLA attributes are typed: pass Python scalars with the width the C++ signature expects.
    import numpy as np

    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value)
    return np.float64(value)


def _xla_call(op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...], batch: tuple[int, ...]) -> Any:
    """One XLA FFI call; ``batch``: leading dimensions of every input that the op's output keeps
    (from the batching rule of ``_batchable``)."""
    import jax
    import numpy as np

    example = [jax.ShapeDtypeStruct(t.shape[len(batch) :], t.dtype) for t in inputs]
    like = example[op.like_index]
    shape = batch + (like.shape if op.spec.output.shape is None else tuple(op.spec.output.shape(*example)))
    dtype = like.dtype if op.spec.output.dtype is None else op.spec.output.dtype
    results = [jax.ShapeDtypeStruct(shape, dtype)]
    if op.workspace_bytes is not None:
        numel, groups = int(np.prod(inputs[0].shape, dtype=np.int64)), int(np.prod(shape, dtype=np.int64))
        nbytes = op.workspace_bytes(numel, max(groups, 1)) + _WORKSPACE_SLACK
        results.append(jax.ShapeDtypeStruct((nbytes,), np.uint8))
    kwargs = {attr.name: _attribute(value) for attr, value in zip(op.spec.attrs, attrs, strict=True)}
    # Under jax.vmap the kernel sees the batched arrays, which every op handles as more leading
    # dimensions: a batching rule, not a loop over the batch.
    call = jax.ffi.ffi_call(target(op), results, vmap_method=op.spec.jax.vmap_method)
    return call(*inputs, **kwargs)[0]


# The declared sharding kinds:
#
# "elementwise"  Inputs and output share a shape: every dimension may be sharded, the output
#                like the inputs.
# "rows"         The last dimension of the first input x stays whole (a sharded one is
#                gathered); every leading dimension is a batch of rows and may be sharded.
#                Per-feature inputs (Sharding.per_feature: a weight) have the shape of the last
#                dimension; every other input, and the output, has x's leading dimensions and
#                x's last dimension or one of its own (Sharding.own_last), whole. An output that
#                drops a leading dimension is a sum over it: each device sums its rows and the
#                partial sums are added (psum).
# "reduction"    One value from the whole array (a norm): each device reduces its shard and
#                the local norms are combined (sqrt(psum(norm**2))). 16-bit inputs are gathered
#                first: their squared norms overflow easily.
# None           No rule: the call runs as it is (ops whose output size depends on the data
#                never reach XLA).
#
# Ops with a workspace are batched by broadcasting: jax-tvm-ffi takes the workspace's size from
# its first dimension, so vmap must not batch the workspace output as ffi_call would; the batch
# is folded into the op's leading dimensions instead (one call, one 1-D workspace). Under
# shard_map and on one device the op is called directly. Collectives come from XLA (resharding
# to the rule) and jax.lax.psum; the library itself never communicates.
_VMAP_METHODS = ("broadcast_all", "expand_dims")


def check_partitionable(op: BoundOp) -> None:
    """The declaration's sharding and vmap method are ones the rules below handle."""
    sharding_of(op)
    if op.spec.jax.vmap_method not in _VMAP_METHODS:
        raise ValueError(
            f"{op.name}: unsupported JaxOptions.vmap_method {op.spec.jax.vmap_method!r}; expected one "
            f"of {_VMAP_METHODS}"
        )


# The traced pieces per op and attribute values: bounded like the eager programs, so that calls
# with ever new attribute values keep memory bounded (evicted ones are traced again if used).
# How many eager programs _jax keeps compiled, one per op and attribute values.
COMPILED_KEPT = 64
_TRACED_KEPT = 4 * COMPILED_KEPT


@functools.lru_cache(maxsize=_TRACED_KEPT)
def partitioned(op: BoundOp, attrs: tuple[Any, ...]) -> Callable[..., Any]:
    """``op`` with ``attrs`` as a jitted JAX function of its input arrays that carries its
    partitioning rule and its batching rule."""
    import jax

    return jax.jit(_batchable(op, attrs, 0))


def _vmap_method(op: BoundOp) -> str:
    return "broadcast_all" if op.workspace_bytes is not None else op.spec.jax.vmap_method


@functools.lru_cache(maxsize=_TRACED_KEPT)
def _batchable(op: BoundOp, attrs: tuple[Any, ...], batch_ndim: int) -> Callable[..., Any]:
    """The op on inputs with ``batch_ndim`` leading vmap dimensions; ``jax.vmap`` of it adds
    one more. Under ``"expand_dims"`` an unbatched per-feature input (a weight) gets a batch
    dimension of size 1 (it stays one row); any other unbatched input (an incoming gradient of
    ones, say) is broadcast to the batch."""
    import jax

    per_feature = sharding_of(op).per_feature
    expand = _vmap_method(op) == "expand_dims"

    @jax.custom_batching.custom_vmap
    def f(*inputs: Any) -> Any:
        return _partition(op, attrs, batch_ndim, inputs)(*inputs)

    @f.def_vmap
    def rule(axis_size: int, in_batched: list[bool], *inputs: Any) -> tuple[Any, bool]:
        if expand and any(feature and b for feature, b in zip(per_feature, in_batched, strict=True)):
            # A per-example weight: the kernel takes one weight for all its rows, so this batch
            # runs as one call per example.
            def one(sliced: tuple[Any, ...]) -> Any:
                it = iter(sliced)
                return f(*(next(it) if b else t for t, b in zip(inputs, in_batched, strict=True)))

            mapped = tuple(t for t, b in zip(inputs, in_batched, strict=True) if b)
            return jax.lax.map(one, mapped), True

        def batched(feature: bool, t: Any) -> Any:
            if expand and feature:
                return jax.numpy.expand_dims(t, 0)
            return jax.numpy.broadcast_to(t, (axis_size, *t.shape))

        inputs = tuple(
            t if b else batched(feature, t)
            for feature, t, b in zip(per_feature, inputs, in_batched, strict=True)
        )
        return _batchable(op, attrs, batch_ndim + 1)(*inputs), True

    return f


def _batch_of(inputs: Sequence[Any], batch_ndim: int) -> tuple[int, ...]:
    # An input unbatched under expand_dims has size 1 there; the batch may be any size, 0 too.
    return tuple(
        next((int(t.shape[d]) for t in inputs if int(t.shape[d]) != 1), 1) for d in range(batch_ndim)
    )


def _partition(
    op: BoundOp, attrs: tuple[Any, ...], batch_ndim: int, inputs: Sequence[Any]
) -> Callable[..., Any]:
    """The op's XLA call wrapped in ``custom_partitioning`` with the rule for these shapes."""
    from jax.experimental.custom_partitioning import custom_partitioning

    def local(*arrays: Any) -> Any:  # also what runs on each device, on its shards
        return _xla_call(op, arrays, attrs, _batch_of(arrays, batch_ndim))

    rule = _rule(op, batch_ndim, inputs)
    if rule is None:
        return local
    f = custom_partitioning(local)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        return rule.partition(local, mesh, arg_shapes)

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:  # GSPMD only
        return rule.partition(local, mesh, arg_shapes)[2]

    f.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=rule.einsum(),
        reduction_factors=rule.reduced,
        need_replication_factors=rule.whole,
    )
    return f


class _Rule:
    """Which factor each dimension of each input and of the output is, and which factors stay
    whole (need replication) or are summed over (reduction)."""

    def __init__(
        self,
        inputs: list[tuple[str, ...]],
        output: tuple[str, ...],
        whole: tuple[str, ...],
        reduced: tuple[str, ...],
        combine: str | None,
    ) -> None:
        self.inputs = inputs
        self.output = output
        self.whole = whole
        self.reduced = reduced
        self.combine = combine  # how partial results over reduced factors are combined

    def einsum(self) -> str:
        return ", ".join(" ".join(f) for f in self.inputs) + " -> " + " ".join(self.output)

    def partition(self, local: Callable[..., Any], mesh: Any, arg_shapes: Any) -> Any:
        from jax.sharding import NamedSharding, PartitionSpec

        axes: dict[str, Any] = {}  # factor -> mesh axis (or axes) that shard it
        used: set[str] = set()
        for factors, arg in zip(self.inputs, arg_shapes, strict=True):
            for factor, entry in zip(factors, _spec_entries(arg, len(factors)), strict=True):
                names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
                if factor in axes or factor in self.whole or not names or used & set(names):
                    continue
                axes[factor] = entry
                used |= set(names)

        def sharding(factors: tuple[str, ...]) -> Any:
            return NamedSharding(mesh, PartitionSpec(*(axes.get(f) for f in factors)))

        reduce_over = tuple(
            name
            for f in self.reduced
            if f in axes
            for name in ((axes[f],) if isinstance(axes[f], str) else axes[f])
        )
        combine = self.combine

        def lower(*arrays: Any) -> Any:
            y = local(*arrays)
            if not reduce_over:
                return y
            import jax

            if combine == "sum":
                return jax.lax.psum(y, reduce_over)
            squares = jax.numpy.square(y)  # float32/float64 only: see _rule
            return jax.numpy.sqrt(jax.lax.psum(squares, reduce_over)).astype(y.dtype)

        return mesh, lower, sharding(self.output), tuple(sharding(f) for f in self.inputs)


def _spec_entries(arg: Any, ndim: int) -> tuple[Any, ...]:
    spec = getattr(getattr(arg, "sharding", None), "spec", None)
    entries = tuple(spec) if spec is not None else ()
    return entries + (None,) * (ndim - len(entries))


def _rule(op: BoundOp, batch_ndim: int, inputs: Sequence[Any]) -> _Rule | None:
    """The rule for ``op`` on ``inputs`` (``None``: no rule, call directly)."""
    sharding = sharding_of(op)
    if sharding.kind is None:
        return None
    x = inputs[0]
    ndim = x.ndim - batch_ndim
    size = _batch_of(inputs, batch_ndim)

    def batch_factors(t: Any, tag: str) -> tuple[str, ...]:
        # A size-1 dimension of an input unbatched under expand_dims is a factor of its own.
        return tuple(f"v{d}" if t.shape[d] == size[d] else f"{tag}_u{d}" for d in range(batch_ndim))

    batch_out = tuple(f"v{d}" for d in range(batch_ndim))
    dims = tuple(f"d{d}" for d in range(ndim))
    tags = [f"i{i}" for i in range(len(inputs))]
    if sharding.kind == "elementwise":
        ins = [batch_factors(t, tag) + dims for t, tag in zip(inputs, tags, strict=True)]
        return _Rule(ins, batch_out + dims, (), (), None)
    if ndim == 0:
        return None
    if sharding.kind == "rows":
        ins = []
        whole = dims[-1:]
        for feature, own_last, t, tag in zip(
            sharding.per_feature, sharding.own_last, inputs, tags, strict=True
        ):
            if feature:
                own = dims[-1:]
            elif own_last:  # x's leading dimensions and a last one of its own, used whole
                own = (*dims[:-1], f"{tag}_last")
                whole += own[-1:]
            else:
                own = dims[: t.ndim - batch_ndim]
            ins.append(batch_factors(t, tag) + own)
        kept = sharding.output_dims(ndim)
        if kept and kept[:-1] == list(range(ndim - 1)) and kept[-1] is None:
            out = (*dims[:-1], "out_last")  # a last dimension of its own, whole: (..., d)
            whole += out[-1:]
        elif None in kept:
            return None  # an output dimension that is not one of x's: no rule (replicated)
        else:
            out = tuple(dims[d] for d in kept if d is not None)
        reduced = tuple(f for f in dims[:-1] if f not in out)  # rows summed over
        return _Rule(ins, batch_out + out, whole, reduced, "sum")
    # "reduction": float32/float64 reduce their shards; 16-bit inputs are gathered.
    ins = [batch_factors(x, "i0") + dims]
    if str(x.dtype) in ("float32", "float64"):
        return _Rule(ins, batch_out, (), dims, "norm")
    return _Rule(ins, batch_out, dims, (), None)
