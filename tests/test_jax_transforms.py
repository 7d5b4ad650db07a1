"""Every JAX transformation of every declared op: forward mode (``jax.jvp``, ``jax.jacfwd``,
``jax.linearize``) against float64 finite differences, reverse mode through the declared vjp, the
refusals of ops that declare no derivative, and eager calls that compile nothing per scalar value.

Driven by the declared ops (``scale_lib.ops.OPS`` and each op's ``CASE``): an op a fork adds is
checked the same way. The JAX adapter's second derivatives are in ``tests/test_higher_order.py``.
"""

from __future__ import annotations

import gc
import os
import re
from typing import Any

import numpy as np
import pytest
from backends import DTYPES, numpy_dtype
from cases import declared_cases, jax_device_for

import scale_lib
from scale_lib import _jax, _jax_eager
from scale_lib._bound_op import BoundOp
from scale_lib._dispatch import _REGISTERED
from scale_lib._spec import Attr, OpSpec
from scale_lib.ops import OPS

jax = pytest.importorskip("jax")
pytest.importorskip("jax_tvm_ffi")
jnp = jax.numpy
import jax.extend.backend  # noqa: E402 - after the skip: live_executables

CASES = declared_cases("cpu")
JITTABLE = [c for c in CASES if c.jittable]
SHAPE = (3, 4)
# Derivatives at every rank the rules branch on: one row (an output that may keep no dimension
# of x), rows, and rows of rows.
SHAPES = [pytest.param(shape, id="x".join(map(str, shape))) for shape in ((4,), SHAPE, (2, 3, 4))]
STEP = 1e-6  # central differences in float64: error ~ STEP**2, rounding ~ 1e-16 / STEP


def _op(case) -> BoundOp:
    return _REGISTERED[case.name]


def _variants() -> list[Any]:
    """Every case, and every case with each optional array absent."""
    params = []
    for case in CASES:
        params.append(pytest.param(case, (), id=case.name))
        params += [pytest.param(case, (name,), id=f"{case.name}-no-{name}") for name in case.optional]
    return params


def _cpu(a: np.ndarray) -> Any:
    return jax.device_put(jnp.asarray(a, jnp.float64), jax.devices("cpu")[0])


def _problem(
    case, absent: tuple[str, ...], seed: int = 0, shape: tuple[int, ...] = SHAPE
) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
    """``f`` of the present arrays, float64 primals (``x`` of ``shape``), and tangents for them."""
    data = case.numpy_inputs(seed, shape)
    present = [name for name in case.arrays if name not in absent]
    rng = np.random.default_rng(seed + 100)

    def f(*arrays: Any) -> Any:
        given = dict(zip(present, arrays, strict=True))
        return case.call(*(given.get(name) for name in case.arrays))

    primals = tuple(_cpu(data[name]) for name in present)
    tangents = tuple(_cpu(rng.standard_normal(data[name].shape)) for name in present)
    return f, primals, tangents


def _directional(f: Any, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> np.ndarray:
    plus = f(*(p + STEP * t for p, t in zip(primals, tangents, strict=True)))
    minus = f(*(p - STEP * t for p, t in zip(primals, tangents, strict=True)))
    return (np.asarray(plus) - np.asarray(minus)) / (2 * STEP)


def _jacobian(f: Any, primals: tuple[Any, ...], i: int) -> np.ndarray:
    """The finite-difference Jacobian of ``f`` in ``primals[i]``: ``out.shape + primals[i].shape``."""
    x = np.asarray(primals[i])
    columns = []
    for e in np.eye(x.size).reshape(x.size, *x.shape):
        tangents = tuple(_cpu(e) if j == i else jnp.zeros_like(p) for j, p in enumerate(primals))
        columns.append(_directional(f, primals, tangents))
    out_shape = columns[0].shape
    return np.moveaxis(np.stack(columns), 0, -1).reshape(*out_shape, *x.shape)


def _close(actual: Any, expected: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=1e-6, atol=1e-7, err_msg=what)


def _names(op_name: str) -> str:
    return rf"\b{re.escape(op_name)}\b"


# ---------------------------------------------------------------------------------------------
# Forward mode
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("case", "absent"), _variants())
def test_forward_mode_matches_finite_differences_or_is_refused(case, absent, shape: tuple[int, ...]) -> None:
    f, primals, tangents = _problem(case, absent, shape=shape)
    if not _op(case).has_jvp:  # refused, naming the op, by every forward-mode transformation
        with pytest.raises(TypeError, match=_names(case.name)):
            jax.jvp(f, primals, tangents)
        with pytest.raises(TypeError, match=_names(case.name)):
            jax.jacfwd(f, argnums=tuple(range(len(primals))))(*primals)

        def linearized() -> Any:  # refused by jax.linearize, or where the map is evaluated
            _, linear = jax.linearize(f, *primals)
            return linear(*tangents)

        with pytest.raises(TypeError, match=_names(case.name)):
            linearized()
        return
    expected = _directional(f, primals, tangents)
    out, tangent = jax.jvp(f, primals, tangents)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(f(*primals)))
    _close(tangent, expected, "jax.jvp")
    _, tangent = jax.jit(lambda p, t: jax.jvp(f, p, t))(primals, tangents)
    _close(tangent, expected, "jax.jit(jax.jvp)")
    out, linear = jax.linearize(f, *primals)
    _close(linear(*tangents), expected, "jax.linearize")
    _close(jax.jit(linear)(*tangents), expected, "jax.jit of the linearized function")
    jacobians = jax.jacfwd(f, argnums=tuple(range(len(primals))))(*primals)
    for i, jacobian in enumerate(jacobians):
        _close(jacobian, _jacobian(f, primals, i), f"jax.jacfwd in argument {i}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("case", "absent"), _variants())
def test_vmap_of_jvp_matches_a_loop(case, absent, shape: tuple[int, ...]) -> None:
    f, primals, _ = _problem(case, absent, shape=shape)
    batch = [_problem(case, absent, seed, shape)[1:] for seed in (1, 2, 3)]
    stacked_primals = tuple(jnp.stack(p) for p in zip(*(b[0] for b in batch), strict=True))
    stacked_tangents = tuple(jnp.stack(t) for t in zip(*(b[1] for b in batch), strict=True))

    def tangent(p: tuple[Any, ...], t: tuple[Any, ...]) -> Any:
        return jax.jvp(f, p, t)[1]

    if not _op(case).has_jvp:
        with pytest.raises(TypeError, match=_names(case.name)):
            jax.vmap(lambda t: tangent(primals, t))(stacked_tangents)
        return
    # Tangents batched over fixed primals (jax.jacfwd's pattern), and both batched.
    got = jax.vmap(lambda t: tangent(primals, t))(stacked_tangents)
    for k, (_, t) in enumerate(batch):
        _close(got[k], np.asarray(tangent(primals, t)), f"vmap over tangents, element {k}")
    got = jax.jit(jax.vmap(tangent))(stacked_primals, stacked_tangents)
    for k, (p, t) in enumerate(batch):
        _close(got[k], np.asarray(tangent(p, t)), f"vmap over primals and tangents, element {k}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("case", "absent"), [p for p in _variants() if p.values[0].jittable])
def test_vmap_over_a_batch_of_none_is_an_empty_result(case, absent, shape: tuple[int, ...]) -> None:
    f, primals, _ = _problem(case, absent, shape=shape)
    example = f(*primals)
    n = len(primals)
    for batched in {tuple(i == j for i in range(n)) for j in range(n)} | {(True,) * n}:
        inputs = tuple(
            jnp.zeros((0, *p.shape), p.dtype) if b else p for p, b in zip(primals, batched, strict=True)
        )
        in_axes = tuple(0 if b else None for b in batched)
        for g in (jax.vmap(f, in_axes), jax.jit(jax.vmap(f, in_axes))):
            result = g(*inputs)
            assert (result.shape, result.dtype) == ((0, *example.shape), example.dtype), batched


# ---------------------------------------------------------------------------------------------
# Reverse mode
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("case", "absent"), _variants())
def test_reverse_mode_runs_the_declared_vjp(
    case, absent, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    f, primals, _ = _problem(case, absent, shape=shape)
    argnums = tuple(range(len(primals)))

    def loss(*arrays: Any) -> Any:
        return jnp.sum(jnp.sin(f(*arrays)))

    op = _op(case)
    if op.spec.vjp is None:
        with pytest.raises(TypeError, match=_names(case.name)):
            jax.grad(loss, argnums=argnums)(*primals)
        return
    calls = []
    declared = op.vjp

    def counted(*args: Any) -> Any:
        calls.append(args)
        return declared(*args)

    monkeypatch.setattr(op, "vjp", counted)
    # JAX caches the transposed programs of functions it has differentiated before (an earlier
    # test's): forget them, so that this gradient is transposed, and the vjp run, here.
    jax.clear_caches()
    grads = jax.grad(loss, argnums=argnums)(*primals)
    assert calls, "jax.grad did not run the declared vjp"
    for i, g in enumerate(grads):
        e = np.eye(np.asarray(primals[i]).size).reshape(-1, *np.shape(primals[i]))
        expected = [
            _directional(
                loss, primals, tuple(_cpu(d) if j == i else jnp.zeros_like(p) for j, p in enumerate(primals))
            )
            for d in e
        ]
        _close(g, np.reshape(expected, np.shape(primals[i])), f"jax.grad in argument {i}")
    # The program differentiates nothing of the forward map: the tangent map was transposed into
    # the vjp, and the jvp's math is not in it.
    program = str(jax.make_jaxpr(jax.grad(loss, argnums=argnums))(*primals))
    assert "scale_lib_linearized" not in program, program
    jitted = jax.jit(jax.grad(loss, argnums=argnums))(*primals)
    for g, h in zip(grads, jitted, strict=True):
        np.testing.assert_allclose(np.asarray(h), np.asarray(g), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("case", "absent"), _variants())
def test_reverse_mode_of_a_vmap_matches_a_loop(case, absent, shape: tuple[int, ...]) -> None:
    # jax.grad of a function that maps the op over a batch (the order per-example losses take):
    # the batched linearization is transposed into the declared vjp, mapped over the batch.
    f, _, _ = _problem(case, absent, shape=shape)
    batch = [_problem(case, absent, seed, shape)[1] for seed in (1, 2, 3)]
    n = len(batch[0])
    argnums = tuple(range(n))

    def loss(*arrays: Any) -> Any:
        return jnp.sum(jnp.sin(f(*arrays)))

    for in_axes in {(0,) * n, (0,) + (None,) * (n - 1)}:  # every input batched; only x
        args = tuple(
            jnp.stack([b[i] for b in batch]) if axis == 0 else batch[0][i] for i, axis in enumerate(in_axes)
        )

        def total(*arrays: Any, in_axes: tuple[Any, ...] = in_axes) -> Any:
            return jnp.sum(jax.vmap(loss, in_axes=in_axes)(*arrays))

        if _op(case).spec.vjp is None:
            with pytest.raises(TypeError, match=_names(case.name)):
                jax.grad(total, argnums=argnums)(*args)
            return
        per_example = [
            jax.grad(loss, argnums=argnums)(
                *(args[i][k] if axis == 0 else args[i] for i, axis in enumerate(in_axes))
            )
            for k in range(len(batch))
        ]
        for got in (
            jax.grad(total, argnums=argnums)(*args),
            jax.jit(jax.grad(total, argnums=argnums))(*args),
        ):
            for i, axis in enumerate(in_axes):
                parts = [g[i] for g in per_example]
                expected = np.stack(parts) if axis == 0 else np.sum(parts, axis=0)
                _close(got[i], expected, f"jax.grad of jax.vmap in argument {i}, in_axes {in_axes}")


# ---------------------------------------------------------------------------------------------
# Ops that declare one derivative, or none (what a fork may declare)
# ---------------------------------------------------------------------------------------------
_FACTOR = (Attr("factor", float),)


def _fork_op(**derivatives: Any) -> BoundOp:
    """The scale export declared again, with only the given derivatives."""
    return BoundOp(OpSpec("scale", attrs=_FACTOR, **derivatives))


def _call(op: BoundOp) -> Any:
    return lambda x: _jax.ADAPTER.call(op, (x,), (2.0,), None)


def test_an_op_with_a_vjp_only_refuses_forward_mode_by_name() -> None:
    op = _fork_op(vjp=lambda grad, out, x, factor: (scale_lib.scale(grad, factor),))
    f, x = _call(op), _cpu(np.arange(6.0))
    np.testing.assert_array_equal(np.asarray(jax.grad(lambda v: jnp.sum(f(v) ** 2))(x)), 8 * np.arange(6.0))
    refusal = "scale has no forward-mode derivative"
    with pytest.raises(TypeError, match=refusal):
        jax.jvp(f, (x,), (x,))
    with pytest.raises(TypeError, match=refusal):
        jax.jit(lambda v: jax.jvp(f, (v,), (v,)))(x)
    with pytest.raises(TypeError, match=refusal):
        jax.jacfwd(f)(x)
    _, linear = jax.linearize(f, x)  # the map is made, and refused where it is evaluated
    with pytest.raises(TypeError, match=refusal):
        linear(x)


def test_an_op_with_a_jvp_only_refuses_reverse_mode_by_name() -> None:
    op = _fork_op(jvp=lambda tangents, out, x, factor: scale_lib.scale(tangents[0], factor))
    f, x = _call(op), _cpu(np.arange(6.0))
    np.testing.assert_array_equal(np.asarray(jax.jvp(f, (x,), (x,))[1]), 2 * np.arange(6.0))
    with pytest.raises(TypeError, match="scale has no reverse-mode derivative"):
        jax.grad(lambda v: jnp.sum(f(v)))(x)


def test_an_op_without_derivatives_refuses_both_modes_by_name() -> None:
    f, x = _call(_fork_op()), _cpu(np.arange(6.0))
    for transform in (lambda: jax.grad(lambda v: jnp.sum(f(v)))(x), lambda: jax.jvp(f, (x,), (x,))):
        with pytest.raises(TypeError, match="scale is not differentiable under JAX"):
            transform()
    # A derivative that does not reach it is fine.
    np.testing.assert_array_equal(
        np.asarray(jax.grad(lambda v, w: jnp.sum(f(w) * v))(x, x)), 2 * np.arange(6.0)
    )


def test_linear_ops_differentiate_forward_over_forward() -> None:
    # A linear op's tangent map is the op itself: its derivatives compose to any order.
    linear = [c for c in JITTABLE if _op(c).spec.linear]
    assert linear, "no op is declared linear"
    for case in linear:
        f, primals, tangents = _problem(case, ())

        def directional(*p: Any, f: Any = f, t: Any = tangents) -> Any:
            return jnp.sum(jnp.sin(jax.jvp(f, p, t)[1]))

        _, got = jax.jvp(directional, primals, tangents)
        _close(got, _directional(directional, primals, tangents), f"{case.name}: jvp of jvp")


# ---------------------------------------------------------------------------------------------
# Eager calls (B): the CPU library called directly, nothing compiled per scalar value
# ---------------------------------------------------------------------------------------------
def _attr_values(op: BoundOp, i: int) -> tuple[Any, ...]:
    """Distinct valid values of the op's scalar attributes, the ``i``-th set."""
    values = []
    for attr in op.spec.attrs:
        if attr.type is bool:
            values.append(i % 2 == 0)
        elif attr.type is int:
            values.append(i + int(attr.minimum or 0))
        else:
            values.append(float(attr.minimum or 0) + 1.0 + i * 1e-4)
    return tuple(values)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


WITH_ATTRS = [c for c in JITTABLE if _op(c).spec.attrs]


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc")
@pytest.mark.parametrize("case", WITH_ATTRS, ids=lambda c: c.name)
def test_eager_calls_with_new_scalars_compile_nothing_and_keep_memory_flat(case) -> None:
    op = _op(case)
    cpu = jax.devices("cpu")[0]
    inputs = tuple(jax.device_put(a.astype(np.float32), cpu) for a in case.numpy_inputs(0, (4, 8)).values())
    backend = jax.extend.backend.get_backend("cpu")
    for i in range(200):  # warm up: allocator pools, first-call caches
        op.public_call(inputs, _attr_values(op, i))
    executables, compiled, rss = len(backend.live_executables()), _jax._compiled.cache_info(), _rss_mib()
    for i in range(200, 10_200):
        op.public_call(inputs, _attr_values(op, i))
    gc.collect()
    # A new value costs what a repeated one does: neither compiles, neither keeps anything.
    assert len(backend.live_executables()) <= executables  # others' may have been freed meanwhile
    after = _jax._compiled.cache_info()
    assert (after.hits, after.misses) == (compiled.hits, compiled.misses), "an eager call went through XLA"
    growth = _rss_mib() - rss
    assert growth < 50, f"10^4 eager calls with distinct scalars grew the resident set by {growth:.0f} MiB"


def test_eager_calls_through_xla_keep_a_bounded_number_of_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPU arrays and arrays over several devices go through XLA: one program per scalar value,
    # the least recently used freed. Here the CPU calls are sent that way.
    monkeypatch.setattr(_jax, "call_directly", lambda *args: None)
    x = jax.device_put(np.ones(16, np.float32), jax.devices("cpu")[0])
    backend = jax.extend.backend.get_backend("cpu")
    gc.collect()
    before = len(backend.live_executables())
    for i in range(_jax._COMPILED_KEPT + 16):
        scale_lib.scale(x, 1.0 + i * 1e-3)
    gc.collect()
    assert _jax._compiled.cache_info().currsize <= _jax._COMPILED_KEPT
    assert len(backend.live_executables()) - before <= _jax._COMPILED_KEPT


def _jit_of(case) -> Any:
    return jax.jit(lambda *a: case.call(*a))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", JITTABLE, ids=lambda c: c.name)
def test_eager_calls_equal_compiled_calls_bit_for_bit(case, dtype: str) -> None:
    cpu = jax.devices("cpu")[0]
    data = [np.asarray(a).astype(numpy_dtype(dtype)) for a in case.numpy_inputs(3, (5, 8)).values()]
    for committed in (False, True):
        with jax.default_device(cpu):  # uncommitted arrays on the CPU, where JAX's default is a GPU
            inputs = [jax.device_put(a, cpu) if committed else jnp.asarray(a) for a in data]
            eager, compiled = case.call(*inputs), _jit_of(case)(*inputs)
        assert (eager.shape, eager.dtype) == (compiled.shape, compiled.dtype)
        np.testing.assert_array_equal(np.asarray(eager), np.asarray(compiled))
        # Placed as XLA would place it: committed to x's device only if an input is.
        assert eager.committed == committed and eager.devices() == {cpu}


@pytest.mark.parametrize("case", JITTABLE, ids=lambda c: c.name)
def test_eager_results_are_fresh_buffers_that_outlive_their_inputs(case) -> None:
    with jax.default_device(jax_device_for(case.devices)):
        inputs = [jnp.asarray(a) for a in case.numpy_inputs(4, (5, 8)).values()]
    first, second = case.call(*inputs), case.call(*inputs)
    expected = np.asarray(first).copy()
    pointers = {t.unsafe_buffer_pointer() for t in inputs} | {first.unsafe_buffer_pointer()}
    assert second.unsafe_buffer_pointer() not in pointers
    del inputs, second
    gc.collect()
    np.testing.assert_array_equal(np.asarray(first), expected)
    np.testing.assert_array_equal(np.asarray(first + 0), expected)  # JAX computes with it


def test_a_constant_under_a_transformation_is_staged_not_computed_while_tracing() -> None:
    constant = jnp.arange(4.0)
    program = jax.make_jaxpr(lambda: scale_lib.scale(constant, 2.0))()
    assert "scale_lib.scale" in str(program), program
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda: scale_lib.scale(constant, 2.0))()), 2 * np.arange(4.0)
    )


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise TypeError("batched_device_put() takes other arguments in this release")


@pytest.mark.parametrize("internal", [lambda: None, lambda: _refuse], ids=["missing", "changed"])
def test_eager_results_are_the_same_through_jaxs_public_device_put(
    internal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The output reaches JAX through a function of JAX that is no public API; where it is
    # missing or takes other arguments, jax.device_put does the same.
    x = jax.device_put(np.arange(10.0), jax.devices("cpu")[0])
    fast = scale_lib.scale(x, 3.0)
    monkeypatch.setattr(_jax_eager, "_internal_put", internal)
    _jax_eager._adopt.cache_clear()
    try:
        committed = scale_lib.scale(x, 3.0)
        with jax.default_device(jax.devices("cpu")[0]):
            public = scale_lib.scale(jnp.asarray(np.arange(10.0)), 3.0)
    finally:
        monkeypatch.undo()
        _jax_eager._adopt.cache_clear()
    np.testing.assert_array_equal(np.asarray(public), np.asarray(fast))
    assert not public.committed and committed.committed


def test_every_declared_op_is_covered() -> None:
    public = {spec.name for spec in OPS if spec.public}
    assert {c.name for c in declared_cases()} == public
