# SPDX-License-Identifier: Apache-2.0
"""CuPy: arrays go to the library through DLPack, on CuPy's current stream.

CuPy does not publish its current stream to TVM-FFI, so every call is wrapped in
``tvm_ffi.use_raw_stream`` with CuPy's current stream on the array's device. CuPy publishes no
allocator either: scratch memory is allocated here, with CuPy, and passed in.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any

import tvm_ffi

from ._adapter import Adapter, Arrays, Attrs
from ._bound_op import BoundOp
from ._spec import Shape


class CuPyAdapter(Adapter):
    name = module = "cupy"
    array_name = "cupy.ndarray"

    def array_type(self) -> type | None:
        cupy = sys.modules.get("cupy")
        return None if cupy is None else cupy.ndarray

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        cupy = sys.modules["cupy"]
        shape = like.shape if shape is None else shape
        dtype = like.dtype if dtype is None else dtype
        # CuPy allocates on the current device. Entering ``like.device`` costs about a
        # microsecond, more than the allocation: compare device ids first.
        device_id = like.data.device_id
        if cupy.cuda.runtime.getDevice() == device_id:
            return cupy.empty(shape, dtype=dtype)
        with cupy.cuda.Device(device_id):
            return cupy.empty(shape, dtype=dtype)

    def workspace(self, op: BoundOp, x: Any, out: Any) -> Any:
        assert op.workspace_bytes is not None, "only ops with a workspace get here"
        nbytes = op.workspace_bytes(math.prod(x.shape), max(math.prod(out.shape), 1))
        return self.empty(x, (nbytes,), "uint8")

    def run(
        self, op: BoundOp, inputs: Arrays, attrs: Attrs, out: Any, out_adapter: Adapter | None = None
    ) -> Any:
        # The whole eager call on CuPy's current stream of the array's device (it is per device).
        cupy = sys.modules["cupy"]
        device_id = inputs[0].data.device_id
        stream = cupy.cuda.get_current_stream(device_id).ptr
        with tvm_ffi.use_raw_stream(_ffi_device(device_id), stream):
            return Adapter.run(self, op, inputs, attrs, out, out_adapter)


@functools.cache
def _ffi_device(device_id: int) -> Any:
    """TVM-FFI's device object for a CUDA device id (building one parses a string: 1.5 us)."""
    return tvm_ffi.device("cuda", device_id)


ADAPTER = CuPyAdapter()
