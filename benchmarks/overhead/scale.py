"""scale at decode sizes, for benchmarks/bench_overhead.py: the shapes and attributes it runs, and
each framework's own way to compute it (``own_<framework>(inputs, attrs, out)`` -> {label: (role,
fn)}, role "own" for an allocating call, "own_out" for one into ``out``, an array like the result).
benchmarks/bench_cpu.py reads the same file: ATTRS, and the "own" calls of own_torch and
own_numpy, on rows of 4096 elements (an op's ``CPU_ROW`` where its rows are longer)."""

from __future__ import annotations

from typing import Any

SHAPES = [(16,)]
ATTRS = (2.0,)
DTYPE = "float32"  # the other ops run in each framework's decode dtype


def own_numpy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import numpy as np

    return {
        "x * f": ("own", lambda: i[0] * a[0]),
        "np.multiply(out=)": ("own_out", lambda: np.multiply(i[0], a[0], out=o)),
    }


def own_torch(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import torch

    return {
        "x * f": ("own", lambda: i[0] * a[0]),
        "torch.mul(out=)": ("own_out", lambda: torch.mul(i[0], a[0], out=o)),
    }


def own_jax(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    return {"x * f": ("own", lambda: i[0] * a[0])}


def own_cupy(i: tuple[Any, ...], a: tuple[Any, ...], o: Any) -> dict[str, Any]:
    import cupy

    return {
        "x * f": ("own", lambda: i[0] * a[0]),
        "cupy.multiply(out=)": ("own_out", lambda: cupy.multiply(i[0], a[0], out=o)),
    }
