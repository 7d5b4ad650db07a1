"""The call path shared by every op: framework detection, output, launch, JAX routing."""

from __future__ import annotations

from typing import Any

from . import _jax
from ._alloc import empty_like
from ._frameworks import framework_of
from ._lib import LIB

FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")


class Op:
    """An exported function ``name(out, x, *attrs)`` whose output is shaped like ``x``.

    ``attrs`` names the scalar arguments after ``x``, in ABI order; JAX passes them as XLA
    attributes of the same names.
    """

    def __init__(
        self,
        name: str,
        attrs: tuple[str, ...] = (),
        dtypes: tuple[str, ...] = FLOATING_DTYPES,
        cuda_graph_safe: bool = False,
    ) -> None:
        self.name = name
        self.fn = getattr(LIB, name)
        self.attrs = attrs
        self.dtypes = dtypes
        self.cuda_graph_safe = cuda_graph_safe
        self.jax_target = f"scale_lib.{name}"
        _jax.add_op(self)

    def __call__(self, x: Any, *attrs: Any, out: Any = None) -> Any:
        framework = framework_of(x, "x")
        if framework.is_jax:
            if out is not None:
                raise TypeError(
                    "out= is not supported when x is a JAX array: JAX arrays are immutable. "
                    "Omit out= and use the returned array"
                )
            return _jax.call(self, x, attrs)
        x_arg = framework.ffi_arg(x, "x")
        if out is None:
            out = empty_like(framework, x)
            out_arg = framework.ffi_arg(out, "out")
        else:
            out_framework = framework_of(out, "out")
            out_framework.check_writable(out, "out")
            out_arg = out_framework.ffi_arg(out, "out")
        framework.invoke(self.fn, out_arg, x_arg, *attrs)
        return out
