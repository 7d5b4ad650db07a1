"""silu_and_mul at decode sizes, for benchmarks/bench_overhead.py and benchmarks/bench_cpu.py (the
contract: benchmarks/overhead/scale.py). A row of its input holds the two halves of a gate: rows of
8192 give rows of 4096."""

from __future__ import annotations

from typing import Any

SHAPES = [(1, 8192)]
ATTRS = ()
CPU_ROW = 8192  # bench_cpu.py's rows: two halves of its 4096


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    def silu_and_mul(x: Any) -> Any:
        d = x.shape[-1] // 2
        gate, up = x[..., :d], x[..., d:]
        return gate / (1 + np.exp(-gate)) * up

    return {"NumPy expression": ("own", lambda: silu_and_mul(i[0]))}


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch.nn.functional as F

    x = i[0]
    d = x.shape[-1] // 2
    return {"F.silu(a) * b": ("own", lambda: F.silu(x[..., :d]) * x[..., d:])}


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import jax

    @jax.jit  # a JAX user writes a composite like this one under jit
    def silu_and_mul(x: Any) -> Any:
        d = x.shape[-1] // 2
        return jax.nn.silu(x[..., :d]) * x[..., d:]

    return {"jit(silu(a) * b)": ("own", lambda: silu_and_mul(i[0]))}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import cupy

    def silu_and_mul(x: Any) -> Any:
        d = x.shape[-1] // 2
        gate, up = x[..., :d], x[..., d:]
        return gate / (1 + cupy.exp(-gate)) * up

    return {"CuPy expression": ("own", lambda: silu_and_mul(i[0]))}
