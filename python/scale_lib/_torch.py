# SPDX-License-Identifier: Apache-2.0
"""PyTorch: every op is also a PyTorch custom op, ``torch.ops.scale_lib.<op>`` (and ``<op>_out``
for ``out=``), with a fake implementation for torch.compile and torch.export and, where the op
defines a vjp, an autograd formula.

Plain eager calls on tensors that need no gradient go straight to the library: the custom-op
dispatcher costs several microseconds a call, the library call under one. Plain tensors of which
one requires grad go into the op's autograd function (the one the custom op's Autograd kernel
applies), whose forward is that same library call. Everything else PyTorch must see takes the
custom op: tracing under torch.compile/torch.export/torch.jit.trace, dispatch and torch-function
modes (make_fx, FakeTensorMode, FlopCounterMode, ...), torch.func transforms, tensor subclasses
(FakeTensor, FunctionalTensor, DTensor, ...; not nn.Parameter), meta tensors, lazily negated
views (whose negative bit PyTorch resolves for custom ops), forward-mode dual tensors, and the
calls a derivative formula makes on batched gradients.
Autograd (reverse and forward mode) is in ``_torch_autograd.py``, torch.vmap's batching rule in
``_torch_batching.py``.

Tensors the library cannot take (sparse, mkldnn, quantized, nested) are a TypeError naming the
argument: checked on the custom-op path, and on the direct path only once the framework or the
library has refused the call, so the common path pays nothing for them.

Every custom op gets the DTensor sharding strategies of its declared ``sharding`` kind
(``torch.distributed.tensor``: tensor, sequence and data parallelism) from ``_torch_dtensor.py``.
"""

from __future__ import annotations

from typing import Any

from ._adapter import AUTOGRAD, FRAMEWORK, LIBRARY, Adapter, AllocatingAdapter
from ._bound_op import BoundOp, check_layout, check_one_device, check_overlap
from ._spec import Shape

try:
    import torch
    import torch.autograd.forward_ad as _forward_ad
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    from . import _torch_autograd, _torch_batching
    from ._torch_dtensor import PENDING_STRATEGIES, add_strategies, before_custom_op_call

    # Module-level aliases keep the per-call check cheap; dynamo still recognises the function.
    _Tensor = torch.Tensor
    # A module's weights: a plain tensor to the library (no torch function or dispatch of its
    # own); whether it requires grad decides, as for any tensor.
    _Parameter = torch.nn.Parameter
    _grad_enabled = torch.is_grad_enabled
    _dynamo_compiling = torch.compiler.is_dynamo_compiling
    # torch.jit.trace records the ops PyTorch's dispatcher runs: its state is set while it traces.
    _jit_tracing_state = torch._C._get_tracing_state
    _increment_version = torch._C._increment_version
    # Modes intercept every op PyTorch runs (make_fx, FakeTensorMode, FlopCounterMode, logging
    # and debugging modes, `with torch.device(...)`), and torch.func transforms wrap tensors in
    # storage-less wrappers: while any is active, calls must be ops PyTorch's dispatcher sees.
    _dispatch_modes = torch._C._len_torch_dispatch_stack
    _function_modes = torch._C._len_torch_function_stack
    _functorch_active = torch._C._are_functorch_transforms_active
    _formulas_running = _torch_autograd.RUNNING
except ImportError:  # scale_lib works without PyTorch
    torch = None

    def _dynamo_compiling() -> bool:
        return False


# Whether torch.compile is tracing the running Python code (see TorchAdapter.traced_call).
tracing = _dynamo_compiling

NAMESPACE = "scale_lib"
_SCHEMA_TYPE = {float: "float", int: "int", bool: "bool"}

# The torch.library.Library fragment must live as long as the process: dropping it deregisters
# the ops. importlib.reload re-runs this module in the same namespace, so keep what is there.
_library: Any = globals().get("_library")


def _check_tensor(t: Any, arg_name: str) -> None:
    """TypeError naming ``arg_name`` for a tensor whose memory is not a dense array the library
    can read (the slow paths run this; the direct path only after a refusal)."""
    if t.is_nested:
        raise TypeError(f"{arg_name} is a nested tensor; pass a dense tensor (e.g. one per component)")
    if t.layout != torch.strided:
        raise TypeError(
            f"{arg_name} has layout {t.layout}; pass a dense (strided) tensor, e.g. {arg_name}.to_dense()"
        )
    if t.is_quantized:
        raise TypeError(f"{arg_name} is a quantized tensor ({t.dtype}); pass {arg_name}.dequantize()")


def _check_not_escaped(t: Any, arg_name: str) -> None:
    """A torch.func wrapper used after its transform returned has no storage of its own."""
    if torch._C._functorch.is_functorch_wrapped_tensor(t) and not _functorch_active():
        raise TypeError(
            f"{arg_name} is a torch.func wrapper (vmap, grad, jvp, ...) used outside the transform "
            "that made it; return it from the transformed function instead"
        )


class TorchAdapter(AllocatingAdapter):
    name = module = "torch"
    array_name = "torch.Tensor"

    def __init__(self) -> None:
        # op name -> (functional custom op, out= custom op or None)
        self._custom_ops: dict[str, tuple[Any, Any]] = {}
        # op name -> the functional custom op as Python calls it (see _torch_autograd.register)
        self.callers: dict[str, Any] = {}
        # op name -> the op's autograd function, its forward the library call (AUTOGRAD route)
        self.differentiable: dict[str, Any] = {}

    def array_type(self) -> type | None:
        return None if torch is None else torch.Tensor

    # [torch_route.begin]
    def route(self, op: BoundOp, inputs: tuple[Any, ...], out: Any) -> int:
        # Every eager call runs this, so it is a plain loop of cheap checks.
        # torch.compile tracing a call whose arguments are not all tensors (the dispatcher sends
        # the others to traced_call): put the op in its graph.
        if _dynamo_compiling():
            return FRAMEWORK
        if _forward_ad._current_level >= 0:  # dual tensors exist only inside a level
            return FRAMEWORK
        if _jit_tracing_state() is not None:  # torch.jit.trace: the call must be in its graph
            return FRAMEWORK
        if _dispatch_modes() or _function_modes() or _functorch_active():
            return FRAMEWORK
        if _formulas_running[0] and _torch_autograd.through_dispatcher():
            return FRAMEWORK
        needs_grad = False
        for t in inputs:
            if type(t) is _Tensor or type(t) is _Parameter:
                if t.is_meta or t.is_neg():  # the fake implementation computes meta tensors; a
                    return FRAMEWORK  # lazily negated view (x.conj().imag) is resolved for custom ops
                if t.requires_grad:
                    needs_grad = True
            elif isinstance(t, _Tensor):  # FakeTensor, FunctionalTensor, DTensor, ...
                return FRAMEWORK
        if (
            out is not None
            and type(out) is not _Tensor
            and type(out) is not _Parameter
            and isinstance(out, _Tensor)
        ):
            return FRAMEWORK  # a subclass's own dispatch writes it (DTensor: each shard)
        # Plain tensors that need a gradient: autograd must see the call, nothing else must.
        # (An integer result, indices, has no gradient.)
        return AUTOGRAD if needs_grad and op.output_has_gradient and _grad_enabled() else LIBRARY

    # [torch_route.end]

    # [torch_traced.begin]
    def traced_call(self, op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        """The call as torch.compile traces it: compiled code checks everything the traced Python
        read (its guards) on every call, so this route to the custom op reads as little as it
        can. None when an argument is not a tensor: the dispatcher's full route handles it."""
        for t in inputs:
            if t is not None and not isinstance(t, _Tensor):
                return None
        if out is not None:
            if not isinstance(out, _Tensor):
                return None
            op.check_out_allowed()
            self.check_out(out, "out")
        return self.call(op, inputs, op.convert_attrs(attrs), out)

    # [torch_traced.end]

    def differentiate(self, op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
        # What the custom op's Autograd kernel applies, without the dispatcher on either side of
        # it: autograd records the same function, with the same formulas.
        return self.differentiable[op.name](*inputs, *attrs)

    def call(self, op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        x = inputs[0]
        if not _dynamo_compiling():
            # Registering DTensor strategies (_torch_dtensor) is a side effect torch.compile must
            # not trace. The checks that follow are, under torch.compile, the fake implementation's.
            if PENDING_STRATEGIES or op.spec.sharding is None:
                before_custom_op_call(op, inputs)
            for name, t in zip(op.input_names, inputs, strict=True):
                if t is not None:
                    _check_tensor(t, name)
            if out is not None:
                _check_tensor(out, "out")
                if _functorch_active() or _torch_autograd.has_tangent(inputs):
                    raise TypeError(
                        "out= is not supported under torch.func transforms (vmap, grad, jvp, ...) "
                        "or with forward-mode dual tensors: call without out= and use the result"
                    )
        if x.device.type not in ("cpu", "cuda", "meta"):
            raise ValueError(
                f"{op.input_names[0]} is on unsupported device {x.device}; scale_lib supports cpu and cuda"
            )
        op.check_device(x.device.type)
        functional, out_variant = self._custom_ops[op.name]
        if out is None:
            if _dynamo_compiling():  # the op in torch.compile's graph; autograd is AOTAutograd's
                if not op.takes_out and not _graph_takes_data_dependent_sizes():
                    # A graph break, as at torch.nonzero: the call runs eagerly, outside dynamo.
                    return _outside_dynamo(self.callers[op.name], *inputs, *attrs)
                return functional(*inputs, *attrs)
            return self.callers[op.name](*inputs, *attrs)
        if _grad_enabled() and any(getattr(t, "requires_grad", False) for t in inputs):
            raise ValueError(
                "out= does not support autograd, and an input requires grad: call without out=, or "
                "under torch.no_grad()"
            )
        out_variant(out, *inputs, *attrs)  # bumps out's version counter
        if type(out) is not _Tensor and not _dynamo_compiling():
            _increment_version((out,))  # a subclass's dispatch bumped the tensors it holds, not it
        return out

    def check_out(self, out: Any, arg_name: str) -> None:
        if out.requires_grad:
            raise ValueError(
                f"{arg_name} requires grad (a Parameter or a tensor autograd tracks); scale_lib does "
                f"not write into it. Write into {arg_name}.detach() to update its values"
            )
        # (Traced by torch.compile, the out= custom op checks these when it runs.)
        if _dynamo_compiling():
            return
        if out.is_neg():
            raise ValueError(
                f"{arg_name} is a lazily negated view (negative bit set, e.g. x.conj().imag); pass "
                "a tensor without it"
            )
        if out.is_inference() and not torch.is_inference_mode_enabled():
            raise ValueError(
                f"{arg_name} is an inference tensor (made under torch.inference_mode()), which "
                "PyTorch allows to be written only inside inference mode: write into it there, or "
                f"into {arg_name}.clone()"
            )
        if _torch_autograd.has_tangent((out,)):
            raise TypeError(
                f"{arg_name} is a forward-mode dual tensor: out= would leave its tangent stale. Call "
                "without out= and use the result"
            )

    def check_foreign(self, a: Any, arg_name: str, runner: Adapter) -> None:
        if type(a) is not _Tensor and type(a) is not _Parameter:
            raise TypeError(
                f"{arg_name} is a {type(a).__name__} (a torch.Tensor subclass), which only "
                f"PyTorch's dispatcher can run, but this call runs on {runner.array_name} (its first "
                "input's framework): pass the first input as a torch.Tensor, or a plain tensor"
            )
        if torch._C._functorch.is_functorch_wrapped_tensor(a):
            _check_not_escaped(a, arg_name)
            raise TypeError(
                f"{arg_name} is a torch.func transform's tensor (vmap, grad, jvp, ...), but this "
                f"call runs on {runner.array_name} (its first input's framework), which the "
                "transform cannot see: pass the first input as a torch.Tensor"
            )
        if (a.requires_grad and _grad_enabled()) or _torch_autograd.has_tangent((a,)):
            raise ValueError(
                f"{arg_name} requires grad (or has a forward-mode tangent), but this call runs on "
                f"{runner.array_name} (its first input's framework), whose result would drop the "
                f"gradient: pass the first input as a torch.Tensor, or {arg_name}.detach()"
            )

    def written(self, out: Any) -> None:
        # Autograd must see the write as in-place: a tensor saved for backward and written
        # since raises in backward(), as after PyTorch's own in-place ops.
        _increment_version((out,))

    def diagnose(self, a: Any, arg_name: str) -> None:
        _check_not_escaped(a, arg_name)
        _check_tensor(a, arg_name)
        if a.is_meta:  # real inputs went straight to the library, with a meta tensor
            raise ValueError(f"every array must be on one device; {arg_name} is on meta, which has no data")

    def ffi_arg(self, a: Any, arg_name: str) -> Any:
        self.diagnose(a, arg_name)  # PyTorch's DLPack export refused it
        return a

    def adopt_input(self, a: Any) -> Any:
        return torch.from_dlpack(a)

    def empty(self, like: Any, shape: Shape | None = None, dtype: str | None = None) -> Any:
        if shape is None and dtype is None:
            return torch.empty_like(like, memory_format=torch.contiguous_format)
        # new_empty keeps like's device without torch.empty's explicit (and slower) arguments.
        return like.new_empty(
            like.shape if shape is None else shape,
            dtype=like.dtype if dtype is None else getattr(torch, dtype),
        )

    def adopt(self, result: Any) -> Any:
        # The library allocated through PyTorch's own allocator: already a torch.Tensor.
        return result if isinstance(result, _Tensor) else torch.from_dlpack(result)

    def register(self, op: BoundOp) -> None:
        """Define ``scale_lib::<op>`` (and ``scale_lib::<op>_out``), once per process."""
        global _library
        if torch is None:
            return
        if _library is None:
            _library = torch.library.Library(NAMESPACE, "FRAGMENT")
        namespace = getattr(torch.ops, NAMESPACE)
        if not hasattr(namespace, op.name):  # a re-imported copy of scale_lib reuses the definition
            _define(op)
        out_variant = None if op.spec.output.allocated_by_library else getattr(namespace, f"{op.name}_out")
        self._custom_ops[op.name] = (getattr(namespace, op.name), out_variant)
        add_strategies(op, getattr(namespace, op.name), out_variant)  # _torch_dtensor


ADAPTER = TorchAdapter()

if torch is not None:

    @torch._dynamo.assume_constant_result
    def _graph_takes_data_dependent_sizes() -> bool:
        """Whether the graph torch.compile traces may hold an op whose result size depends on
        the data (fullgraph=True, or capture_dynamic_output_shape_ops); read while it traces."""
        context = torch._guards.TracingContext.try_get()
        shape_env = None if context is None else context.fake_mode.shape_env
        return shape_env is not None and shape_env.allow_dynamic_output_shape_ops

    @torch._dynamo.disable
    def _outside_dynamo(function: Any, *args: Any) -> Any:
        return function(*args)


def _check_fake(op: BoundOp, args: tuple[Any, ...], out: Any = None) -> None:
    """What the library checks, for fake and meta tensors that never reach it: the declared
    input rules, the scalar attributes, layouts and devices (not overlap: fake tensors have no
    memory)."""
    inputs = args[: op.n_inputs]
    op.check_abstract(inputs)
    op.check_device(inputs[0].device.type)
    op.convert_attrs(tuple(args[op.n_inputs :]))
    named = [
        (spec.name, t, spec.rows) for spec, t in zip(op.spec.inputs, inputs, strict=True) if t is not None
    ]
    if out is not None:
        named.append(("out", out, op.spec.output.rows))
    for name, t, rows in named:
        if not t.is_contiguous():  # guard-free on the common path under torch.compile
            check_layout(name, tuple(t.shape), tuple(t.stride()), rows)
    check_one_device(op, [(name, t.device) for name, t, _ in named])


def _dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _layout(t: Any) -> tuple[Any, ...]:
    """(byte offset in its storage, shape, element strides, item size) of tensor ``t``."""
    return t.storage_offset() * t.element_size(), tuple(t.shape), tuple(t.stride()), t.element_size()


def _define(op: BoundOp) -> None:
    spec, n = op.spec, op.n_inputs
    args = ", ".join(
        [f"Tensor{'?' if i.optional else ''} {i.name}" for i in spec.inputs]
        + [f"{_SCHEMA_TYPE[a.type]} {a.name}" for a in spec.attrs]
    )
    qualname = f"{NAMESPACE}::{op.name}"
    devices = tuple(spec.devices)  # kernels only where the op has them (a CUDA-only op: "cuda")
    _library.define(f"{op.name}({args}) -> Tensor")

    if spec.output.allocated_by_library:

        def functional(*args: Any) -> Any:
            return op.fn(*args)  # the library allocates through torch's allocator

        def fake(*args: Any) -> Any:
            _check_fake(op, args)
            # The length depends on the data: an unbacked symbolic size.
            try:
                size = torch.library.get_ctx().new_dynamic_size()
            except DynamicOutputShapeException:  # torch.compile without them: a graph break
                raise
            except RuntimeError:  # no fake mode: meta tensors, which have no data
                raise ValueError(
                    f"{spec.inputs[0].name} is a meta tensor, which has no data, and the size of "
                    f"{op.name}'s result depends on the data"
                ) from None
            dtype = getattr(torch, spec.output.dtype) if spec.output.dtype else args[0].dtype
            return args[0].new_empty((size,), dtype=dtype)

    else:
        _library.define(f"{op.name}_out(Tensor(a!) out, {args}) -> ()")

        def functional(*args: Any) -> Any:
            return ADAPTER.run_library(op, args[:n], args[n:])

        def fake(*args: Any) -> Any:
            _check_fake(op, args)
            return ADAPTER.new_output(op, args[:n])

        def out_variant(out: Any, *args: Any) -> None:
            ADAPTER.check_out(out, "out")
            op.fn(out, *args)
            ADAPTER.written(out)  # the dispatcher does not bump the version of `Tensor(a!)`

        def fake_out(out: Any, *args: Any) -> None:
            _check_fake(op, args, out)
            expected = ADAPTER.new_output(op, args[:n])
            if out.dtype != expected.dtype:  # the library's error types: TypeError for a dtype
                raise TypeError(
                    f"out must have dtype {_dtype_name(expected.dtype)}; got {_dtype_name(out.dtype)}"
                )
            if out.shape != expected.shape:
                raise ValueError(f"out must have shape {tuple(expected.shape)}; got {tuple(out.shape)}")
            # Traced calls check aliasing here, where the tensors still share storage: compiled
            # code may write out through a copy (aot_eager's functionalization), which the
            # library's own check would never see.
            for name, t in zip(op.input_names, args[:n], strict=True):
                if t is not None and torch._C._is_alias_of(out, t):
                    check_overlap(op, name, _layout(out), _layout(t))

        def math_bits_out(out: Any, *args: Any) -> None:
            # PyTorch's fallback for lazily negated or conjugated views cannot run an op that
            # returns nothing: such an out is refused here, such inputs resolved (as it would).
            if out.is_conj():
                raise ValueError(
                    "out is a lazily conjugated view (conjugate bit set, e.g. x.conj()); pass a "
                    "tensor without it"
                )
            ADAPTER.check_out(out, "out")
            resolved = (a.resolve_neg().resolve_conj() if isinstance(a, torch.Tensor) else a for a in args)
            getattr(getattr(torch.ops, NAMESPACE), f"{op.name}_out")(out, *resolved)

        torch.library.impl(f"{qualname}_out", devices, out_variant, lib=_library)
        for math_bit in ("Negative", "Conjugate"):
            _library.impl(f"{op.name}_out", math_bits_out, math_bit)
        torch.library.register_fake(f"{qualname}_out", fake_out, lib=_library)

    torch.library.impl(qualname, devices, functional, lib=_library)
    torch.library.register_fake(qualname, fake, lib=_library)
    overload = getattr(getattr(torch.ops, NAMESPACE), op.name).default
    call = _torch_autograd.register(op, qualname, overload, _library, functional)
    ADAPTER.callers[op.name] = call
    ADAPTER.differentiable[op.name] = _torch_autograd.eager_function(op, qualname, functional)
    _torch_batching.register(op, qualname, overload, _library)
