"""softmax at decode sizes, for benchmarks/bench_overhead.py and benchmarks/bench_cpu.py (the
contract: benchmarks/overhead/scale.py): rows of 4096 (a vocabulary slice, attention scores)."""

from __future__ import annotations

from typing import Any

SHAPES = [(1, 4096), (8, 4096)]
ATTRS = ()


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    def softmax(x: Any) -> Any:
        e = np.exp(x - np.max(x, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)

    return {"NumPy expression": ("own", lambda: softmax(i[0]))}


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch

    return {
        "torch.softmax": ("own", lambda: torch.softmax(i[0], -1)),
        "torch.softmax(out=)": ("own_out", lambda: torch._softmax(i[0], -1, False, out=o)),
    }


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import jax

    softmax = jax.jit(lambda x: jax.nn.softmax(x, axis=-1))
    return {"jit(jax.nn.softmax)": ("own", lambda: softmax(i[0]))}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import cupy

    def softmax(x: Any) -> Any:
        e = cupy.exp(x - cupy.max(x, axis=-1, keepdims=True))
        return e / cupy.sum(e, axis=-1, keepdims=True)

    return {"CuPy expression": ("own", lambda: softmax(i[0]))}
