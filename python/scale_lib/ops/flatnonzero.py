# SPDX-License-Identifier: Apache-2.0
"""An output whose size depends on the data, allocated in C++.

flatnonzero's declaration, registered once, and its typed public function."""

from __future__ import annotations

from scale_lib._dispatch import register
from scale_lib._spec import ArrayT, OpSpec, Output

# An output whose size depends on the data, allocated by the library.
_flatnonzero = register(OpSpec("flatnonzero", output=Output(dtype="int64", allocated_by_library=True)))


def flatnonzero(x: ArrayT) -> ArrayT:
    """The indices of the non-zero elements of ``x``, flattened in row-major order, as int64
    (like ``numpy.flatnonzero``). NaN counts as non-zero, ``-0.0`` as zero.

    The size of the result depends on the data, so the library allocates it: with the caller's
    framework allocator where it publishes one (PyTorch, Paddle), else itself, handing the array
    to the caller's framework through DLPack without a copy. There is no ``out=``. On CUDA the
    call waits for the count (a device-to-host copy), so it cannot be captured in a CUDA graph.
    JAX arrays work eagerly, not under ``jax.jit`` (XLA shapes are static); PyTorch's
    ``torch.compile`` sees a data-dependent size.

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array of any shape.

    Returns:
        A 1-D int64 array of the caller's framework and device.
    """
    return _flatnonzero.call((x,))
