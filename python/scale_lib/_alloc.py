"""Output allocation: a new, contiguous array of the caller's framework, device, dtype, shape.

JAX is absent on purpose: XLA allocates JAX outputs (see ``_jax.py``).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from . import _frameworks as fw


def _numpy_empty(x: Any) -> Any:
    return sys.modules["numpy"].empty(x.shape, dtype=x.dtype)


def _torch_empty(x: Any) -> Any:
    return sys.modules["torch"].empty(x.shape, dtype=x.dtype, device=x.device)


def _paddle_empty(x: Any) -> Any:
    return sys.modules["paddle"].empty_like(x)


def _cupy_empty(x: Any) -> Any:
    cupy = sys.modules["cupy"]
    with x.device:
        return cupy.empty(x.shape, dtype=x.dtype)


_EMPTY: dict[fw.Framework, Callable[[Any], Any]] = {
    fw.NUMPY: _numpy_empty,
    fw.TORCH: _torch_empty,
    fw.PADDLE: _paddle_empty,
    fw.CUPY: _cupy_empty,
}


def empty_like(framework: fw.Framework, x: Any) -> Any:
    """An uninitialised contiguous array like ``x`` (same framework, device, dtype, shape)."""
    return _EMPTY[framework](x)
