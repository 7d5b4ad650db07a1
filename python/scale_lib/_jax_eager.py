# SPDX-License-Identifier: Apache-2.0
"""Eager JAX calls on the CPU: the library called directly, without XLA.

Through XLA every value of a scalar attribute is a program of its own (XLA FFI attributes are
part of the compiled call), so eager calls with ever new values (a learning rate, a schedule's
``eps``) would compile and keep one executable each. On the CPU an eager call needs none of
XLA: the inputs go to the library through DLPack (read only; JAX's export waits until they are
computed), the output is host memory allocated here, aligned as XLA's CPU client needs to adopt
it without a copy, and it becomes a JAX array only after the library has written it, so no JAX
array is ever written. Nothing is compiled and nothing is kept, whatever the values.

Only where that gives what XLA would: no JAX transformation active (a closed-over constant under
``jax.jit`` is staged, as every other op on it is), every input concrete and on one CPU device,
the same for all, and an output dtype JAX represents as declared (``float64`` without x64 mode
is not). Everything else returns ``None`` and runs through XLA. GPU arrays always do: XLA's
stream is not exposed, so a kernel launched from here could not be ordered after the work that
produces its inputs or before the work that reads its output.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from ._bound_op import BoundOp

# XLA's CPU client adopts host memory without a copy only at this alignment; NumPy's allocations
# have 16 bytes.
_ALIGNMENT = 64


def call_directly(op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
    """``op`` on concrete CPU JAX arrays, called directly; ``None`` where XLA must run it. The
    library checks the inputs itself, as for NumPy arrays; where it refuses them with an error
    of its own kind, the declared rules word it (``BoundOp.check_abstract``)."""
    x = inputs[0]
    if op.cuda_only or isinstance(x, _jax().core.Tracer):
        return None
    sharding = x.sharding
    if type(sharding) is not _single_device() or not _top_level()():
        return None
    committed = x.committed
    for t in inputs[1:]:
        if t is not None:
            if type(t) is not type(x) or t.sharding != sharding:
                return None
            committed = committed or t.committed
    devices = list(sharding.device_set)
    if devices[0].platform != "cpu":
        return None
    dtype = x.dtype
    if dtype.name not in op.spec.dtypes:  # refused with the declared rules' words, below
        return None
    numpy = sys.modules["numpy"]
    if op.spec.output.dtype is not None:
        dtype = numpy.dtype(op.spec.output.dtype)
        if _jax().dtypes.canonicalize_dtype(dtype) != dtype:  # float64 without x64 mode
            return None
    out = _aligned_empty(numpy, op.output_shape(inputs), dtype)
    try:
        op.fn(_versioned(out) if dtype.kind == "V" else out, *inputs, *attrs)
    except RuntimeError:
        op.check_abstract(inputs)
        raise
    return _adopt()(out, sharding, devices, committed)


def _jax() -> Any:
    return sys.modules["jax"]


@functools.cache
def _single_device() -> Any:
    return _jax().sharding.SingleDeviceSharding


@functools.cache
def _top_level() -> Callable[[], bool]:
    """Whether no JAX transformation is active. JAX has no public test for it; where its
    private one is missing every call goes through XLA, which is always right."""
    try:
        from jax._src.core import trace_state_clean
    except ImportError:
        return lambda: False
    return trace_state_clean


def _aligned_empty(numpy: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    raw = numpy.empty(nbytes + _ALIGNMENT, numpy.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _versioned(out: Any) -> Any:
    # NumPy exports bfloat16 only through the versioned DLPack protocol.
    from ._numpy import _versioned_tensor

    return _versioned_tensor(out)


@functools.cache
def _adopt() -> Callable[[Any, Any, list[Any], bool], Any]:
    """``adopt(host_array, sharding, devices, committed)``: the written NumPy array as a JAX
    array on ``sharding``'s CPU device, without a copy. JAX's public ``jax.device_put`` does it
    in about 25 us, most of a call; the function it ends in takes a few. Where that function is
    missing, or refuses these arguments, ``jax.device_put``."""
    jax = _jax()

    def public(a: Any, sharding: Any, devices: list[Any], committed: bool) -> Any:
        if committed:
            return jax.device_put(a, sharding)
        with jax.default_device(devices[0]):  # uncommitted, where the inputs are
            return jax.device_put(a)

    put = _internal_put()
    if put is None:
        return public
    aval = functools.lru_cache(maxsize=256)(jax.core.ShapedArray)

    def direct(a: Any, sharding: Any, devices: list[Any], committed: bool) -> Any:
        return put(aval(a.shape, a.dtype), sharding, [a], devices, committed)

    try:  # its arguments are no public API: check them once
        import numpy

        probe = _aligned_empty(numpy, (3,), numpy.dtype("float32"))
        probe[:] = (0, 1, 2)
        cpu = jax.devices("cpu")[0]
        got = direct(probe, _single_device()(cpu), [cpu], False)
        if not isinstance(got, jax.Array) or got.committed or numpy.asarray(got).tolist() != [0, 1, 2]:
            return public
    except Exception:  # noqa: BLE001 - any refusal means: use the public function
        return public
    return direct


def _internal_put() -> Callable[..., Any] | None:
    """The function ``jax.device_put`` ends in for host arrays, where this JAX has it."""
    try:
        from jax._src.lib import xla_client

        return xla_client.batched_device_put
    except (ImportError, AttributeError):
        return None
