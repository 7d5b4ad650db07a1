# SPDX-License-Identifier: Apache-2.0
"""CuPy: arrays go to the library through DLPack, on CuPy's current stream.

CuPy does not publish its current stream to TVM-FFI, so every call is wrapped in
``tvm_ffi.use_raw_stream`` with CuPy's current stream on the array's device. CuPy publishes no
allocator either: scratch memory is allocated here, with CuPy, and passed in.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import tvm_ffi

from ._adapter import Adapter
from ._spec import Shape


class CuPyAdapter(Adapter):
    name = module = "cupy"
    sets_stream = True
    needs_explicit_workspace = True

    def array_type(self) -> type | None:
        cupy = sys.modules.get("cupy")
        return None if cupy is None else cupy.ndarray

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(
                like.shape if shape is None else shape, dtype=like.dtype if dtype is None else dtype
            )

    def invoke(self, x: Any, fn: Callable[..., Any], *args: Any) -> Any:
        cupy = sys.modules["cupy"]
        with x.device:  # CuPy's current stream is per device
            stream = cupy.cuda.get_current_stream().ptr
        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", x.device.id), stream):
            return fn(*args)


ADAPTER = CuPyAdapter()
