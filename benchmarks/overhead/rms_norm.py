"""rms_norm at decode sizes, for benchmarks/bench_overhead.py (the contract:
benchmarks/overhead/scale.py)."""

from __future__ import annotations

from typing import Any

SHAPES = [(1, 4096), (8, 4096)]
ATTRS = (1e-6,)


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    def rms_norm(x: Any, w: Any, eps: float) -> Any:
        return x / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps) * w

    return {"NumPy expression": ("own", lambda: rms_norm(*i, *a))}


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch.nn.functional as F

    return {"F.rms_norm": ("own", lambda: F.rms_norm(i[0], (i[0].shape[-1],), i[1], a[0]))}


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    @jax.jit  # a JAX user writes a composite like this one under jit
    def rms_norm(x: Any, w: Any, eps: float) -> Any:
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)
        return (y * w.astype(jnp.float32)).astype(x.dtype)

    return {"jit(rms_norm expression)": ("own", lambda: rms_norm(*i, *a))}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import cupy

    def rms_norm(x: Any, w: Any, eps: float) -> Any:
        return x / cupy.sqrt(cupy.mean(cupy.square(x), axis=-1, keepdims=True) + eps) * w

    return {"CuPy expression": ("own", lambda: rms_norm(*i, *a))}
