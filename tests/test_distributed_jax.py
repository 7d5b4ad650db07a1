"""scale_lib ops under ``jax.jit`` over sharded arrays: outputs stay sharded like the inputs,
no ``all-gather`` in the compiled HLO where the op treats the sharded dimension independently,
results equal the unsharded call; ``shard_map``, ``vmap`` and ``grad`` compose.

Every declared op is checked by its sharding kind (its ``CASE``'s call, tests/cases.py); the
checks test modules add (``SHARDED_JAX_CHECKS``, see tests/distributed_helpers.py) run too.
JAX fixes its device count at start, so the checks run in a child interpreter with 4 host
devices (``--xla_force_host_platform_device_count=4``); each check is one test here. With
``SCALE_LIB_TEST_DIST_BACKEND=nccl`` the child uses the GPUs instead (2 or more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cases import OpCase
from distributed_helpers import (
    NoOpOfKind,
    added_checks,
    assert_spec,
    cases_of_kind,
    close,
    compiled,
    jax_data,
    jax_mesh,
    no_gather,
    per_feature,
    put,
)

import scale_lib
from scale_lib._spec import OpSpec

# The names under which test modules that list checks import these helpers from this module.
_assert_spec, _close, _compiled, _data = assert_spec, close, compiled, jax_data
_mesh, _no_gather, _put = jax_mesh, no_gather, put

TIMEOUT_S = 600
ON_GPUS = os.environ.get("SCALE_LIB_TEST_DIST_BACKEND", "gloo") == "nccl"
CHECKS: dict[str, Callable[[], None]] = {}


def check(f: Callable[[], None]) -> Callable[[], None]:
    assert f.__name__ not in CHECKS, f"two checks named {f.__name__}"
    CHECKS[f.__name__] = f
    return f


# ---------------------------------------------------------------------------------------------
# Checks, run in the child with 4 CPU devices
# ---------------------------------------------------------------------------------------------
def _ops(*kinds: str) -> list[tuple[OpSpec, OpCase]]:
    """The jittable public ops of the sharding ``kinds`` that have kernels on the mesh's devices."""
    import jax

    platform = "cuda" if jax.devices()[0].platform == "gpu" else "cpu"
    return cases_of_kind(*kinds, device=platform, jittable=True)


def _arrays(case: OpCase, shape: tuple[int, ...], seed: int = 0, dtype: str = "float32") -> dict[str, Any]:
    """Random data for every array argument of ``case`` when ``x`` has ``shape``."""
    return {
        name: jax_data(*s, seed=seed + i, dtype=dtype)
        for i, (name, s) in enumerate(case.shapes(shape).items())
    }


def _placed(spec: OpSpec, arrays: dict[str, Any], mesh: Any, *pspec: Any) -> list[Any]:
    """``arrays`` sharded by ``pspec``, per-feature inputs replicated."""
    whole = per_feature(spec)
    return [put(a, mesh) if whole[n] else put(a, mesh, *pspec) for n, a in arrays.items()]


def _elementwise_case(mesh: Any, spec_: tuple[Any, ...]) -> None:
    for spec, case in _ops("elementwise"):
        arrays = _arrays(case, (8, 12))
        out, hlo = compiled(case.call, *_placed(spec, arrays, mesh, *spec_))
        no_gather(hlo)
        assert "all-reduce" not in hlo and "all-to-all" not in hlo, spec.name
        assert_spec(out, mesh, *spec_)
        close(out, case.call(*arrays.values()))


@check
def elementwise_batch_sharded() -> None:
    _elementwise_case(jax_mesh(), ("b", None))


@check
def elementwise_any_dim_sharded() -> None:
    _elementwise_case(jax_mesh(), (None, "b"))


@check
def elementwise_2d_mesh() -> None:
    _elementwise_case(jax_mesh(("b", "t")), ("b", "t"))


@check
def elementwise_explicit_mesh() -> None:
    _elementwise_case(jax_mesh(explicit=True), ("b", None))


@check
def rows_sharded() -> None:
    # Every leading dimension sharded; with and without each optional input.
    mesh = jax_mesh(("b", "s"))
    for spec, case in _ops("rows"):
        arrays = _arrays(case, (4, 6, 16))
        for absent in (None, *case.optional):
            kept = {n: a for n, a in arrays.items() if n != absent}

            def f(*args: Any, kept: dict[str, Any] = kept, case: OpCase = case) -> Any:
                given = dict(zip(kept, args, strict=True))
                return case.call(*(given.get(n) for n in case.arrays))

            out, hlo = compiled(f, *_placed(spec, kept, mesh, "b", "s", None))
            no_gather(hlo)
            assert_spec(out, mesh, "b", "s", None)
            close(out, f(*kept.values()))


@check
def rows_gather_the_last_dim() -> None:
    mesh = jax_mesh()
    for spec, case in _ops("rows"):
        arrays = _arrays(case, (4, 16))
        out, _ = compiled(case.call, *_placed(spec, arrays, mesh, None, "b"))
        close(out, case.call(*arrays.values()))


def _grad_case(
    spec: OpSpec, case: OpCase, shape: tuple[int, ...], mesh: Any
) -> tuple[list[Any], str, list[Any]]:
    """The gradients of ``sum(op(*args) * c)`` for every array argument, under jax.jit with the
    rows (dimension 0) sharded, its compiled HLO, and the gradients of the unsharded call."""
    import jax

    arrays = list(_arrays(case, shape).values())
    c = jax_data(*case.call(*arrays).shape, seed=9)

    def loss(*args: Any) -> Any:
        return (case.call(*args[:-1]) * args[-1]).sum()

    grad = jax.grad(loss, argnums=tuple(range(len(arrays))))
    placed = [
        *_placed(spec, dict(zip(case.arrays, arrays, strict=True)), mesh, "b", None),
        put(c, mesh, "b", None),
    ]
    grads, hlo = compiled(grad, *placed)
    no_gather(hlo)
    return list(grads), hlo, list(grad(*arrays, c))


@check
def rows_grad() -> None:
    mesh = jax_mesh()
    for spec, case in _ops("rows"):
        if spec.vjp is None:
            continue
        grads, hlo, expected = _grad_case(spec, case, (8, 16), mesh)
        whole = per_feature(spec)
        if any(whole.values()):
            assert "all-reduce" in hlo, spec.name  # a weight's gradient: one partial sum per device, added
        for name, g, e in zip(case.arrays, grads, expected, strict=True):
            if not whole[name]:
                assert_spec(g, mesh, "b", None)
            close(g, e, 1e-5, 1e-5)


@check
def elementwise_grad() -> None:
    mesh = jax_mesh()
    for spec, case in _ops("elementwise"):
        if spec.vjp is None:
            continue
        grads, _, expected = _grad_case(spec, case, (8, 12), mesh)
        for g, e in zip(grads, expected, strict=True):
            assert_spec(g, mesh, "b", None)
            close(g, e)


@check
def reduction_partial_norms() -> None:
    mesh = jax_mesh(("b", "t"))
    for spec, case in _ops("reduction"):
        for dtype in ("float32", "float64"):
            x = jax_data(8, 12, dtype=dtype)
            out, hlo = compiled(case.call, put(x, mesh, "b", "t"))
            no_gather(hlo)
            assert "all-reduce" in hlo, spec.name
            close(out, case.call(x), 1e-6, 0)


@check
def reduction_16_bit() -> None:
    mesh = jax_mesh()
    for spec, case in _ops("reduction"):
        if "float16" in spec.dtypes:
            x = jax_data(8, 12, dtype="float16")
            out, _ = compiled(case.call, put(x, mesh, "b", None))
            close(out, case.call(x), 0, 0)  # gathered first: the same bits


@check
def vmap_keeps_sharding() -> None:
    # A batch dimension added by jax.vmap, sharded like any other leading dimension; per-feature
    # inputs unbatched. The output is sharded along the batch (one value per batch element for a
    # reduction).
    import jax

    mesh = jax_mesh()
    for spec, case in _ops("elementwise", "rows", "reduction"):
        whole = per_feature(spec)
        arrays = _arrays(case, (8, 4, 16))
        axes = tuple(None if whole[n] else 0 for n in case.arrays)
        args = list(arrays.values())
        placed = [
            put(a, mesh) if whole[n] else put(a, mesh, "b") for n, a in zip(case.arrays, args, strict=True)
        ]
        f = jax.vmap(case.call, in_axes=axes)
        out, hlo = compiled(f, *placed)
        no_gather(hlo)
        assert_spec(out, mesh, "b", *(None,) * (out.ndim - 1))
        close(out, f(*args), 1e-6, 1e-7)
        # Per-example gradients of the per-feature inputs, through vmap of grad.
        if spec.vjp is not None and any(whole.values()):
            wrt = tuple(i for i, n in enumerate(case.arrays) if whole[n])
            per_example = jax.vmap(jax.grad(lambda *a, c=case: c.call(*a).sum(), argnums=wrt), in_axes=axes)
            gs, hlo = compiled(per_example, *placed)
            no_gather(hlo)
            for g, e in zip(gs, per_example(*args), strict=True):
                close(g, e, 1e-5, 1e-5)


@check
def shard_map_still_works() -> None:
    # Inside shard_map an op is called directly on each device's rows (per-feature inputs whole),
    # alone and chained with another op.
    import jax
    from jax.sharding import PartitionSpec as P

    mesh = jax_mesh()
    for spec, case in _ops("elementwise", "rows"):
        whole = per_feature(spec)
        arrays = _arrays(case, (8, 16))
        specs = tuple(P() if whole[n] else P("b") for n in case.arrays)

        def chained(*args: Any, case: OpCase = case) -> Any:
            return scale_lib.scale(case.call(*args), 2.0)

        for body in (case.call, chained):
            f = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P("b"))
            out, hlo = compiled(f, *_placed(spec, arrays, mesh, "b", None))
            no_gather(hlo)
            close(out, body(*arrays.values()))


@check
def eager_call_on_sharded_array() -> None:
    mesh = jax_mesh()
    x = jax_data(8, 12)
    out = scale_lib.scale(put(x, mesh, "b", None), 2.0)
    assert_spec(out, mesh, "b", None)
    close(out, scale_lib.scale(x, 2.0))


# ---------------------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------------------
for _f in added_checks("SHARDED_JAX_CHECKS"):
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
        except NoOpOfKind as reason:
            results[name] = f"skip: {reason}"
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


@pytest.mark.parametrize("name", list(CHECKS))
def test_sharded_jit(results: dict[str, str], name: str) -> None:
    if results[name].startswith("skip: "):
        pytest.skip(results[name].removeprefix("skip: "))
    assert results[name] == "ok", results[name]


if __name__ == "__main__":
    _main()
