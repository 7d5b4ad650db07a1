"""Which array library an argument comes from, and how to hand it to TVM-FFI.

Every supported array type goes to the library through DLPack. Some need help:

- NumPy refuses to export read-only arrays and ``ml_dtypes.bfloat16`` arrays through the
  legacy DLPack call TVM-FFI makes; they are exported through the versioned protocol instead.
- CuPy does not publish its current stream to TVM-FFI, so calls are wrapped in
  ``tvm_ffi.use_raw_stream`` with CuPy's current stream on the array's device.
- JAX arrays are immutable and must go through XLA (see ``_jax.py``), never straight to the
  library.
- PyTorch and Paddle calls that autograd or a compiler must see go through the framework's own
  op machinery (``_torch.py``, ``_paddle.py``); plain eager calls go straight to the library.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tvm_ffi

from . import _paddle, _torch

if TYPE_CHECKING:
    from ._op import Op


class Framework:
    """One array library: its name and how its arrays are passed to an exported function."""

    name = "unknown"
    is_jax = False
    has_framework_ops = False  # whether wants_framework_op can ever be true
    sets_stream = False  # whether calls must go through invoke()
    # Whether CUDA scratch memory must be passed in: the framework publishes no allocator that
    # the library could take it from.
    needs_explicit_workspace = False

    def check_writable(self, out: Any, arg_name: str) -> None:
        """Raise if ``out`` must never be written (checked when ``out`` is not of ``x``'s type)."""

    def ffi_arg(self, a: Any, arg_name: str) -> Any:
        """``a`` in a form TVM-FFI accepts, for when passing ``a`` itself raised BufferError."""
        return a

    def invoke(self, x: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the exported function ``fn`` on the stream of ``x``'s device (when
        ``sets_stream``; otherwise TVM-FFI already knows the framework's stream)."""
        return fn(*args)

    def wants_framework_op(self, x: Any) -> bool:
        """Whether this call must go through the framework's own op (autograd, compilation)."""
        return False

    def call_framework_op(self, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        raise NotImplementedError


class _NumPy(Framework):
    name = "numpy"

    # A read-only out is refused by NumPy's own DLPack export, which is what sends the call to
    # ffi_arg: the check costs nothing on the common path.
    def ffi_arg(self, a: Any, arg_name: str) -> Any:
        if arg_name == "out" and not a.flags.writeable:
            raise ValueError(f"{arg_name} is a read-only NumPy array; pass a writable array")
        if a.dtype.kind not in "biufc" and a.dtype.name != "bfloat16":
            raise TypeError(
                f"{arg_name} has unsupported dtype {a.dtype}; expected one of float16, bfloat16, "
                "float32, float64"
            )
        return _numpy_versioned_tensor(a)


class _Torch(Framework):
    name = "torch"
    has_framework_ops = True
    wants_framework_op = staticmethod(_torch.wants_custom_op)

    def call_framework_op(self, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        return _torch.call(op, inputs, attrs, out)


class _Paddle(Framework):
    name = "paddle"
    has_framework_ops = True
    wants_framework_op = staticmethod(_paddle.needs_autograd)

    def call_framework_op(self, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        return _paddle.call(op, inputs, attrs, out)


class _CuPy(Framework):
    name = "cupy"
    sets_stream = True
    needs_explicit_workspace = True

    def invoke(self, x: Any, fn: Callable[..., Any], *args: Any) -> Any:
        import cupy

        with x.device:  # CuPy's current stream is per device
            stream = cupy.cuda.get_current_stream().ptr
        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", x.device.id), stream):
            return fn(*args)


class _Jax(Framework):
    name = "jax"
    is_jax = True

    def check_writable(self, out: Any, arg_name: str) -> None:
        raise TypeError(
            f"{arg_name} is a JAX array; JAX arrays are immutable and cannot be written. "
            "Omit out= and use the returned array"
        )


NUMPY, TORCH, PADDLE, CUPY, JAX = _NumPy(), _Torch(), _Paddle(), _CuPy(), _Jax()

SUPPORTED_TYPES = "numpy.ndarray, torch.Tensor, jax.Array, paddle.Tensor or cupy.ndarray"

# type(obj) -> Framework, filled on first sight of each type.
_BY_TYPE: dict[type, Framework] = {}


def framework_of(obj: Any, arg_name: str) -> Framework:
    """The framework of array ``obj``; ``TypeError`` naming ``arg_name`` if it is not an array."""
    try:
        return _BY_TYPE[type(obj)]
    except KeyError:
        pass
    fw = _classify(obj)
    if fw is None:
        cls = type(obj)
        name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        raise TypeError(f"{arg_name} must be an array ({SUPPORTED_TYPES}); got {name}")
    _BY_TYPE[type(obj)] = fw
    return fw


def _classify(obj: Any) -> Framework | None:
    # An array of a library implies the library is imported: look only at sys.modules, so
    # classifying never imports a framework.
    modules = sys.modules
    if "numpy" in modules and isinstance(obj, modules["numpy"].ndarray):
        return NUMPY
    if "torch" in modules and isinstance(obj, modules["torch"].Tensor):
        return TORCH
    if "jax" in modules and isinstance(obj, modules["jax"].Array):
        return JAX
    if "paddle" in modules and isinstance(obj, modules["paddle"].Tensor):
        return PADDLE
    if "cupy" in modules and isinstance(obj, modules["cupy"].ndarray):
        return CUPY
    return None


# ---------------------------------------------------------------------------------------------
# NumPy arrays NumPy's legacy DLPack export refuses
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


def _numpy_versioned_tensor(a: Any) -> tvm_ffi.Tensor:
    """A zero-copy ``tvm_ffi.Tensor`` of ``a`` through the versioned DLPack protocol, which can
    mark read-only data. bfloat16 is exported as its uint16 bit pattern and relabelled."""
    if a.dtype.kind == "V":  # ml_dtypes.bfloat16
        capsule = a.view("uint16").__dlpack__(max_version=(1, 0))
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        managed.dl_tensor.dtype.code = _DL_BFLOAT
    else:
        capsule = a.__dlpack__(max_version=(1, 0))
    return tvm_ffi.from_dlpack(capsule)
