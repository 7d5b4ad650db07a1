# SPDX-License-Identifier: Apache-2.0
"""scale_lib: C++/CUDA kernels for every Python array framework, through Apache TVM-FFI.

>>> import numpy as np, scale_lib
>>> scale_lib.scale(np.arange(3, dtype=np.float32), 2.0)
array([0., 2., 4.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

from . import ops
from ._lib import BUILD_INFO, LIB
from ._namespace import array_namespace
from ._nvrtc import NvrtcError
from ._nvrtc import clear_cache as clear_kernel_cache
from .ops import *  # noqa: F403  (every public op: ops/__init__.py registers them, one line each)

__version__ = "0.1.0"

lib = LIB
"""The loaded TVM-FFI module: bare ABI calls with outputs first, e.g. ``lib.scale(out, x, 2.0)``."""


def build_info() -> dict[str, Any]:
    """How the compiled library was built: version, ``cuda`` (bool), CUDA version and archs;
    ``library``, the file loaded (the release wheel holds a CUDA 12 and a CUDA 13 one), and
    ``library_reason``, why that one."""
    return dict(BUILD_INFO)


def cuda_available() -> bool:
    """Whether this build of scale_lib contains the CUDA kernels."""
    return bool(BUILD_INFO["cuda"])


__all__ = [
    "NvrtcError",
    "__version__",
    "array_namespace",
    "build_info",
    "clear_kernel_cache",
    "cuda_available",
    "lib",
    *(spec.name for spec in ops.OPS if spec.public),
]
