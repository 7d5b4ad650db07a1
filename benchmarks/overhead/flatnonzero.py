"""flatnonzero at decode sizes, for benchmarks/bench_overhead.py (the contract:
benchmarks/overhead/scale.py). Its inputs are half zeros: its output's size depends on the data."""

from __future__ import annotations

from typing import Any

SHAPES = [(1, 4096)]
ATTRS = ()


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    return {"np.flatnonzero": ("own", lambda: np.flatnonzero(i[0]))}


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch

    flat = i[0].view(-1)  # flatnonzero's indices are into the flattened array
    return {"torch.nonzero": ("own", lambda: torch.nonzero(flat))}


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import jax.numpy as jnp

    return {"jnp.flatnonzero": ("own", lambda: jnp.flatnonzero(i[0]))}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import cupy

    return {"cupy.flatnonzero": ("own", lambda: cupy.flatnonzero(i[0]))}
