"""l2_norm at decode sizes, for benchmarks/bench_overhead.py (the contract:
benchmarks/overhead/scale.py)."""

from __future__ import annotations

from typing import Any

SHAPES = [(1, 4096)]
ATTRS = ()


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    return {"np.linalg.norm": ("own", lambda: np.linalg.norm(i[0]))}


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch

    return {"torch.linalg.vector_norm": ("own", lambda: torch.linalg.vector_norm(i[0]))}


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import jax.numpy as jnp

    return {"jnp.linalg.norm": ("own", lambda: jnp.linalg.norm(i[0]))}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import cupy

    return {"cupy.linalg.norm": ("own", lambda: cupy.linalg.norm(i[0]))}
