# SPDX-License-Identifier: Apache-2.0
"""What the dispatcher asks of a framework. Each framework's module (``_numpy.py``,
``_torch.py``, ``_jax.py``, ``_paddle.py``, ``_cupy.py``) subclasses :class:`Adapter` and holds
everything about that framework; the defaults here are the plain eager path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ._op import Op
from ._spec import Shape


class Adapter:
    """One array framework."""

    name = "unknown"
    module = ""  # the import name of the framework; arrays are recognised only once it is imported
    sets_stream = False  # whether calls must go through invoke() to run on the framework's stream
    # Whether CUDA scratch memory must be passed in: the framework publishes no allocator that the
    # library could take it from.
    needs_explicit_workspace = False
    # Whether the framework publishes its allocator to the library on every call (TVM-FFI does
    # for PyTorch and Paddle): then the library allocates outputs itself, in the same call. Such
    # a framework publishes its stream too, so it needs no sets_stream.
    publishes_allocator = False
    # Whether check_out/written do anything: when not, the out= path skips calling them.
    guards_out = False
    # How a message names an array of this framework that lives on the CPU, when the framework
    # has no other place for arrays (NumPy); None for frameworks whose arrays have a device.
    host_array: str | None = None

    def array_type(self) -> type | None:
        """The framework's array class, or None when the framework is not imported (then no
        argument can be one of its arrays, and nothing here imports it)."""
        return None

    def register(self, op: Op) -> None:
        """Make ``op`` known to the framework (custom ops, XLA targets); once per process."""

    def check_type(self, cls: type, arg_name: str) -> None:
        """Raise TypeError for a subclass of the framework's array class that the library must
        not be given (one whose values are not what its memory holds). Checked once per type."""

    def takes_call(self, op: Op, inputs: tuple[Any, ...]) -> bool:
        """Whether the call must go through the framework's own machinery (autograd, tracing,
        compilation) rather than straight to the library; then :meth:`call` runs it."""
        return False

    def call(self, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        raise NotImplementedError(f"{self.name} runs every call eagerly")

    def check_out(self, out: Any, arg_name: str) -> None:
        """Raise if ``out`` must never be written (before any write; with ``guards_out``)."""

    def written(self, out: Any) -> None:
        """``out`` was written in place: tell the framework (autograd's version counter), so
        that a tensor saved for backward and overwritten since is an error in backward, as after
        the framework's own in-place ops (with ``guards_out``)."""

    def diagnose(self, a: Any, arg_name: str) -> None:
        """The framework or the library refused a call with an exception of its own (not a
        TypeError/ValueError): raise a TypeError/ValueError naming ``arg_name`` if array ``a``
        is why; return otherwise. Runs only after a failure, so it costs the common path
        nothing."""

    def adopt_input(self, a: Any) -> Any:
        """Array ``a`` of another framework (or a ``tvm_ffi.Tensor``) in the form this
        framework's own machinery (:meth:`call`) takes, without a copy. By default ``a`` itself:
        the machinery accepts it, or refuses it with a TypeError of its own."""
        return a

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        """An uninitialised contiguous array on ``like``'s device, with ``like``'s shape and dtype
        unless given (``dtype`` by name, e.g. ``"float64"``)."""
        raise NotImplementedError(f"{self.name} arrays are allocated by the framework")

    def adopt(self, result: Any) -> Any:
        """A ``tvm_ffi.Tensor`` the library allocated, as this framework's array without a copy.
        It is freed by code in the library, which the package keeps loaded for the life of the
        process."""
        return sys.modules[self.module].from_dlpack(result)

    def invoke(self, x: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the stream of ``x``'s device; TVM-FFI already knows the stream of
        frameworks that publish it."""
        return fn(*args)

    def ffi_arg(self, a: Any, arg_name: str) -> Any:
        """``a`` in a form TVM-FFI accepts, for when passing ``a`` itself raised BufferError."""
        return a
