"""JAX: jit, vmap (a batching rule), grad (the declared vjp), and XLA's stream."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from backends import Backend, backend_params
from reference import assert_close, random_data, scale_reference

import scale_lib

jax = pytest.importorskip("jax")
pytest.importorskip("jax_tvm_ffi")
jnp = jax.numpy

JAX_BACKENDS = [p for p in backend_params() if p.values[0].framework == "jax"]


def _x(backend: Backend, *shape, dtype="float32"):
    return backend.asarray(random_data(shape, seed=sum(shape) + 5), dtype)


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_vmap_is_one_batched_call(backend: Backend) -> None:
    x = _x(backend, 6, 5)
    f = jax.vmap(lambda v: scale_lib.scale(v, 2.0))
    assert_close(np.asarray(f(x), np.float64), scale_reference(np.asarray(x, np.float64), 2.0), "float32")
    # A batching rule, not a loop: the lowered program calls the target once, with no loop.
    hlo = jax.jit(f).lower(x).as_text()
    assert hlo.count("@scale_lib.scale") == 1 and "while" not in hlo, hlo


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_nested_vmap_and_jit(backend: Backend) -> None:
    x = _x(backend, 2, 3, 4)
    f = jax.jit(jax.vmap(jax.vmap(lambda v: scale_lib.scale(v, -0.5))))
    assert_close(np.asarray(f(x), np.float64), scale_reference(np.asarray(x, np.float64), -0.5), "float32")


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_eager_calls_keep_each_attribute_value(backend: Backend) -> None:
    # Eager calls reuse compiled programs keyed by the attributes: 0.0 and -0.0 compare equal as
    # floats, but each must give its own signed zeros, in either order.
    x = _x(backend, 8)
    positive = np.abs(np.asarray(x)) + 1
    x = backend.asarray(positive, "float32")
    for factor in (0.0, -0.0, 0.0):
        got = np.asarray(scale_lib.scale(x, factor))
        assert np.array_equal(np.signbit(got), np.full(8, np.signbit(factor))), (factor, got)


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_grad(backend: Backend) -> None:
    x = _x(backend, 10, dtype="float64")
    loss = lambda v: (scale_lib.scale(v, 3.0) ** 2).sum()  # noqa: E731
    expected = 2 * 9.0 * np.asarray(x)
    for g in (jax.grad(loss), jax.jit(jax.grad(loss))):
        np.testing.assert_allclose(np.asarray(g(x)), expected, rtol=1e-12)
    per_row = jax.vmap(jax.grad(lambda v: scale_lib.scale(v, 2.0).sum()))(_x(backend, 3, 4))
    np.testing.assert_array_equal(np.asarray(per_row), np.full((3, 4), 2.0, np.float32))


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_value_and_grad_matches_jnp(backend: Backend) -> None:
    x = _x(backend, 7, dtype="float64")

    def ours(v):
        return jnp.sin(scale_lib.scale(v, 1.3)).sum()

    def reference(v):
        return jnp.sin(v * 1.3).sum()

    (v1, g1), (v2, g2) = jax.value_and_grad(ours)(x), jax.value_and_grad(reference)(x)
    np.testing.assert_allclose(float(v1), float(v2), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g1), np.asarray(g2), rtol=1e-12)


@pytest.mark.gpu
def test_runs_on_xlas_stream() -> None:
    backend = Backend("jax", "cuda")
    backend.skip_if_unavailable()
    # A long matmul feeds the op inside one jitted program; if the kernel ran on any stream but
    # XLA's, it would read the matmul's output before it is written.
    a = _x(backend, 4096, 4096)

    @jax.jit
    def f(m):
        p = m @ m
        return p, scale_lib.scale(p, 2.0)

    for _ in range(3):
        p, y = f(a)
        np.testing.assert_array_equal(np.asarray(y), 2 * np.asarray(p))


@pytest.mark.gpu
def test_cuda_graph_capture_under_xla() -> None:
    backend = Backend("jax", "cuda")
    backend.skip_if_unavailable()
    # scale is registered CUDA-graph safe, so XLA may put it in a command buffer (CUDA graph).
    # Flags must be set before JAX starts: run in a fresh interpreter.
    code = textwrap.dedent(
        """
        import numpy as np, jax, jax.numpy as jnp, scale_lib
        f = jax.jit(lambda v: scale_lib.scale(jnp.sin(v), 3.0) + 1)
        for seed in range(5):
            x = jax.random.normal(jax.random.PRNGKey(seed), (1 << 16,))
            np.testing.assert_allclose(np.asarray(f(x)), 3 * np.sin(np.asarray(x)) + 1, rtol=1e-5, atol=1e-6)
        print("ok")
        """
    )
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "")
        + " --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert child.returncode == 0 and "ok" in child.stdout, child.stderr[-3000:]


def test_cuda_only_op_is_refused_when_lowered_for_the_cpu() -> None:
    # Under jax.jit the platform is known only when XLA lowers the program (a committed CPU array
    # on a GPU machine, jax.export for another platform): a CUDA-only op's CPU refusal is made
    # there, as the library's ValueError, and lowering for CUDA is untouched. The scale export,
    # declared CUDA-only, stands in for a fork's CUDA-only op.
    from scale_lib import _jax
    from scale_lib._bound_op import BoundOp
    from scale_lib._spec import Attr, OpSpec

    op = BoundOp(OpSpec("scale", attrs=(Attr("factor", float),), devices=("cuda",)))

    def f(x):
        return _jax.ADAPTER.call(op, (x,), (2.0,), None)

    arg = jax.ShapeDtypeStruct((4, 8), jnp.float32)
    with pytest.raises(ValueError, match="placed on the CPU, but scale has only a CUDA implementation"):
        jax.export.export(jax.jit(f), platforms=["cpu"])(arg)
    batched = jax.ShapeDtypeStruct((2, 4, 8), jnp.float32)
    with pytest.raises(ValueError, match="placed on the CPU"):
        jax.export.export(jax.jit(jax.vmap(f)), platforms=["cpu"])(batched)
    unchecked = [jax.export.DisabledSafetyCheck.custom_call("scale_lib.scale")]
    text = jax.export.export(jax.jit(f), platforms=["cuda"], disabled_checks=unchecked)(arg).mlir_module()
    assert "scale_lib.scale" in text
    with pytest.raises(ValueError, match="JAX array on the CPU, but scale has only a CUDA implementation"):
        f(jax.device_put(jnp.ones((4, 8), jnp.float32), jax.devices("cpu")[0]))
