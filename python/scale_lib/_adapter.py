# SPDX-License-Identifier: Apache-2.0
"""What a framework is to the call path, and the eager call frameworks share.

Each framework's module (``_numpy.py``, ``_torch.py``, ``_jax.py``, ``_paddle.py``,
``_cupy.py``) subclasses :class:`Adapter` (or :class:`AllocatingAdapter`) and owns its call:
:meth:`Adapter.run`. The base class runs a call eagerly through DLPack (allocate the output with
the framework, call the library); a framework with machinery of its own (autograd, tracing, XLA)
overrides ``run`` to send the calls that need it there. :func:`adapter_of` tells which framework
an array is from, once per type.
"""

from __future__ import annotations

import sys
from typing import Any

from ._bound_op import BoundOp, exact_types
from ._spec import Shape

Arrays = tuple[Any, ...]  # a call's arrays in ABI order (None for an optional one not given)
Attrs = tuple[Any, ...]  # a call's scalar attributes in ABI order

# How an eager call of an AllocatingAdapter's framework runs (AllocatingAdapter.route):
# straight to the library; inside the framework's autograd function, whose forward is that same
# library call (plain arrays, one of which needs a gradient); or through all of the framework's
# machinery (custom ops, tracing, transforms, subclasses: AllocatingAdapter.call).
LIBRARY, AUTOGRAD, FRAMEWORK = 0, 1, 2

# The frameworks, in the order arrays are classified (set once by _dispatch), and
# type(array) -> its framework's adapter, filled on first sight of each type. importlib.reload
# re-runs this module in the same namespace: keep what is there, which _dispatch holds too.
_FRAMEWORKS: list[Adapter] = globals().get("_FRAMEWORKS", [])
_BY_TYPE: dict[type, Adapter] = globals().get("_BY_TYPE", {})


def use_frameworks(adapters: tuple[Adapter, ...]) -> None:
    """The frameworks arrays may come from, in the order adapter_of tries them (from _dispatch,
    which imports their modules: this module imports none)."""
    _FRAMEWORKS[:] = adapters


def adapter_of(obj: Any, arg_name: str) -> Adapter:
    """The adapter of array ``obj``; ``TypeError`` naming ``arg_name`` if it is not an array the
    library accepts."""
    cls = type(obj)
    adapter = _BY_TYPE.get(cls)
    if adapter is not None:
        return adapter
    for candidate in _FRAMEWORKS:
        array_type = candidate.array_type()  # None unless the framework is imported
        # isinstance, not issubclass: jax.Array recognises its tracers by instance only.
        if array_type is not None and isinstance(obj, array_type):
            candidate.check_type(cls, arg_name)
            _BY_TYPE[cls] = candidate
            return candidate
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    supported = ", ".join(a.array_name for a in _FRAMEWORKS[:-1]) + f" or {_FRAMEWORKS[-1].array_name}"
    raise TypeError(f"{arg_name} must be an array ({supported}); got {name}")


def check_other_inputs(op: BoundOp, inputs: tuple[Any, ...], runner: Adapter) -> None:
    """Every input is an array, or None where optional: a TypeError naming it otherwise. An
    array of another framework than ``runner``'s (the first input's) is checked by its own
    (:meth:`Adapter.check_foreign`)."""
    for t in inputs:  # the common case first: arrays of the first input's framework
        if _BY_TYPE.get(type(t)) is not runner:
            break
    else:
        return
    for spec, t in zip(op.spec.inputs, inputs, strict=True):
        if t is None:
            if not spec.optional:
                raise TypeError(f"{spec.name} must be an array; got None")
            continue
        adapter = _BY_TYPE.get(type(t)) or adapter_of(t, spec.name)
        if adapter is not runner and runner.reads_other_frameworks:
            adapter.check_foreign(t, spec.name, runner)


class Adapter:
    """One array framework whose arrays go to the library through DLPack (NumPy, CuPy)."""

    name = "unknown"
    module = ""  # the import name of the framework; arrays are recognised only once it is imported
    array_name = ""  # how an error message names the framework's array class
    # Whether a call whose first input is this framework's reads other frameworks' arrays (as
    # plain memory, each checked by its own adapter); JAX takes only its own, and refuses others.
    reads_other_frameworks = True

    def array_type(self) -> type | None:
        """The framework's array class, or None when the framework is not imported (then no
        argument can be one of its arrays, and nothing here imports it)."""
        return None

    def register(self, op: BoundOp) -> None:
        """Make ``op`` known to the framework (custom ops, XLA targets); once per process."""

    def check_type(self, cls: type, arg_name: str) -> None:
        """Raise TypeError for a subclass of the framework's array class that the library must
        not be given (one whose values are not what its memory holds). Checked once per type."""

    # [adapter_run.begin]
    def run(
        self, op: BoundOp, inputs: Arrays, attrs: Attrs, out: Any, out_adapter: Adapter | None = None
    ) -> Any:
        """``op`` on ``inputs``, the first an array of this framework, the others arrays (or None
        where optional) of any; writes into ``out`` when given (``out_adapter``: its adapter,
        once checked), else returns a new array."""
        # An eager call: what follows is its host overhead, kept lean. Scalars of exactly the
        # declared types go to the library as they are (it checks their bounds itself).
        if out_adapter is None and out is not None:
            out_adapter = self.checked_out(op, inputs[0], out)
        if not exact_types(attrs, op.attr_types):
            attrs = op.convert_attrs(attrs)
        if not op.plain:
            return self.run_special(op, inputs, attrs, out, out_adapter)
        try:
            if out_adapter is None:
                out = self.new_output(op, inputs)
            op.fn(out, *inputs, *attrs)
        except BufferError:
            retry_converted(op.fn, (out, *inputs), op.out_and_input_names, attrs)
        except RuntimeError:  # the framework's or the library's own refusal: name the argument
            diagnose((out, *inputs), op.out_and_input_names)
            raise
        if out_adapter is not None and out_adapter is not self:
            out_adapter.written(out)
        return out

    # [adapter_run.end]

    def checked_out(self, op: BoundOp, x: Any, out: Any) -> Adapter:
        """``out``'s adapter, once the op may write ``out`` and, if it is another framework's
        array, once that framework has checked it (before any write). An array of this
        framework is this adapter's to guard: only AllocatingAdapter's frameworks track writes."""
        op.check_out_allowed()
        if type(out) is type(x):  # same type: same framework
            return self
        out_adapter = adapter_of(out, "out")
        if out_adapter is not self:
            out_adapter.check_out(out, "out")
            if self.reads_other_frameworks:
                out_adapter.check_foreign(out, "out", self)
        return out_adapter

    def check_out(self, out: Any, arg_name: str) -> None:
        """Raise if ``out`` must never be written."""

    def check_foreign(self, a: Any, arg_name: str, runner: Adapter) -> None:
        """Raise if array ``a`` of this framework must not be an argument of a call that
        ``runner``'s framework runs (its first input's): ``runner`` reads it as plain memory,
        so a gradient it needs would be dropped, and a traced value cannot be read at all."""

    def written(self, out: Any) -> None:
        """``out`` was written in place: tell the framework (autograd's version counter), so
        that a tensor saved for backward and overwritten since is an error in backward, as after
        the framework's own in-place ops."""

    def new_output(self, op: BoundOp, inputs: tuple[Any, ...]) -> Any:
        like = inputs[op.like_index]
        if op.output_is_like_input:
            return self.empty(like)
        return self.empty(like, op.output_shape(inputs), op.spec.output.dtype)

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        """An uninitialised contiguous array on ``like``'s device, with ``like``'s shape and dtype
        unless given (``dtype`` by name, e.g. ``"float64"``)."""
        raise NotImplementedError(f"{self.name} arrays are allocated by the framework")

    def workspace(self, op: BoundOp, x: Any, out: Any) -> Any:
        """Scratch memory for ``op`` when the framework publishes no allocator the library could
        take it from (CuPy on CUDA); None: the library allocates its own."""
        return None

    def run_special(
        self,
        op: BoundOp,
        inputs: tuple[Any, ...],
        attrs: tuple[Any, ...],
        out: Any,
        out_adapter: Adapter | None,
    ) -> Any:
        """Ops whose output the library allocates, and ops with a workspace."""
        try:
            if op.spec.output.allocated_by_library:
                return self.adopt(invoke(op.fn, inputs, op.input_names, attrs))
            if out_adapter is None:
                out = self.new_output(op, inputs)
        except RuntimeError:
            diagnose(inputs, op.input_names)
            raise
        workspace = self.workspace(op, inputs[0], out)
        if workspace is None:
            invoke(op.fn, (out, *inputs), op.out_and_input_names, attrs)
        else:
            assert op.fn_with_workspace is not None, "only ops with a workspace get here"
            names = ("out", "workspace", *op.input_names)
            invoke(op.fn_with_workspace, (out, workspace, *inputs), names, attrs)
        if out_adapter is not None and out_adapter is not self:
            out_adapter.written(out)
        return out

    def adopt(self, result: Any) -> Any:
        """A ``tvm_ffi.Tensor`` the library allocated, as this framework's array without a copy.
        It is freed by code in the library, which the package keeps loaded for the life of the
        process."""
        return sys.modules[self.module].from_dlpack(result)

    def diagnose(self, a: Any, arg_name: str) -> None:
        """The framework or the library refused a call with an exception of its own (not a
        TypeError/ValueError): raise a TypeError/ValueError naming ``arg_name`` if array ``a``
        is why; return otherwise. Runs only after a failure, so it costs the common path
        nothing."""

    def ffi_arg(self, a: Any, arg_name: str) -> Any:
        """``a`` in a form TVM-FFI accepts, for when passing ``a`` itself raised BufferError."""
        return a

    def adopt_input(self, a: Any) -> Any:
        """Array ``a`` of another framework (or a ``tvm_ffi.Tensor``) in the form this
        framework's own machinery takes, without a copy. By default ``a`` itself: the machinery
        accepts it, or refuses it with a TypeError of its own."""
        return a

    def native(self, op: BoundOp, inputs: tuple[Any, ...], out: Any) -> tuple[tuple[Any, ...], Any]:
        """Arrays of other frameworks in the form this framework's own machinery takes (zero-copy)."""
        converted = list(inputs)
        for i, t in enumerate(inputs):
            if t is not None and i and _BY_TYPE[type(t)] is not self:
                converted[i] = self._adopt_other(t, op.input_names[i])
        if out is not None and _BY_TYPE[type(out)] is not self:
            out = self._adopt_other(out, "out")
        return tuple(converted), out

    def _adopt_other(self, a: Any, arg_name: str) -> Any:
        try:
            return self.adopt_input(a)
        except (BufferError, RuntimeError, TypeError, ValueError):
            pass  # NumPy's legacy export refuses read-only and bfloat16 arrays: the versioned one
        own = adapter_of(a, arg_name)
        try:
            return self.adopt_input(own.ffi_arg(a, arg_name))
        except (BufferError, RuntimeError) as err:
            raise TypeError(
                f"{arg_name} is a {own.name} array that {self.name} cannot take without a copy "
                f"({err}); pass a {self.name} array"
            ) from None


class AllocatingAdapter(Adapter):
    """A framework with autograd of its own that publishes its allocator and stream to TVM-FFI
    on every call (PyTorch, Paddle): the library allocates an output itself, in the same call.
    Calls that autograd (or tracing) must see go through :meth:`differentiate` or :meth:`call`."""

    def route(self, op: BoundOp, inputs: tuple[Any, ...], out: Any) -> int:
        """How the call runs: LIBRARY, AUTOGRAD (then :meth:`differentiate` runs it) or FRAMEWORK
        (then :meth:`call` does); ``out`` is the checked ``out=`` array, or None."""
        raise NotImplementedError

    def call(self, op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        raise NotImplementedError

    def differentiate(self, op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
        """The call inside the framework's autograd function (``op``'s declared vjp), whose forward
        is :meth:`run_library`; only where :meth:`route` says AUTOGRAD. By default, the full
        machinery."""
        return self.call(op, inputs, attrs, None)

    def run(
        self, op: BoundOp, inputs: Arrays, attrs: Attrs, out: Any, out_adapter: Adapter | None = None
    ) -> Any:
        out_adapter = None
        if out is not None:
            out_adapter = self.checked_out(op, inputs[0], out)
            if out_adapter is self:
                self.check_out(out, "out")
        route = self.route(op, inputs, out)
        if route:
            inputs, out = self.native(op, inputs, out)
            if route == AUTOGRAD and out is None:
                return self.differentiate(op, inputs, op.convert_attrs(attrs))
            return self.call(op, inputs, op.convert_attrs(attrs), out)
        return self.run_library(op, inputs, attrs, out, out_adapter)

    def run_library(
        self, op: BoundOp, inputs: Arrays, attrs: Attrs, out: Any = None, out_adapter: Adapter | None = None
    ) -> Any:
        """The call straight to the library: into ``out`` (``out_adapter``: its adapter, once
        checked), else allocated in the same call where the op exports its functional form."""
        if out is None and op.fn_new is not None:
            if not exact_types(attrs, op.attr_types):
                attrs = op.convert_attrs(attrs)
            try:
                return op.fn_new(*inputs, *attrs)
            except BufferError:
                return retry_converted(op.fn_new, inputs, op.input_names, attrs)
            except RuntimeError:
                diagnose(inputs, op.input_names)
                raise
        result = Adapter.run(self, op, inputs, attrs, out, out_adapter)
        if out_adapter is self:
            self.written(out)
        return result


def invoke(fn: Any, arrays: tuple[Any, ...], names: tuple[str, ...], attrs: tuple[Any, ...]) -> Any:
    """``fn(*arrays, *attrs)``; a refusal names the array it was about."""
    try:
        return fn(*arrays, *attrs)
    except BufferError:
        return retry_converted(fn, arrays, names, attrs)
    except RuntimeError:
        diagnose(arrays, names)
        raise


def retry_converted(fn: Any, arrays: tuple[Any, ...], names: tuple[str, ...], attrs: tuple[Any, ...]) -> Any:
    """``fn(*arrays, *attrs)`` again after a refusal at argument conversion (before any kernel
    ran): NumPy exports read-only and bfloat16 arrays only through the versioned DLPack protocol.
    Inputs are converted before outputs, so that an input the library cannot take is what the
    error names."""
    converted: list[Any] = list(arrays)
    for i in _inputs_first(names):
        if arrays[i] is not None:
            converted[i] = adapter_of(arrays[i], names[i]).ffi_arg(arrays[i], names[i])
    return fn(*converted, *attrs)


def diagnose(arrays: tuple[Any, ...], names: tuple[str, ...]) -> None:
    """After a RuntimeError: a TypeError/ValueError naming the array that caused it, if one did
    (inputs first); the caller re-raises the original error otherwise."""
    for i in _inputs_first(names):
        if arrays[i] is not None:
            adapter_of(arrays[i], names[i]).diagnose(arrays[i], names[i])


def _inputs_first(names: tuple[str, ...]) -> list[int]:
    return sorted(range(len(names)), key=lambda i: names[i] in ("out", "workspace"))
