"""axpby at decode sizes, for benchmarks/bench_overhead.py (the contract: benchmarks/overhead/scale.py)."""

from __future__ import annotations

from typing import Any

SHAPES = [(1, 4096)]
ATTRS = (0.5, 2.0)


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    (x, y), (alpha, beta), tmp = i, a, np.empty_like(o)

    def with_out() -> Any:
        np.multiply(x, alpha, out=o)
        np.multiply(y, beta, out=tmp)
        return np.add(o, tmp, out=o)

    return {"a*x + b*y": ("own", lambda: alpha * x + beta * y), "3 ufuncs with out=": ("own_out", with_out)}


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch

    return {
        "a*x + b*y": ("own", lambda: a[0] * i[0] + a[1] * i[1]),
        "torch.mul(out=).add_(alpha=)": (
            "own_out",
            lambda: torch.mul(i[0], a[0], out=o).add_(i[1], alpha=a[1]),
        ),
    }


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    return {"a*x + b*y": ("own", lambda: a[0] * i[0] + a[1] * i[1])}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    return {"a*x + b*y": ("own", lambda: a[0] * i[0] + a[1] * i[1])}
