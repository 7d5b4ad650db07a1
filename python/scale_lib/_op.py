"""The call path shared by every op: framework detection, output, launch, framework routing."""

from __future__ import annotations

from typing import Any, Callable

from . import _jax, _torch
from ._alloc import empty_like
from ._frameworks import framework_of
from ._lib import LIB

FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")


class Op:
    """An exported function ``name(out, x, *attrs)`` whose output is shaped like ``x``.

    Args:
        name: the exported function's name; also the JAX target ``scale_lib.<name>`` and the
            PyTorch custom op ``torch.ops.scale_lib.<name>``.
        attrs: ``(name, type)`` of the scalar arguments after ``x``, in ABI order (``float``,
            ``int`` or ``bool``).
        vjp: ``vjp(grad_out, *attrs) -> grad_x`` written with public ops, so it works for
            every framework; ``None`` if the op is not differentiable.
        cuda_graph_safe: the kernel neither allocates nor synchronises, so XLA may capture it in
            a CUDA graph.
    """

    def __init__(
        self,
        name: str,
        attrs: tuple[tuple[str, type], ...] = (),
        vjp: Callable[..., Any] | None = None,
        dtypes: tuple[str, ...] = FLOATING_DTYPES,
        cuda_graph_safe: bool = False,
    ) -> None:
        self.name = name
        self.fn = getattr(LIB, name)
        self.attrs = attrs
        self.vjp = vjp
        self.dtypes = dtypes
        self.cuda_graph_safe = cuda_graph_safe
        self.jax_target = f"scale_lib.{name}"
        _jax.add_op(self)
        _torch.register(self)

    # [op_call.begin]
    def call(self, x: Any, attrs: tuple[Any, ...], out: Any) -> Any:
        """Run the op on ``x`` with scalar ``attrs`` (ABI order), writing ``out`` if given."""
        framework = framework_of(x, "x")
        if framework.is_jax:
            if out is not None:
                raise TypeError(
                    "out= is not supported when x is a JAX array: JAX arrays are immutable. "
                    "Omit out= and use the returned array"
                )
            return _jax.call(self, x, attrs)
        if framework.has_framework_ops and framework.wants_framework_op(x):
            return framework.call_framework_op(self, x, attrs, out)
        if out is None:
            out = empty_like(framework, x)
            out_framework = framework
        else:
            out_framework = framework_of(out, "out")
            out_framework.check_writable(out, "out")
        try:
            if framework.sets_stream:
                framework.invoke(x, self.fn, out, x, *attrs)
            else:
                self.fn(out, x, *attrs)
        except BufferError:
            # Refused at argument conversion (before any kernel ran): NumPy exports read-only
            # and bfloat16 arrays only through the versioned DLPack protocol.
            framework.invoke(
                x, self.fn, out_framework.ffi_arg(out, "out"), framework.ffi_arg(x, "x"), *attrs
            )
        return out
    # [op_call.end]
