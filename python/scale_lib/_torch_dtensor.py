# SPDX-License-Identifier: Apache-2.0
"""PyTorch: DTensor sharding strategies for the custom ops (``torch.distributed.tensor``).

DTensor runs a custom op only through a sharding strategy registered for it: the placements of
the output for given placements of the inputs. Each op's declared ``sharding`` kind becomes
strategies, registered for ``scale_lib::<op>`` and ``scale_lib::<op>_out`` (``_torch`` defines
them and calls :func:`add_strategies`). DTensor then picks the cheapest strategy for the
placements it is given, redistributes the inputs that need it (with its own collectives) and
runs the op on the local shards.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch

from ._bound_op import BoundOp, sharding_of

# The declared sharding kinds:
#
# "elementwise"  Any Shard(d) or Replicate() of the inputs is kept by the output. Partial("sum")
#                and Partial("avg") are kept by ops declared ``linear`` (in all their tensor
#                inputs jointly, as scale is in x: an op of several inputs keeps them when all
#                its inputs are partial).
# "rows"         The last dimension of the first input x is a feature vector, every leading
#                dimension a batch of independent rows. Shard(d) of a leading dimension is
#                kept; the last dimension must be whole, so a tensor sharded on it is
#                redistributed. Per-feature inputs (``Sharding.per_feature``: a weight) are used
#                whole (Replicate); every other input is row-aligned. An output that keeps a
#                leading dimension of x is sharded like it; one that drops it is a sum over
#                rows, so row shards give Partial("sum") (a weight gradient).
# "reduction"    One value from the whole tensor (a norm). Shards of any dimension of a
#                float32/float64 input give the local norms as a partial 2-norm placement, which
#                DTensor reduces (square, all-reduce sum, square root) when the value is used;
#                16-bit inputs, whose squared norms overflow easily, are replicated first.
# None           No rule, as for an op whose output's size depends on the data, which DTensor's
#                shape propagation cannot express. The public function refuses DTensor
#                arguments with a ValueError (see before_custom_op_call).
#
# Importing torch.distributed.tensor takes about a second, so strategies are registered when it
# is already imported: at register() time, else on the first call through the custom op (every
# call with a DTensor is one) after it was imported. The direct eager path never gets here.
#
# The functional ops go through the public register_sharding; the _out variants through the
# strategy registry it sits on, because register_sharding would let DTensor redistribute out
# into a temporary copy and the result would never reach the caller's tensor.
_DTENSOR_MODULE = "torch.distributed.tensor"

# Ops registered with PyTorch but not yet with DTensor: (op, its functional custom op, its _out
# variant or None). Mutated in place: _torch reads it on every call through a custom op.
PENDING_STRATEGIES: list[tuple[BoundOp, Any, Any]] = []


def add_strategies(op: BoundOp, functional: Any, out_variant: Any) -> None:
    """Give ``op``'s custom ops (``torch.ops.<namespace>.<op>`` and its ``_out`` variant, or None)
    the strategies of its sharding kind: now if DTensor is imported, else later. Raises
    ``ValueError`` for a declaration no kind can place."""
    sharding_of(op)  # check the declaration now, not on a first distributed call
    PENDING_STRATEGIES.append((op, functional, out_variant))
    _register_pending_strategies()


def _register_pending_strategies() -> None:
    """Register the pending strategies if ``torch.distributed.tensor`` is imported (a DTensor
    can exist only then). Cheap when it is not."""
    if not PENDING_STRATEGIES or _DTENSOR_MODULE not in sys.modules or not _dtensor_available():
        return
    while PENDING_STRATEGIES:
        op, functional, out_variant = PENDING_STRATEGIES.pop(0)
        if op.spec.sharding is None:
            continue  # no rule: see before_custom_op_call
        rule = _StrategyRule(op)
        from torch.distributed.tensor.experimental import register_sharding

        register_sharding(functional.default)(rule.strategies)
        if out_variant is not None:
            _register_out_variant_strategy(out_variant.default, rule)


def before_custom_op_call(op: BoundOp, inputs: Sequence[Any]) -> None:
    """Register pending strategies, and refuse DTensor arguments of an op without a rule with a
    plain error (DTensor's own would be an internal failure of its shape propagation)."""
    _register_pending_strategies()
    if op.spec.sharding is None and _DTENSOR_MODULE in sys.modules:
        dtensor = sys.modules[_DTENSOR_MODULE].DTensor
        if any(isinstance(t, dtensor) for t in inputs):
            raise ValueError(
                f"{op.name} does not accept DTensor arguments: "
                + (
                    "the size of its result depends on the data"
                    if op.spec.output.allocated_by_library
                    else "it declares no sharding rule"
                )
                + ". Pass x.full_tensor() (the whole tensor) or x.to_local() (this rank's shard)"
            )


def _dtensor_available() -> bool:
    """Whether this PyTorch has DTensor (``torch.distributed`` built in)."""
    try:
        import torch.distributed

        if not torch.distributed.is_available():
            return False
        import torch.distributed.tensor
    except ImportError:
        return False
    return True


class _StrategyRule:
    """The single-mesh-dimension strategies of one op: ``[(output placements, placements of
    every argument)]``, as ``register_sharding`` takes them."""

    def __init__(self, op: BoundOp) -> None:
        self.sharding = sharding_of(op)
        self.kind = self.sharding.kind
        self.n_inputs = op.n_inputs
        self.n_attrs = len(op.spec.attrs)

    def strategies(self, *args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
        """Called by DTensor with a ``DTensorSpec`` for every tensor argument (``None`` for an
        absent optional one) and the scalar arguments as they are."""
        from torch.distributed.tensor import Replicate

        specs = args[: self.n_inputs]
        attrs: list[Any] = [None] * self.n_attrs
        if self.kind == "elementwise":
            result = self._elementwise(specs)
        elif self.kind == "rows":
            result = self._rows(specs)
        else:
            result = self._reduction(specs)
        # Everything replicated: always possible, listed last.
        result.append(([Replicate()], [None if s is None else Replicate() for s in specs]))
        return [(out, ins + attrs) for out, ins in result]

    def _elementwise(self, specs: Sequence[Any]) -> list[tuple[list[Any], list[Any]]]:
        from torch.distributed.tensor import Partial, Shard

        ndim = specs[0].ndim
        result = [([Shard(d)], [None if s is None else Shard(d) for s in specs]) for d in range(ndim)]
        if self.sharding.linear:
            for reduce_op in ("sum", "avg"):
                result.append(
                    ([Partial(reduce_op)], [None if s is None else Partial(reduce_op) for s in specs])
                )
        return result

    def _rows(self, specs: Sequence[Any]) -> list[tuple[list[Any], list[Any]]]:
        from torch.distributed.tensor import Partial, Replicate, Shard

        ndim = specs[0].ndim
        kept = self.sharding.output_dims(ndim)
        result = []
        for d in range(ndim - 1):  # the last dimension is never split
            out = Shard(kept.index(d)) if d in kept else Partial("sum")
            ins = [
                None if s is None else Replicate() if feature else Shard(d)
                for feature, s in zip(self.sharding.per_feature, specs, strict=True)
            ]
            result.append(([out], ins))
        return result

    def _reduction(self, specs: Sequence[Any]) -> list[tuple[list[Any], list[Any]]]:
        x = specs[0]
        if x.tensor_meta is None or x.tensor_meta.dtype not in (torch.float32, torch.float64):
            return []
        try:  # DTensor's own partial p-norm placement (what torch.linalg.vector_norm uses)
            from torch.distributed.tensor._ops._math_ops import _NormPartial
        except ImportError:  # a PyTorch without it: Replicate only
            return []
        from torch.distributed.tensor import Shard

        return [([_NormPartial(2)], [Shard(d)]) for d in range(x.ndim)]


def _register_out_variant_strategy(op_overload: Any, rule: _StrategyRule) -> None:
    """``<name>_out(out, *inputs, *attrs) -> ()``: the functional strategies with the output
    placement moved onto ``out``, which is written in place and so must not be redistributed."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

    def strategy(op_schema: Any) -> Any:
        _, *inputs = (_spec_of(a) for a in op_schema.args_schema)  # out, then the inputs
        strategies = [outs + ins for outs, ins in rule.strategies(*inputs)]
        return expand_to_full_mesh_op_strategy(
            op_schema.get_mesh_from_args(),
            op_schema,
            strategies,
            input_index=0,  # no returns: the first placement of each strategy is out's
            inplace_op=True,  # strategies that would move out are skipped
        )

    DTensor._op_dispatcher.sharding_propagator.register_op_strategy(
        op_overload, strategy, RuntimeSchemaInfo(static_argnum=100)
    )


def _spec_of(arg: Any) -> Any:
    from torch.distributed.tensor._op_schema import OpStrategy

    return arg.strategies[0].output_spec if isinstance(arg, OpStrategy) else arg
