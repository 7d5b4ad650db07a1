"""The distributed-array rules come from an op's declaration alone: its ``sharding`` kind, its
``linear`` flag and its inputs' ``shape`` rules. Checked on declarations a fork could write (bound
to an existing exported function, which the rules never call), without running a distributed
program; tests/test_distributed_*.py run the real ops on sharded arrays."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from scale_lib._bound_op import BoundOp, sharding_of
from scale_lib._spec import Input, OpSpec, Output


def _last(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[-1:]


def _leading(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-1]


# Declarations of ops a fork could write, bound to `scale` (the export every library made from the
# template has): only their declarations matter to the rules.
# A layer norm: two per-feature inputs under names no rule knows, and a row-aligned one.
LAYER_NORM = OpSpec(
    "scale",
    inputs=(
        Input("x"),
        Input("gamma", shape=_last),
        Input("beta", shape=_last),
        Input("mask", shape=_leading),
    ),
    sharding="rows",
)
# Its weight gradient: a sum over rows.
GAMMA_GRAD = OpSpec(
    "scale",
    inputs=(Input("grad"), Input("x")),
    output=Output(like="grad", shape=lambda grad, x: x.shape[-1:]),
    sharding="rows",
)
GELU = OpSpec("scale", sharding="elementwise")  # not linear
LERP = OpSpec("scale", inputs=(Input("x"), Input("y")), sharding="elementwise", linear=True)


def test_per_feature_inputs_come_from_shape_rules() -> None:
    s = sharding_of(BoundOp(LAYER_NORM))
    assert s.per_feature == (False, True, True, False)
    assert s.output_dims(3) == [0, 1, 2]
    assert sharding_of(BoundOp(GAMMA_GRAD)).output_dims(3) == [2]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (OpSpec("scale", sharding="diagonal"), "unknown sharding kind 'diagonal'"),
        (OpSpec("scale", inputs=(Input("x"), Input("y", shape=_last)), sharding="elementwise"), "input y"),
        (OpSpec("scale", inputs=(Input("x"), Input("y", shape=lambda s: s[1:])), sharding="rows"), "input y"),
    ],
)
def test_declarations_no_rule_can_place_are_refused(spec: OpSpec, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sharding_of(BoundOp(spec))


# ---------------------------------------------------------------------------------------------
# PyTorch: DTensor strategies
# ---------------------------------------------------------------------------------------------
def _torch_strategies(spec: OpSpec, *ndims: int, dtype: str = "float32") -> list[tuple[Any, Any]]:
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("this PyTorch has no torch.distributed")
    from scale_lib import _torch_dtensor

    meta = SimpleNamespace(dtype=getattr(torch, dtype))
    specs = [SimpleNamespace(ndim=n, tensor_meta=meta) for n in ndims]
    rule = _torch_dtensor._StrategyRule(BoundOp(spec))
    return [(tuple(out), tuple(ins)) for out, ins in rule.strategies(*specs)]


def test_torch_rows_replicate_per_feature_inputs() -> None:
    pytest.importorskip("torch.distributed.tensor")
    from torch.distributed.tensor import Replicate, Shard

    r, s0, s1 = Replicate(), Shard(0), Shard(1)
    assert _torch_strategies(LAYER_NORM, 3, 1, 1, 2) == [
        ((s0,), (s0, r, r, s0)),
        ((s1,), (s1, r, r, s1)),
        ((r,), (r, r, r, r)),
    ]


def test_torch_rows_sum_over_dropped_rows() -> None:
    pytest.importorskip("torch.distributed.tensor")
    from torch.distributed.tensor import Partial, Replicate, Shard

    assert _torch_strategies(GAMMA_GRAD, 2, 2) == [
        ((Partial("sum"),), (Shard(0), Shard(0))),
        ((Replicate(),), (Replicate(), Replicate())),
    ]


def test_torch_only_linear_ops_keep_partial() -> None:
    pytest.importorskip("torch.distributed.tensor")
    from torch.distributed.tensor import Partial

    def partial(spec: OpSpec, *ndims: int) -> list[Any]:
        return [out for out, _ in _torch_strategies(spec, *ndims) if isinstance(out[0], Partial)]

    assert partial(GELU, 2) == []
    assert partial(LERP, 2, 2) == [(Partial("sum"),), (Partial("avg"),)]


# ---------------------------------------------------------------------------------------------
# JAX: Shardy sharding rules
# ---------------------------------------------------------------------------------------------
def _jax_rule(spec: OpSpec, *shapes: tuple[int, ...], dtype: str = "float32") -> Any:
    jax = pytest.importorskip("jax")
    from scale_lib import _jax_xla

    return _jax_xla._rule(BoundOp(spec), 0, [jax.ShapeDtypeStruct(s, dtype) for s in shapes])


def test_jax_rows_rule() -> None:
    rule = _jax_rule(LAYER_NORM, (4, 6, 8), (8,), (8,), (4, 6))
    assert rule.einsum() == "d0 d1 d2, d2, d2, d0 d1 -> d0 d1 d2"
    assert rule.whole == ("d2",) and rule.reduced == ()
    rule = _jax_rule(GAMMA_GRAD, (4, 8), (4, 8))
    assert rule.einsum() == "d0 d1, d0 d1 -> d1"
    assert rule.reduced == ("d0",) and rule.combine == "sum"


def test_jax_elementwise_rule() -> None:
    assert _jax_rule(LERP, (4, 6), (4, 6)).einsum() == "d0 d1, d0 d1 -> d0 d1"
