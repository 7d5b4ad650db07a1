"""cumsum at decode sizes, for benchmarks/bench_overhead.py and benchmarks/bench_cpu.py (the
contract: benchmarks/overhead/scale.py): a running sum along rows of 4096."""

from __future__ import annotations

from typing import Any

SHAPES = [(1, 4096), (8, 4096)]
ATTRS = (False,)  # reverse


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    return {
        "np.cumsum": ("own", lambda: np.cumsum(i[0], axis=-1)),
        "np.cumsum(out=)": ("own_out", lambda: np.cumsum(i[0], axis=-1, out=o)),
    }


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch

    return {
        "torch.cumsum": ("own", lambda: torch.cumsum(i[0], -1)),
        "torch.cumsum(out=)": ("own_out", lambda: torch.cumsum(i[0], -1, out=o)),
    }


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    cumsum = jax.jit(lambda x: jnp.cumsum(x, axis=-1))
    return {"jit(jnp.cumsum)": ("own", lambda: cumsum(i[0]))}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import cupy

    return {
        "cupy.cumsum": ("own", lambda: cupy.cumsum(i[0], axis=-1)),
        "cupy.cumsum(out=)": ("own_out", lambda: cupy.cumsum(i[0], axis=-1, out=o)),
    }
