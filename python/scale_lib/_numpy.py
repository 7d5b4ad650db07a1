# SPDX-License-Identifier: Apache-2.0
"""NumPy: arrays go to the library through DLPack, on the CPU.

NumPy refuses to export read-only arrays and ``ml_dtypes.bfloat16`` arrays through the legacy
DLPack call TVM-FFI makes; those are exported through the versioned protocol instead (which can
mark data read-only, so the library still refuses to write it).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import tvm_ffi

from ._adapter import Adapter, Arrays, Attrs
from ._bound_op import BoundOp
from ._lib import version_key
from ._spec import Shape

# The oldest NumPy this package works with: the floor of pyproject.toml's `numpy` extra, which
# `nox -s tests_lowest` installs. Before NumPy 2.1 there is no versioned DLPack export, which
# read-only and bfloat16 arrays need.
NUMPY_LOWEST = "2.1.3"


def unsupported_version(numpy_version: str) -> str | None:
    """Why scale_lib cannot take arrays of this NumPy (``None``: it can)."""
    if version_key(numpy_version) >= version_key(NUMPY_LOWEST):
        return None
    return (
        f"scale_lib needs numpy>={NUMPY_LOWEST} to take NumPy arrays, but numpy {numpy_version} is "
        "installed: older releases cannot export read-only and bfloat16 arrays through the "
        f"versioned DLPack protocol. Upgrade: pip install 'numpy>={NUMPY_LOWEST}'"
    )


class NumPyAdapter(Adapter):
    name = module = "numpy"
    array_name = "numpy.ndarray"

    def array_type(self) -> type | None:
        numpy = sys.modules.get("numpy")
        return None if numpy is None else numpy.ndarray

    def check_type(self, cls: type, arg_name: str) -> None:
        # Runs on the first array of each type only (the dispatcher remembers the types it took).
        numpy = sys.modules["numpy"]
        problem = unsupported_version(str(numpy.__version__))
        if problem is not None:
            raise RuntimeError(problem)
        # Subclasses whose values are not what their buffer holds (a masked array's mask) would
        # be computed on the raw buffer: refuse them. Memory maps are plain buffers.
        if cls is not numpy.ndarray and not issubclass(cls, numpy.memmap):
            raise TypeError(
                f"{arg_name} is a {cls.__module__}.{cls.__qualname__}, a NumPy array subclass "
                "whose values are not just its buffer; pass a plain numpy.ndarray (e.g. "
                "numpy.asarray, or .filled() for a masked array)"
            )

    def run(
        self, op: BoundOp, inputs: Arrays, attrs: Attrs, out: Any, out_adapter: Adapter | None = None
    ) -> Any:
        if op.cuda_only:  # say what the array is
            op.check_device("cpu", "a NumPy array (NumPy arrays live on the CPU)")
        return Adapter.run(self, op, inputs, attrs, out, out_adapter)

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        numpy = sys.modules["numpy"]
        if shape is None and dtype is None:
            return numpy.empty_like(like, order="C")
        return numpy.empty(
            like.shape if shape is None else shape, dtype=like.dtype if dtype is None else dtype
        )

    # A read-only out is refused by NumPy's own DLPack export, which is what sends the call here:
    # the check costs nothing on the common path.
    def ffi_arg(self, a: Any, arg_name: str) -> Any:
        if arg_name == "out" and not a.flags.writeable:
            raise ValueError(f"{arg_name} is a read-only NumPy array; pass a writable array")
        supported = (a.dtype.kind in "biuc" or (a.dtype.kind == "f" and a.dtype.itemsize <= 8)) or (
            a.dtype.name == "bfloat16"
        )
        if not supported or not a.dtype.isnative:  # longdouble, structured, object, ...
            order = "" if a.dtype.isnative else " in non-native byte order"
            raise TypeError(
                f"{arg_name} has unsupported dtype {a.dtype}{order}; expected one of float16, "
                "bfloat16, float32, float64"
            )
        try:
            return _versioned_tensor(a)
        except BufferError as err:  # NumPy cannot describe it at all (odd strides, say)
            raise ValueError(f"{arg_name} cannot be passed to the library: {err}") from None


ADAPTER = NumPyAdapter()


# ---------------------------------------------------------------------------------------------
# Exporting what NumPy's legacy DLPack export refuses
# ---------------------------------------------------------------------------------------------
class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version_major", ctypes.c_uint32),
        ("version_minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DL_BFLOAT = 4  # DLDataTypeCode kDLBfloat


def _versioned_tensor(a: Any) -> tvm_ffi.Tensor:
    """A zero-copy ``tvm_ffi.Tensor`` of ``a`` through the versioned DLPack protocol, which can
    mark read-only data. bfloat16 is exported as its uint16 bit pattern and relabelled."""
    if a.dtype.kind == "V":  # ml_dtypes.bfloat16
        capsule = a.view("uint16").__dlpack__(max_version=(1, 0))
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        managed.dl_tensor.dtype.code = _DL_BFLOAT
    else:
        capsule = a.__dlpack__(max_version=(1, 0))
    return tvm_ffi.from_dlpack(capsule)
