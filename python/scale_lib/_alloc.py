"""Output allocation: new arrays of the caller's framework on the caller's device.

``empty`` makes an uninitialised contiguous array (an op's output, or a workspace); ``adopt``
hands an array the library allocated itself to the caller's framework without a copy. JAX is
absent from ``empty`` on purpose: XLA allocates JAX outputs (see ``_jax.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from . import _frameworks as fw

Shape = tuple[int, ...]


def _numpy_empty(like: Any, shape: Shape | None, dtype: str | None) -> Any:
    np = sys.modules["numpy"]
    return np.empty(like.shape if shape is None else shape, dtype=like.dtype if dtype is None else dtype)


def _torch_empty(like: Any, shape: Shape | None, dtype: str | None) -> Any:
    torch = sys.modules["torch"]
    return torch.empty(
        like.shape if shape is None else shape,
        dtype=like.dtype if dtype is None else getattr(torch, dtype),
        device=like.device,
    )


def _paddle_empty(like: Any, shape: Shape | None, dtype: str | None) -> Any:
    paddle = sys.modules["paddle"]
    if shape is None and dtype is None:
        return paddle.empty_like(like)
    return paddle.empty(
        list(like.shape if shape is None else shape),
        dtype=like.dtype if dtype is None else dtype,
        device=like.place,
    )


def _cupy_empty(like: Any, shape: Shape | None, dtype: str | None) -> Any:
    cupy = sys.modules["cupy"]
    with like.device:
        return cupy.empty(
            like.shape if shape is None else shape, dtype=like.dtype if dtype is None else dtype
        )


# Keyed by name, not by the Framework objects: those are re-created if a module is reloaded.
_EMPTY: dict[str, Callable[[Any, Shape | None, str | None], Any]] = {
    "numpy": _numpy_empty,
    "torch": _torch_empty,
    "paddle": _paddle_empty,
    "cupy": _cupy_empty,
}


def empty(framework: fw.Framework, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
    """An uninitialised contiguous array on ``like``'s framework and device, with ``like``'s
    shape and dtype unless given (``dtype`` by name, e.g. ``"float64"``)."""
    return _EMPTY[framework.name](like, shape, dtype)


_FROM_DLPACK_MODULE = {
    "numpy": "numpy",
    "torch": "torch",
    "paddle": "paddle",
    "cupy": "cupy",
    "jax": "jax.numpy",
}


# [adopt.begin]
def adopt(framework: fw.Framework, result: Any) -> Any:
    """The library's result as an array of ``framework``, without a copy.

    A result the library allocated through the caller's framework (PyTorch, Paddle) already is
    one. Otherwise it is a ``tvm_ffi.Tensor`` over memory the library allocated: the framework
    takes it over through DLPack, and it is freed by code in the library, which the package
    keeps loaded for the life of the process.
    """
    if framework.name in ("torch", "paddle") and not _is_ffi_tensor(result):
        return result
    return sys.modules[_FROM_DLPACK_MODULE[framework.name]].from_dlpack(result)


# [adopt.end]


def _is_ffi_tensor(result: Any) -> bool:
    import tvm_ffi

    return isinstance(result, tvm_ffi.Tensor)
