"""The call path shared by every op: framework detection, output, launch, framework routing.

An op is declared once, in ``ops.py``, as an :class:`Op`: its exported function's name, its
tensor inputs, scalar attributes and output, and its vjp. From that declaration alone it gets
the NumPy/PyTorch/JAX/Paddle/CuPy call path, the JAX XLA target, the PyTorch custom op and the
autograd wiring of every framework.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _jax, _torch
from ._alloc import adopt, empty
from ._frameworks import framework_of
from ._lib import LIB

FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Input:
    """A tensor argument. ``optional`` ones may be ``None`` (``ffi::Optional`` at the ABI).

    XLA FFI calls have no "absent buffer", so for JAX an absent optional input is replaced by
    ``jax_stand_in(first_input)``: a value with the same effect (ones for a weight).
    """

    name: str
    optional: bool = False
    jax_stand_in: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Output:
    """The output, on the first input's framework and device. Its shape and dtype are those of
    the input named ``like``, unless ``shape`` (a function of the inputs) or ``dtype`` (a name)
    says otherwise. ``allocated_by_library``: the library allocates and returns it (its size
    depends on the data), so there is no ``out=``."""

    like: str = "x"
    shape: Callable[..., tuple[int, ...]] | None = None
    dtype: str | None = None
    allocated_by_library: bool = False


class Op:
    """An exported function ``name(out, *inputs, *attrs)`` (or ``name(*inputs) -> out`` when the
    library allocates the output).

    Args:
        name: the exported function; also the JAX target ``scale_lib.<name>`` and the PyTorch
            custom op ``torch.ops.scale_lib.<name>``.
        inputs: the tensor arguments, in ABI order.
        attrs: ``(name, type)`` of the scalar arguments after the inputs (``float``, ``int`` or
            ``bool``).
        output: how the output is made.
        vjp: ``vjp(grad_out, out, *inputs, *attrs) -> tuple of input gradients (or None)``,
            written with public ops so it works for every framework; ``None`` if the op is not
            differentiable.
        check: raises the library's ``TypeError``/``ValueError`` for bad inputs; run in Python
            only where the library cannot report errors itself (JAX, inside XLA).
        workspace: name of the exported ``f(numel of x, numel of out) -> bytes`` of scratch the
            CUDA kernel needs. The op then also exports ``<name>_with_workspace(out, workspace,
            *inputs)`` for callers whose framework publishes no allocator.
        jax_vmap_method: how ``jax.vmap`` batches the XLA call (see ``jax.ffi.ffi_call``): the
            kernel then sees every batched input with the batch as leading dimensions.
        cuda_graph_safe: the kernel neither allocates nor synchronises, so XLA may capture it in
            a CUDA graph.
        public: the op has a public function ``scale_lib.<name>`` (else a private helper op).
    """

    def __init__(
        self,
        name: str,
        inputs: tuple[Input, ...] = (Input("x"),),
        attrs: tuple[tuple[str, type], ...] = (),
        output: Output = Output(),
        vjp: Callable[..., tuple[Any, ...]] | None = None,
        check: Callable[..., None] | None = None,
        workspace: str | None = None,
        dtypes: tuple[str, ...] = FLOATING_DTYPES,
        jax_vmap_method: str = "broadcast_all",
        cuda_graph_safe: bool = False,
        public: bool = True,
    ) -> None:
        self.name = name
        self.fn = getattr(LIB, name)
        self.inputs = inputs
        self.attrs = attrs
        self.output = output
        self.vjp = vjp
        self.check = check
        self.workspace_bytes = getattr(LIB, workspace) if workspace else None
        self.fn_with_workspace = getattr(LIB, f"{name}_with_workspace") if workspace else None
        self.dtypes = dtypes
        self.jax_vmap_method = jax_vmap_method
        self.cuda_graph_safe = cuda_graph_safe
        self.public = public
        self.jax_target = f"scale_lib.{name}"
        self._input_names = tuple(i.name for i in inputs)
        self._first_name = self._input_names[0]
        self._like = self._input_names.index(output.like)
        self._plain = not output.allocated_by_library and workspace is None
        _jax.add_op(self)
        _torch.register(self)

    # [op_call.begin]
    def call(self, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any = None) -> Any:
        """Run the op on ``inputs`` (first one an array; optional ones may be ``None``) and
        scalar ``attrs``, in ABI order, writing ``out`` if given."""
        x = inputs[0]
        framework = framework_of(x, self._first_name)
        if len(inputs) > 1:
            self._check_other_inputs(inputs)
        if framework.is_jax:
            return self._call_jax(inputs, attrs, out)
        if framework.has_framework_ops and (
            framework.wants_framework_op(x) or (len(inputs) > 1 and self._others_want(framework, inputs))
        ):
            return framework.call_framework_op(self, inputs, attrs, out)
        if not self._plain:
            return self._call_special(framework, inputs, attrs, out)
        # The common case, kept lean: it is every eager call's host overhead.
        if out is None:
            out = self.allocate(framework, inputs)
        elif type(out) is not type(x):  # same type as x: same framework, already vetted
            framework_of(out, "out").check_writable(out, "out")
        try:
            if framework.sets_stream:
                framework.invoke(x, self.fn, out, *inputs, *attrs)
            else:
                self.fn(out, *inputs, *attrs)
        except BufferError:
            _retry_converted(framework, x, self.fn, (out, *inputs), ("out", *self._input_names), attrs)
        return out

    # [op_call.end]

    def _check_other_inputs(self, inputs: tuple[Any, ...]) -> None:
        """Every input is an array, or None where optional: a TypeError naming it otherwise."""
        for spec, t in zip(self.inputs[1:], inputs[1:], strict=True):
            if t is None:
                if not spec.optional:
                    raise TypeError(f"{spec.name} must be an array; got None")
            else:
                framework_of(t, spec.name)

    def _others_want(self, framework: Any, inputs: tuple[Any, ...]) -> bool:
        """Whether an input after the first needs the framework's op (a torch Parameter weight)."""
        wants = framework.wants_framework_op
        return any(
            t is not None and wants(t) and framework_of(t, name).name == framework.name
            for name, t in zip(self._input_names[1:], inputs[1:], strict=True)
        )

    def _call_jax(self, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        if out is not None:
            if self.output.allocated_by_library:
                raise TypeError(f"{self.name} has no out=: the size of its result depends on the data")
            raise TypeError(
                "out= is not supported when x is a JAX array: JAX arrays are immutable. "
                "Omit out= and use the returned array"
            )
        return _jax.call(self, inputs, attrs)

    def _call_special(self, framework: Any, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        """Ops whose output the library allocates, and ops with a workspace."""
        x = inputs[0]
        if self.output.allocated_by_library:
            if out is not None:
                raise TypeError(f"{self.name} has no out=: the size of its result depends on the data")
            return adopt(framework, _invoke(framework, x, self.fn, inputs, self._input_names, attrs))
        if out is None:
            out = self.allocate(framework, inputs)
        elif type(out) is not type(x):
            framework_of(out, "out").check_writable(out, "out")
        if framework.needs_explicit_workspace:
            assert self.workspace_bytes is not None, "only ops with a workspace get here"
            nbytes = self.workspace_bytes(_numel(x), max(_numel(out), 1))
            workspace = empty(framework, x, (nbytes,), "uint8")
            names = ("out", "workspace", *self._input_names)
            _invoke(framework, x, self.fn_with_workspace, (out, workspace, *inputs), names, attrs)
        else:
            _invoke(framework, x, self.fn, (out, *inputs), ("out", *self._input_names), attrs)
        return out

    def allocate(self, framework: Any, inputs: tuple[Any, ...]) -> Any:
        """A new output for ``inputs`` on ``framework``."""
        output = self.output
        if output.shape is None and output.dtype is None:
            return empty(framework, inputs[self._like])
        shape = None if output.shape is None else tuple(output.shape(*inputs))
        return empty(framework, inputs[self._like], shape, output.dtype)


def _invoke(
    framework: Any, x: Any, fn: Any, arrays: tuple[Any, ...], names: tuple[str, ...], attrs: tuple[Any, ...]
) -> Any:
    """``fn(*arrays, *attrs)`` on the stream of ``x``'s framework and device."""
    try:
        if framework.sets_stream:
            return framework.invoke(x, fn, *arrays, *attrs)
        return fn(*arrays, *attrs)
    except BufferError:
        return _retry_converted(framework, x, fn, arrays, names, attrs)


def _retry_converted(
    framework: Any, x: Any, fn: Any, arrays: tuple[Any, ...], names: tuple[str, ...], attrs: tuple[Any, ...]
) -> Any:
    # The call was refused at argument conversion, before any kernel ran: NumPy exports
    # read-only and bfloat16 arrays only through the versioned DLPack protocol.
    converted = tuple(
        a if a is None else framework_of(a, name).ffi_arg(a, name)
        for a, name in zip(arrays, names, strict=True)
    )
    return framework.invoke(x, fn, *converted, *attrs)


def _numel(x: Any) -> int:
    n = 1
    for d in x.shape:
        n *= int(d)
    return n
