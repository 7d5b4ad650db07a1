"""scale_lib ops under ``jax.jit`` over sharded arrays: outputs stay sharded like the inputs,
no ``all-gather`` in the compiled HLO where the op treats the sharded dimension independently,
results equal the unsharded call; ``shard_map``, ``vmap`` and ``grad`` compose.

JAX fixes its device count at start, so the checks run in a child interpreter with 4 host
devices (``--xla_force_host_platform_device_count=4``); each check is one test here. With
``SCALE_LIB_TEST_DIST_BACKEND=nccl`` the child uses the GPUs instead (2 or more).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cases import public_op_names

TIMEOUT_S = 600
ON_GPUS = os.environ.get("SCALE_LIB_TEST_DIST_BACKEND", "gloo") == "nccl"
CHECKS: dict[str, Callable[[], None]] = {}


def check(f: Callable[[], None]) -> Callable[[], None]:
    CHECKS[f.__name__] = f
    return f


# ---------------------------------------------------------------------------------------------
# Checks, run in the child with 4 CPU devices
# ---------------------------------------------------------------------------------------------
def _mesh(names: tuple[str, ...] = ("b",), explicit: bool = False) -> Any:
    """Every device along one axis, or 2 x (the rest) along two."""
    import jax

    n = jax.device_count()
    shape = (n,) if len(names) == 1 else (2, n // 2)
    kind = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(shape))


def _put(x: Any, mesh: Any, *spec: Any) -> Any:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))


def _data(*shape: int, seed: int = 0, dtype: str = "float32") -> Any:
    import jax

    return jax.random.normal(jax.random.PRNGKey(seed), shape).astype(dtype)


def _compiled(f: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """``jax.jit(f)(*args)`` and its compiled HLO text."""
    import jax

    jf = jax.jit(f)
    return jf(*args), jf.lower(*args).compile().as_text()


def _assert_spec(out: Any, mesh: Any, *spec: Any) -> None:
    from jax.sharding import NamedSharding, PartitionSpec

    assert out.sharding.is_equivalent_to(NamedSharding(mesh, PartitionSpec(*spec)), out.ndim), (
        out.sharding,
        spec,
    )


def _close(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    import numpy as np

    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol, atol)


def _no_gather(hlo: str) -> None:
    assert "all-gather" not in hlo, hlo[-4000:]


def _elementwise_case(mesh: Any, spec: tuple[Any, ...]) -> None:
    import scale_lib

    x = _data(8, 12)
    xs = _put(x, mesh, *spec)
    cases = [(lambda a: scale_lib.scale(a, 3.0), (xs,), scale_lib.scale(x, 3.0))]
    # op: axpby
    y = _data(8, 12, seed=1)
    ys = _put(y, mesh, *spec)
    cases.append((lambda a, b: scale_lib.axpby(a, b, 2.0, -0.5), (xs, ys), scale_lib.axpby(x, y, 2.0, -0.5)))
    # /op: axpby
    for f, args, expected in cases:
        out, hlo = _compiled(f, *args)
        _no_gather(hlo)
        assert "all-reduce" not in hlo and "all-to-all" not in hlo
        _assert_spec(out, mesh, *spec)
        _close(out, expected)


@check
def elementwise_batch_sharded() -> None:
    _elementwise_case(_mesh(), ("b", None))


@check
def elementwise_any_dim_sharded() -> None:
    _elementwise_case(_mesh(), (None, "b"))


@check
def elementwise_2d_mesh() -> None:
    _elementwise_case(_mesh(("b", "t")), ("b", "t"))


@check
def elementwise_explicit_mesh() -> None:
    _elementwise_case(_mesh(explicit=True), ("b", None))


# op: rms_norm
@check
def rms_norm_rows_sharded() -> None:
    import scale_lib

    mesh = _mesh(("b", "s"))
    x, w = _data(4, 6, 16), _data(16, seed=1)
    xs = _put(x, mesh, "b", "s", None)
    for f, expected in (
        (lambda a: scale_lib.rms_norm(a, w, 1e-5), scale_lib.rms_norm(x, w, 1e-5)),
        (lambda a: scale_lib.rms_norm(a), scale_lib.rms_norm(x)),
    ):
        out, hlo = _compiled(f, xs)
        _no_gather(hlo)
        _assert_spec(out, mesh, "b", "s", None)
        _close(out, expected)


@check
def rms_norm_gathers_the_normalised_dim() -> None:
    import scale_lib

    mesh = _mesh()
    x, w = _data(4, 16), _data(16, seed=1)
    out, _ = _compiled(lambda a: scale_lib.rms_norm(a, w), _put(x, mesh, None, "b"))
    _close(out, scale_lib.rms_norm(x, w))


@check
def rms_norm_grad() -> None:
    import jax
    import numpy as np

    import scale_lib

    mesh = _mesh()
    x, w, g = _data(8, 16), _data(16, seed=1), _data(8, 16, seed=2)

    def loss(a: Any, b: Any, c: Any) -> Any:
        return (scale_lib.rms_norm(a, b) * c).sum()

    grad = jax.grad(loss, argnums=(0, 1))
    (gx, gw), hlo = _compiled(grad, _put(x, mesh, "b", None), _put(w, mesh), _put(g, mesh, "b", None))
    _no_gather(hlo)
    assert "all-reduce" in hlo  # the weight gradient: one partial sum per device, added
    _assert_spec(gx, mesh, "b", None)
    ex, ew = grad(x, w, g)
    _close(gx, ex, 1e-5, 1e-5)
    _close(gw, ew, 1e-5, 1e-5)
    assert np.all(np.isfinite(np.asarray(gw)))


# /op: rms_norm
@check
def scale_grad() -> None:
    import jax

    import scale_lib

    mesh = _mesh()
    x = _data(8, 12)

    def loss(a: Any) -> Any:
        return (scale_lib.scale(a, 0.5) * a).sum()

    grad, hlo = _compiled(jax.grad(loss), _put(x, mesh, "b", None))
    _no_gather(hlo)
    _assert_spec(grad, mesh, "b", None)
    _close(grad, jax.grad(loss)(x))


# op: axpby
@check
def scale_and_axpby_grad() -> None:
    import jax

    import scale_lib

    mesh = _mesh()
    x, y = _data(8, 12), _data(8, 12, seed=1)

    def loss(a: Any, b: Any) -> Any:
        return (scale_lib.scale(scale_lib.axpby(a, b, 2.0, 3.0), 0.5) * a).sum()

    grad = jax.grad(loss, argnums=(0, 1))
    (gx, gy), hlo = _compiled(grad, _put(x, mesh, "b", None), _put(y, mesh, "b", None))
    _no_gather(hlo)
    _assert_spec(gx, mesh, "b", None)
    _assert_spec(gy, mesh, "b", None)
    ex, ey = grad(x, y)
    _close(gx, ex)
    _close(gy, ey)


# /op: axpby
# op: l2_norm
@check
def l2_norm_partial_norms() -> None:
    import scale_lib

    mesh = _mesh(("b", "t"))
    for dtype in ("float32", "float64"):
        x = _data(8, 12, dtype=dtype)
        out, hlo = _compiled(scale_lib.l2_norm, _put(x, mesh, "b", "t"))
        _no_gather(hlo)
        assert "all-reduce" in hlo
        _close(out, scale_lib.l2_norm(x), 1e-6, 0)


@check
def l2_norm_16_bit() -> None:
    import scale_lib

    mesh = _mesh()
    x = _data(8, 12, dtype="float16")
    out, _ = _compiled(scale_lib.l2_norm, _put(x, mesh, "b", None))
    _close(out, scale_lib.l2_norm(x), 0, 0)  # gathered first: the same bits


# /op: l2_norm
@check
def vmap_keeps_sharding() -> None:
    import jax

    import scale_lib

    mesh = _mesh()
    x = _data(8, 4, 16)
    xs = _put(x, mesh, "b", None, None)
    out, hlo = _compiled(jax.vmap(lambda a: scale_lib.scale(a, 2.0)), xs)
    _no_gather(hlo)
    _assert_spec(out, mesh, "b", None, None)
    _close(out, scale_lib.scale(x, 2.0))
    # op: rms_norm
    w = _data(16, seed=1)
    out, hlo = _compiled(jax.vmap(lambda a: scale_lib.rms_norm(a, w)), xs)
    _no_gather(hlo)
    _assert_spec(out, mesh, "b", None, None)
    _close(out, scale_lib.rms_norm(x, w))
    # Per-example weight gradients, through vmap of grad.
    per_example = jax.vmap(jax.grad(lambda a, b: scale_lib.rms_norm(a, b).sum(), argnums=1), (0, None))
    gws, hlo = _compiled(per_example, xs, w)
    _no_gather(hlo)
    _close(gws, per_example(x, w), 1e-5, 1e-5)
    # /op: rms_norm
    # op: l2_norm
    # One norm per batch element, sharded like the batch.
    norms, hlo = _compiled(jax.vmap(scale_lib.l2_norm), xs)
    _no_gather(hlo)
    _assert_spec(norms, mesh, "b")
    _close(norms, jax.vmap(scale_lib.l2_norm)(x), 1e-6, 0)
    # /op: l2_norm


@check
def shard_map_still_works() -> None:
    import jax
    from jax.sharding import PartitionSpec as P

    import scale_lib

    mesh = _mesh()
    x = _data(8, 16)
    f = jax.shard_map(lambda a: scale_lib.scale(a, 2.0), mesh=mesh, in_specs=P("b"), out_specs=P("b"))
    out, hlo = _compiled(f, _put(x, mesh, "b", None))
    _no_gather(hlo)
    _close(out, scale_lib.scale(x, 2.0))
    # op: rms_norm
    w = _data(16, seed=1)
    f = jax.shard_map(
        lambda a: scale_lib.rms_norm(scale_lib.scale(a, 2.0), w), mesh=mesh, in_specs=P("b"), out_specs=P("b")
    )
    out, hlo = _compiled(f, _put(x, mesh, "b", None))
    _no_gather(hlo)
    _close(out, scale_lib.rms_norm(scale_lib.scale(x, 2.0), w))
    # /op: rms_norm


@check
def eager_call_on_sharded_array() -> None:
    import scale_lib

    mesh = _mesh()
    x = _data(8, 12)
    out = scale_lib.scale(_put(x, mesh, "b", None), 2.0)
    _assert_spec(out, mesh, "b", None)
    _close(out, scale_lib.scale(x, 2.0))


# ---------------------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------------------
# Checks an op declares with its own tests (tests/test_<op>.py: SHARDED_JAX_CHECKS, functions
# using the helpers above), so that they go with the op when a library drops it.
for _op in public_op_names():
    for _f in getattr(importlib.import_module(f"test_{_op}"), "SHARDED_JAX_CHECKS", ()):
        check(_f)


def _main() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    assert jax.device_count() == (2 if ON_GPUS else 4) or (ON_GPUS and jax.device_count() % 2 == 0), (
        jax.devices()
    )
    results = {}
    for name, f in CHECKS.items():
        try:
            f()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the parent, which fails the test
            results[name] = traceback.format_exc()
    Path(sys.argv[1]).write_text(json.dumps(results))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    pytest.importorskip("jax")
    pytest.importorskip("jax_tvm_ffi")
    path = tmp_path_factory.mktemp("jax_dist") / "results.json"
    env = dict(os.environ)
    if ON_GPUS:
        jax = pytest.importorskip("jax")
        if len(jax.devices("gpu") if jax.default_backend() == "gpu" else []) < 2:
            pytest.skip("SCALE_LIB_TEST_DIST_BACKEND=nccl needs 2 GPUs visible to JAX")
        env.setdefault("NCCL_NVLS_ENABLE", "0")
    else:
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
        env["JAX_PLATFORMS"] = "cpu"
    child = subprocess.run(
        [sys.executable, __file__, str(path)], capture_output=True, text=True, env=env, timeout=TIMEOUT_S
    )
    assert child.returncode == 0 and path.exists(), child.stderr[-5000:]
    result: dict[str, str] = json.loads(path.read_text())
    return result


# op: rms_norm, axpby
def test_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("jax_tvm_ffi")
    env = dict(os.environ)
    if not ON_GPUS:
        env["JAX_PLATFORMS"] = "cpu"
    example = Path(__file__).resolve().parent.parent / "examples" / "distributed_jax.py"
    child = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, env=env, timeout=TIMEOUT_S
    )
    assert child.returncode == 0, child.stdout + child.stderr[-3000:]
    assert "collectives in the compiled HLO: none" in child.stdout


# /op: rms_norm, axpby
@pytest.mark.parametrize("name", list(CHECKS))
def test_sharded_jit(results: dict[str, str], name: str) -> None:
    assert results[name] == "ok", results[name]


if __name__ == "__main__":
    _main()
