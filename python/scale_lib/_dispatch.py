# SPDX-License-Identifier: Apache-2.0
"""The call path every op shares: which framework an argument is from, and the eager call.

``register(spec)`` binds a declaration to the library and to every framework, once, and returns
the callable the public function calls. A call classifies its first array (once per type), checks
the scalar attributes against their declared types, and then either hands the call to the
framework's own machinery (autograd, tracing, XLA) or runs it eagerly: allocate the output with
the framework, call the library on the framework's stream.
"""

from __future__ import annotations

from typing import Any

from . import _cupy, _jax, _numpy, _paddle, _torch
from ._adapter import Adapter
from ._op import Op, exact_types
from ._spec import OpSpec

# By name, not through the _torch module: code torch.compile traces reads them, and a module
# reached by two paths would cost a guard of its own on every compiled call.
from ._torch import ADAPTER as _TORCH
from ._torch import tracing as _torch_tracing

# Adding a framework: a module with an Adapter subclass, and its ADAPTER here.
ADAPTERS: tuple[Adapter, ...] = (_numpy.ADAPTER, _torch.ADAPTER, _jax.ADAPTER, _paddle.ADAPTER, _cupy.ADAPTER)

SUPPORTED_TYPES = "numpy.ndarray, torch.Tensor, jax.Array, paddle.Tensor or cupy.ndarray"

_REGISTERED: dict[str, Op] = {}

# type(array) -> its framework's adapter, filled on first sight of each type.
_BY_TYPE: dict[type, Adapter] = {}


def adapter_of(obj: Any, arg_name: str) -> Adapter:
    """The adapter of array ``obj``; ``TypeError`` naming ``arg_name`` if it is not an array the
    library accepts."""
    cls = type(obj)
    adapter = _BY_TYPE.get(cls)
    if adapter is not None:
        return adapter
    for candidate in ADAPTERS:
        array_type = candidate.array_type()  # None unless the framework is imported
        # isinstance, not issubclass: jax.Array recognises its tracers by instance only.
        if array_type is not None and isinstance(obj, array_type):
            candidate.check_type(cls, arg_name)
            _BY_TYPE[cls] = candidate
            return candidate
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    raise TypeError(f"{arg_name} must be an array ({SUPPORTED_TYPES}); got {name}")


class Dispatcher:
    """``op`` as the public function calls it: ``dispatcher.call(inputs, attrs, out)``, with the
    inputs and the scalar attributes each a tuple in ABI order."""

    def __init__(self, op: Op) -> None:
        self.op = op

    def __repr__(self) -> str:
        return f"<dispatcher of {self.op!r}>"

    # [op_call.begin]
    def call(self, inputs: tuple[Any, ...], attrs: tuple[Any, ...] = (), out: Any = None) -> Any:
        op = self.op
        if _torch_tracing():  # torch.compile reads this code: the shortest route to its custom op
            traced = _TORCH.traced_call(op, inputs, attrs, out)
            if traced is not None:
                return traced
        x = inputs[0]
        adapter = _BY_TYPE.get(type(x)) or adapter_of(x, op.input_names[0])
        if op.cuda_only and adapter.host_array is not None:  # say what the array is: NumPy's
            op.check_device("cpu", adapter.host_array)
        if len(inputs) > 1:
            _check_other_inputs(op, inputs)
        out_adapter = adapter
        if out is not None:
            op.check_out_allowed()
            if type(out) is not type(x):  # same type as x: same framework
                out_adapter = adapter_of(out, "out")
            if out_adapter.guards_out or out_adapter is not adapter:
                out_adapter.check_out(out, "out")  # before anything is written
        if adapter.takes_call(op, inputs):
            inputs, out = _native(adapter, op, inputs, out, out_adapter)
            return adapter.call(op, inputs, op.convert_attrs(attrs), out)
        # An eager call: what follows is its host overhead, kept lean. Scalars of exactly the
        # declared types go to the library as they are (it checks their bounds itself).
        if not exact_types(attrs, op.attr_types):
            attrs = op.convert_attrs(attrs)
        if out is None and op.fn_new is not None and adapter.publishes_allocator:
            # The library allocates the output with the framework (and on its stream): one call.
            try:
                return op.fn_new(*inputs, *attrs)
            except BufferError:
                return _retry_converted(adapter, x, op.fn_new, inputs, op.input_names, attrs)
            except RuntimeError:
                _diagnose(inputs, op.input_names)
                raise
        if not op.plain:
            return _call_special(adapter, op, inputs, attrs, out, out_adapter)
        written = None
        try:
            if out is None:
                out = (
                    adapter.empty(inputs[op.like_index])
                    if op.output_is_like_input
                    else adapter.empty(inputs[op.like_index], op.output_shape(inputs), op.spec.output.dtype)
                )
            elif out_adapter.guards_out:
                written = out_adapter.written
            if adapter.sets_stream:
                adapter.invoke(x, op.fn, out, *inputs, *attrs)
            else:
                op.fn(out, *inputs, *attrs)
        except BufferError:
            _retry_converted(adapter, x, op.fn, (out, *inputs), op.out_and_input_names, attrs)
        except RuntimeError:  # the framework's or the library's own refusal: name the argument
            _diagnose((out, *inputs), op.out_and_input_names)
            raise
        if written is not None:
            written(out)
        return out

    # [op_call.end]


def register(spec: OpSpec) -> Dispatcher:
    """Bind ``spec`` to the library and register it with every framework (PyTorch custom ops,
    JAX XLA targets). Call once per op, from its module in ``ops/``."""
    op = Op(spec)
    dispatcher = Dispatcher(op)
    op.public_call = dispatcher.call
    for adapter in ADAPTERS:
        adapter.register(op)
    _REGISTERED[spec.name] = op
    return dispatcher


def registered_specs() -> tuple[OpSpec, ...]:
    """The declaration of every registered op, in registration order."""
    return tuple(op.spec for op in _REGISTERED.values())


def _check_other_inputs(op: Op, inputs: tuple[Any, ...]) -> None:
    """Every input is an array, or None where optional: a TypeError naming it otherwise."""
    for t in inputs:  # the common case first: arrays of types seen before
        if type(t) not in _BY_TYPE:
            break
    else:
        return
    for spec, t in zip(op.spec.inputs, inputs, strict=True):
        if t is None:
            if not spec.optional:
                raise TypeError(f"{spec.name} must be an array; got None")
        elif type(t) not in _BY_TYPE:
            adapter_of(t, spec.name)


def _call_special(
    adapter: Adapter, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any, out_adapter: Adapter
) -> Any:
    """Ops whose output the library allocates, and ops with a workspace."""
    x = inputs[0]
    try:
        if op.spec.output.allocated_by_library:
            return adapter.adopt(_invoke(adapter, x, op.fn, inputs, op.input_names, attrs))
        given = out is not None
        if not given:
            out = adapter.empty(inputs[op.like_index], op.output_shape(inputs), op.spec.output.dtype)
    except RuntimeError:
        _diagnose(inputs, op.input_names)
        raise
    if adapter.needs_explicit_workspace:
        assert op.workspace_bytes is not None, "only ops with a workspace get here"
        assert op.fn_with_workspace is not None, "only ops with a workspace get here"
        nbytes = op.workspace_bytes(_numel(x.shape), max(_numel(out.shape), 1))
        workspace = adapter.empty(x, (nbytes,), "uint8")
        fn, arrays, names = (
            op.fn_with_workspace,
            (out, workspace, *inputs),
            ("out", "workspace", *op.input_names),
        )
    else:
        fn, arrays, names = op.fn, (out, *inputs), op.out_and_input_names
    if given and out_adapter.guards_out:
        _write_and_tell(adapter, out_adapter, fn, arrays, names, attrs)
    else:
        _invoke(adapter, x, fn, arrays, names, attrs)
    return out


def _write_and_tell(
    adapter: Adapter,
    out_adapter: Adapter,
    fn: Any,
    arrays: tuple[Any, ...],
    names: tuple[str, ...],
    attrs: tuple[Any, ...],
) -> None:
    """``fn`` writes into a given ``out`` (``arrays[0]``) whose framework tracks writes."""
    _invoke(adapter, arrays[1], fn, arrays, names, attrs)
    out_adapter.written(arrays[0])


def _invoke(
    adapter: Adapter, x: Any, fn: Any, arrays: tuple[Any, ...], names: tuple[str, ...], attrs: tuple[Any, ...]
) -> Any:
    """``fn(*arrays, *attrs)`` on the stream of ``x``'s framework and device."""
    try:
        if adapter.sets_stream:
            return adapter.invoke(x, fn, *arrays, *attrs)
        return fn(*arrays, *attrs)
    except BufferError:
        return _retry_converted(adapter, x, fn, arrays, names, attrs)
    except RuntimeError:
        _diagnose(arrays, names)
        raise


def _diagnose(arrays: tuple[Any, ...], names: tuple[str, ...]) -> None:
    """After a RuntimeError: a TypeError/ValueError naming the array that caused it, if one did
    (inputs first); the caller re-raises the original error otherwise."""
    order = sorted(range(len(arrays)), key=lambda i: names[i] in ("out", "workspace"))
    for i in order:
        if arrays[i] is not None:
            adapter_of(arrays[i], names[i]).diagnose(arrays[i], names[i])


def _native(
    adapter: Adapter, op: Op, inputs: tuple[Any, ...], out: Any, out_adapter: Adapter
) -> tuple[tuple[Any, ...], Any]:
    """Arrays of other frameworks in the form ``adapter``'s own machinery takes (zero-copy)."""
    converted = list(inputs)
    for i, t in enumerate(inputs):
        if t is not None and i and _BY_TYPE[type(t)] is not adapter:
            converted[i] = _adopt(adapter, t, op.input_names[i])
    if out is not None and out_adapter is not adapter:
        out = _adopt(adapter, out, "out")
    return tuple(converted), out


def _adopt(adapter: Adapter, a: Any, arg_name: str) -> Any:
    try:
        return adapter.adopt_input(a)
    except (BufferError, RuntimeError, TypeError, ValueError):
        pass  # NumPy's legacy export refuses read-only and bfloat16 arrays: the versioned one
    own = adapter_of(a, arg_name)
    try:
        return adapter.adopt_input(own.ffi_arg(a, arg_name))
    except (BufferError, RuntimeError) as err:
        raise TypeError(
            f"{arg_name} is a {own.name} array that {adapter.name} cannot take without a copy "
            f"({err}); pass a {adapter.name} array"
        ) from None


def _retry_converted(
    adapter: Adapter, x: Any, fn: Any, arrays: tuple[Any, ...], names: tuple[str, ...], attrs: tuple[Any, ...]
) -> Any:
    # The call was refused at argument conversion, before any kernel ran: NumPy exports read-only
    # and bfloat16 arrays only through the versioned DLPack protocol. Inputs are converted before
    # outputs, so that an input the library cannot take is what the error names.
    order = sorted(range(len(arrays)), key=lambda i: names[i] in ("out", "workspace"))
    converted: list[Any] = list(arrays)
    for i in order:
        if arrays[i] is not None:
            converted[i] = adapter_of(arrays[i], names[i]).ffi_arg(arrays[i], names[i])
    return adapter.invoke(x, fn, *converted, *attrs)


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
