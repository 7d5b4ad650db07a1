"""Helpers of the distributed-array suites and of the checks they run.

tests/test_distributed_torch.py runs checks ``f(mesh, device)`` on 2 processes (DTensor on a 1-D
mesh); tests/test_distributed_jax.py runs checks ``f()`` in a child interpreter with 4 host devices.
Their own checks test every declared op by its sharding kind (:func:`sharded_cases`: the ops of
``scale_lib.ops.OPS`` with the example call of their ``CASE`` in tests/test_<op>.py). A test
module adds checks of its own by listing them in ``SHARDED_TORCH_CHECKS`` or
``SHARDED_JAX_CHECKS`` (:func:`added_checks`): an op's own module (tests/test_<op>.py,
tests/test_<op>_distributed.py), so that its checks go with the op when a library drops it.

The frameworks are imported inside the helpers, which run in the suites' child processes.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cases import OpCase, case_of

from scale_lib._bound_op import Sharding
from scale_lib._spec import OpSpec
from scale_lib.ops import OPS

TESTS = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------
# The checks: the suites' own, over the declared ops, and those other test modules add
# ---------------------------------------------------------------------------------------------
class NoOpOfKind(Exception):
    """A check of the sharding kinds no declared op has (a library without such ops): the suites
    report it as skipped, not as passed."""


def cases_of_kind(
    *kinds: str | None, device: str | None = None, jittable: bool = False
) -> list[tuple[OpSpec, OpCase]]:
    """:func:`sharded_cases` (only those that work under ``jax.jit`` with ``jittable``), or
    :class:`NoOpOfKind` when there are none."""
    found = [(s, c) for s, c in sharded_cases(*kinds, device=device) if c.jittable or not jittable]
    if not found:
        raise NoOpOfKind(f"no declared op of sharding kind {' or '.join(map(str, kinds))} here")
    return found


def sharded_cases(*kinds: str | None, device: str | None = None) -> list[tuple[OpSpec, OpCase]]:
    """Every public op whose declared sharding kind is one of ``kinds`` (``None``: no rule),
    with its example call, in declaration order; only those with kernels for ``device``
    ("cpu", "cuda") when given."""
    found = [(spec, case_of(spec.name)) for spec in OPS if spec.public and spec.sharding in kinds]
    return [(spec, case) for spec, case in found if device is None or device in case.devices]


def per_feature(spec: OpSpec) -> dict[str, bool]:
    """For each input of ``spec``, whether it holds one value per feature (a weight: used whole)."""
    return {i.name: pf for i, pf in zip(spec.inputs, Sharding(spec).per_feature, strict=True)}


def added_checks(name: str) -> list[Callable[..., None]]:
    """The checks the test modules list in ``name`` (``SHARDED_TORCH_CHECKS``,
    ``SHARDED_JAX_CHECKS``), module by module in file-name order. Only modules that assign it
    are imported."""
    assigns = re.compile(rf"^{name}\s*=", re.MULTILINE)
    checks = []
    for path in sorted(TESTS.glob("test_*.py")):
        if assigns.search(path.read_text(encoding="utf-8")):
            checks.extend(getattr(importlib.import_module(path.stem), name))
    return checks


# ---------------------------------------------------------------------------------------------
# PyTorch DTensor checks
# ---------------------------------------------------------------------------------------------
def torch_data(*shape: int, dtype: str = "float32", seed: int = 0, device: Any = None) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(getattr(torch, dtype)).to(device)


def no_comm() -> Any:
    """A context that counts the collectives DTensor runs (``get_total_counts()``)."""
    from torch.distributed.tensor.debug import CommDebugMode

    return CommDebugMode()


def assert_full_close(dt: Any, expected: Any, **tol: float) -> None:
    """The whole of DTensor ``dt`` equals ``expected``."""
    import torch

    torch.testing.assert_close(dt.full_tensor(), expected, **tol)


# ---------------------------------------------------------------------------------------------
# JAX checks
# ---------------------------------------------------------------------------------------------
def jax_mesh(names: tuple[str, ...] = ("b",), explicit: bool = False) -> Any:
    """Every device along one axis, or 2 x (the rest) along two."""
    import jax

    n = jax.device_count()
    shape = (n,) if len(names) == 1 else (2, n // 2)
    kind = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(shape))


def put(x: Any, mesh: Any, *spec: Any) -> Any:
    """``x`` sharded over ``mesh`` by the PartitionSpec ``spec`` (none: replicated)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))


def jax_data(*shape: int, seed: int = 0, dtype: str = "float32") -> Any:
    import jax

    return jax.random.normal(jax.random.PRNGKey(seed), shape).astype(dtype)


def compiled(f: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """``jax.jit(f)(*args)`` and its compiled HLO text."""
    import jax

    jf = jax.jit(f)
    return jf(*args), jf.lower(*args).compile().as_text()


def assert_spec(out: Any, mesh: Any, *spec: Any) -> None:
    from jax.sharding import NamedSharding, PartitionSpec

    assert out.sharding.is_equivalent_to(NamedSharding(mesh, PartitionSpec(*spec)), out.ndim), (
        out.sharding,
        spec,
    )


def close(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    import numpy as np

    # equal_nan=False: the expected values come from the same op unsharded, and a NaN on both
    # sides (a gradient gone wrong the same way) must not pass.
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    np.testing.assert_allclose(a, b, rtol, atol, equal_nan=False)


def no_gather(hlo: str) -> None:
    assert "all-gather" not in hlo, hlo[-4000:]


# ---------------------------------------------------------------------------------------------
# Paddle auto-parallel tensors (one-process mesh)
# ---------------------------------------------------------------------------------------------
def paddle_sharded(a: Any, stop_gradient: bool = True) -> tuple[Any, Any]:
    """NumPy ``a`` as a Paddle distributed tensor sharded by rows on a one-process mesh, and the
    mesh. Skips the test where Paddle is not installed."""
    import pytest
    from backends import _module

    paddle = _module("paddle")
    if paddle is None:
        pytest.skip("paddle is not installed")
    dist = paddle.distributed
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    d = dist.shard_tensor(paddle.to_tensor(a), mesh, [dist.Shard(0)])
    d.stop_gradient = stop_gradient  # a leaf that collects its gradient when False
    return d, mesh
