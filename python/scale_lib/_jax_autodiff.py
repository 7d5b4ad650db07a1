# SPDX-License-Identifier: Apache-2.0
"""JAX derivatives of every op: forward mode from its declared jvp, reverse mode from its
declared vjp, and every higher derivative whose pieces declare theirs.

Each op is a ``jax.custom_jvp``. Its rule returns the op's output and the output's tangent as
one ``scale_lib_linearized`` primitive: a map linear in the input tangents, with the inputs and
the output as fixed operands. Forward mode (``jax.jvp``, ``jax.jacfwd``, ``jax.linearize``)
evaluates it with the op's jvp. Reverse mode (``jax.grad``, ``jax.vjp``) linearizes the op into
that primitive and transposes it, and its transpose is the op's vjp: the backward kernels run,
not a transposition of the jvp's math. The primitive's own derivative (a second derivative)
differentiates the jvp in the inputs, so it exists exactly where the ops the jvp is written with
have derivatives; the vjp, written with ops too, is differentiated the same way. Under
``jax.vmap`` the primitive stays itself, over one more leading dimension of every operand, so
that ``jax.grad`` of a vmapped function still transposes it into the vjp (mapped over the batch).

Where a piece has no derivative the refusal is a ``TypeError`` naming the op that lacks it:
an op without a jvp refuses forward mode when the tangent is computed (``BoundOp.refuse_jvp``), one
without a vjp refuses reverse mode when it is transposed, and an op without either (a private
op a vjp is made of) refuses any derivative through it. Never a silently wrong number.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._bound_op import BoundOp


def differentiable(op: BoundOp, primal: Callable[..., Any]) -> Callable[..., Any]:
    """``primal`` (a function of ``(*inputs, attrs)``, ``attrs`` hashable) with the op's
    derivatives."""
    import jax

    n = op.n_inputs
    f = jax.custom_jvp(primal, nondiff_argnums=(n,))

    def rule(attrs: Any, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
        # The output comes from f itself, so that a derivative of this rule (second order) sees
        # the op's rule again rather than the bare XLA call, which has none.
        out = f(*primals, attrs)
        nonzero = tuple(None if _is_zero(t) else t for t in tangents)
        if not op.output_has_gradient or all(t is None for t in nonzero):
            return out, _symbolic_zero(out)
        if op.spec.vjp is None and not op.has_jvp:
            raise TypeError(_not_differentiable(op))
        return out, _linearized(op, attrs, tuple(primals), out, nonzero)

    f.defjvp(rule, symbolic_zeros=True)
    return f


def _not_differentiable(op: BoundOp) -> str:
    return (
        f"{op.name} is not differentiable under JAX: its declaration has neither a jvp nor a vjp. "
        "Nothing that differentiates through it is supported, such as a second derivative "
        "(jax.hessian, jax.grad of jax.grad, jax.jacfwd of a gradient) of an op whose derivative "
        f"calls {op.name}"
    )


def _no_vjp(op: BoundOp) -> str:
    return (
        f"{op.name} has no reverse-mode derivative under JAX (its declaration has no vjp): "
        "jax.grad, jax.vjp and jax.jacrev are not supported for it; use forward mode (jax.jvp, "
        "jax.jacfwd)"
    )


def _is_zero(t: Any) -> bool:
    import jax

    if t is None or type(t) is jax.custom_derivatives.SymbolicZero:
        return True
    return str(getattr(t, "dtype", "")) == "float0"  # an integer input's tangent


def _symbolic_zero(out: Any) -> Any:
    import jax

    return jax.custom_derivatives.SymbolicZero(jax.typeof(out).to_tangent_aval())


# ---------------------------------------------------------------------------------------------
# The linearized op: operands (*present inputs, out, *present tangents)
# ---------------------------------------------------------------------------------------------
def _linearized(
    op: BoundOp, attrs: Any, inputs: tuple[Any, ...], out: Any, tangents: tuple[Any, ...], batch: int = 0
) -> Any:
    """The output's tangent, ``tangents`` one per input (``None``: zero or absent); every
    operand has ``batch`` leading vmap dimensions (see :func:`_batch`)."""
    present = tuple(x is not None for x in inputs)
    perturbed = tuple(t is not None for t in tangents)
    operands = (
        *(x for x in inputs if x is not None),
        out,
        *(t for t in tangents if t is not None),
    )
    return _bind(operands, op=op, attrs=attrs, present=present, perturbed=perturbed, batch=batch)


def _bind(operands: Sequence[Any], **params: Any) -> Any:
    """The primitive on ``operands``, with the op's jvp traced for their types."""
    import jax

    op = params["op"]
    jvp = None
    if op.has_jvp:
        avals = tuple(jax.typeof(x) for x in operands)
        jvp = _traced_jvp(op, params["attrs"], params["present"], params["perturbed"], avals, params["batch"])
    return _primitive().bind(*operands, **params, jvp=jvp)


def _over_batch(f: Callable[..., Any], batch: int) -> Callable[..., Any]:
    """``f`` of one example, mapped over ``batch`` leading dimensions of every argument."""
    import jax

    for _ in range(batch):
        f = jax.vmap(f)
    return f


def _unpack(
    operands: Sequence[Any], present: tuple[bool, ...], perturbed: tuple[bool, ...]
) -> tuple[list[Any], Any, list[Any]]:
    """``(inputs, out, tangents)`` from the primitive's operands, ``None`` where absent."""
    it = iter(operands)
    inputs = [next(it) if p else None for p in present]
    out = next(it)
    tangents = [next(it) if p else None for p in perturbed]
    return inputs, out, tangents


def _evaluate(
    operands: Sequence[Any], *, op: BoundOp, attrs: Any, present: Any, perturbed: Any, batch: int, jvp: Any
) -> Any:
    """The tangent, computed by the op's jvp (what forward mode runs); refused without one."""
    if jvp is None:
        op.refuse_jvp()
    return _batched_tangent(op, attrs, present, perturbed, batch, operands)


def _batched_tangent(
    op: BoundOp, attrs: Any, present: Any, perturbed: Any, batch: int, operands: Sequence[Any]
) -> Any:
    return _over_batch(lambda *o: _tangent(op, attrs, present, perturbed, o), batch)(*operands)


def _tangent(op: BoundOp, attrs: Any, present: Any, perturbed: Any, operands: Sequence[Any]) -> Any:
    inputs, out, tangents = _unpack(operands, present, perturbed)
    tangent = op.jvp(tangents, out, inputs, tuple(attrs))
    if tangent is None:  # a declared jvp may say "zero" so
        return sys.modules["jax.numpy"].zeros_like(out)
    return tangent if tangent.dtype == out.dtype else tangent.astype(out.dtype)


@functools.lru_cache(maxsize=256)
def _traced_jvp(
    op: BoundOp, attrs: Any, present: Any, perturbed: Any, avals: tuple[Any, ...], batch: int
) -> Any:
    """The op's jvp as a jaxpr, a parameter of the primitive, so that JAX's passes over a
    program see the ops inside the tangent map as they see those inside any call (XLA must be
    given devices to lower the ops' partitioning rules; a primitive it cannot see into would be
    lowered without them) and XLA lowers the map as that jaxpr."""
    import jax

    specs = (jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in avals)
    return jax.make_jaxpr(lambda *operands: _batched_tangent(op, attrs, present, perturbed, batch, operands))(
        *specs
    )


@functools.cache
def _primitive() -> Any:
    from jax.extend.core import Primitive, jaxpr_as_fun
    from jax.interpreters import ad, batching, mlir

    p = Primitive("scale_lib_linearized")
    p.def_impl(lambda *operands, **params: _evaluate(operands, **params))
    p.def_abstract_eval(_abstract_eval)

    def lower(ctx: Any, *operands: Any, op: BoundOp, jvp: Any, **params: Any) -> Any:
        if jvp is None:
            op.refuse_jvp()
        return mlir.lower_fun(jaxpr_as_fun(jvp), multiple_results=True)(ctx, *operands)

    mlir.register_lowering(p, lower)
    ad.primitive_jvps[p] = _jvp
    ad.primitive_transposes[p] = _transpose
    batching.primitive_batchers[p] = _batch
    return p


def _abstract_eval(*avals: Any, present: Any, **params: Any) -> Any:
    return avals[sum(present)]  # the tangent has the output's type


def _jvp(primals: Sequence[Any], tangents: Sequence[Any], **params: Any) -> tuple[Any, Any]:
    """The derivative of the tangent map (a second derivative): linear in the tangents, so in
    them the same map of their tangents; in the inputs and the output, whatever differentiating
    the op's jvp gives, which needs the derivatives of the ops it is written with."""
    import jax
    from jax.interpreters import ad

    y = _primitive().bind(*primals, **params)
    params = {k: v for k, v in params.items() if k != "jvp"}
    n = sum(params["present"]) + 1
    fixed, dfixed = primals[:n], tangents[:n]
    ts, dts = primals[n:], iter(tangents[n:])
    parts = []
    # One entry per input again: None where the primitive has no tangent or its tangent is zero.
    dts_full = [next(dts) if p else None for p in params["perturbed"]]
    kept = tuple(None if d is None or type(d) is ad.Zero else d for d in dts_full)
    if any(d is not None for d in kept):
        inputs, out, _ = _unpack((*fixed, *ts), params["present"], params["perturbed"])
        parts.append(_linearized(params["op"], params["attrs"], tuple(inputs), out, kept, params["batch"]))
    if any(type(d) is not ad.Zero for d in dfixed):
        op = params["op"]

        def tangent_of(*fixed_: Any) -> Any:
            if not op.has_jvp:
                op.refuse_jvp()
            return _batched_tangent(
                op, params["attrs"], params["present"], params["perturbed"], params["batch"], (*fixed_, *ts)
            )

        _, d = jax.jvp(tangent_of, tuple(fixed), tuple(ad.instantiate_zeros(d) for d in dfixed))
        parts.append(d)
    if not parts:
        return y, ad.Zero(jax.typeof(y).to_tangent_aval())
    return y, functools.reduce(lambda a, b: a + b, parts)


def _transpose(
    ct: Any, *operands: Any, op: BoundOp, attrs: Any, present: Any, perturbed: Any, batch: int, jvp: Any
) -> list[Any]:
    """Reverse mode: the op's vjp of the output's cotangent, for each tangent operand."""
    from jax.interpreters import ad

    n = sum(present) + 1
    fixed, ts = operands[:n], operands[n:]
    assert not any(ad.is_undefined_primal(x) for x in fixed), "the map is linear in the tangents only"
    linear = [ad.is_undefined_primal(t) for t in ts]
    if type(ct) is ad.Zero:
        return [None] * n + [ad.Zero(t.aval) if lin else None for t, lin in zip(ts, linear, strict=True)]
    if op.spec.vjp is None:
        raise TypeError(_no_vjp(op))
    inputs, out, _ = _unpack((*fixed, *ts), present, perturbed)

    def vjp(ct_: Any, out_: Any, *present_inputs: Any) -> list[Any]:
        it = iter(present_inputs)
        grads = op.vjp(ct_, out_, [next(it) if p else None for p in present], tuple(attrs))
        return [g for g, p in zip(grads, perturbed, strict=True) if p]

    wanted = _over_batch(vjp, batch)(ct, out, *(x for x in inputs if x is not None))
    return [None] * n + [
        None if not lin else ad.Zero(t.aval) if g is None else g
        for g, t, lin in zip(wanted, ts, linear, strict=True)
    ]


def _batch(operands: Sequence[Any], dims: Sequence[Any], **params: Any) -> tuple[Any, int]:
    """``jax.vmap`` (and ``jax.jacfwd``, ``jax.grad`` of a vmap): the same map over one more
    leading dimension of every operand (unbatched ones broadcast), so that it stays the op's
    linearization, which reverse mode transposes into its vjp, mapped over the batch."""
    import jax

    size = next(x.shape[d] for x, d in zip(operands, dims, strict=True) if d is not None)
    batched = tuple(
        jax.numpy.broadcast_to(x, (size, *x.shape)) if d is None else jax.numpy.moveaxis(x, d, 0)
        for x, d in zip(operands, dims, strict=True)
    )
    params = {k: v for k, v in params.items() if k != "jvp"}
    return _bind(batched, **{**params, "batch": params["batch"] + 1}), 0
