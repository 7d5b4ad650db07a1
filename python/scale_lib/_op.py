# SPDX-License-Identifier: Apache-2.0
"""An op declaration bound to the library's exported functions, and the checks every framework
shares: scalar attributes from their declared types, and the declared input rules for abstract
arrays (JAX tracers, PyTorch fake tensors) that never reach the library's own checks.

Nothing here knows a framework: the adapters (``_numpy.py``, ``_torch.py``, ...) receive an
:class:`Op` and decide how to run it.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable
from typing import Any

from ._lib import LIB
from ._spec import Attr, OpSpec, Shape


class Op:
    """``spec`` with its exported functions looked up, and what the call path derives from it."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.fn: Callable[..., Any] = _exported(spec.name)
        self.workspace_bytes = _exported(spec.workspace) if spec.workspace else None
        self.fn_with_workspace = _exported(f"{spec.name}_with_workspace") if spec.workspace else None
        self.n_inputs = len(spec.inputs)
        self.input_names = tuple(i.name for i in spec.inputs)
        self.like_index = self.input_names.index(spec.output.like)
        # The output is an uninitialised array like one input: the cheapest allocation there is.
        self.output_is_like_input = spec.output.shape is None and spec.output.dtype is None
        # Neither a library-allocated output nor a workspace: out = new array, fn(out, ...).
        self.plain = not spec.output.allocated_by_library and spec.workspace is None
        # Integer results (indices) have no gradient, whatever the inputs need.
        self.output_has_gradient = spec.output.dtype is None or "float" in spec.output.dtype
        self.out_and_input_names = ("out", *self.input_names)
        self._attr_types = tuple(a.type for a in spec.attrs)
        self._minimums = tuple((i, a.minimum) for i, a in enumerate(spec.attrs) if a.minimum is not None)
        self._converters = tuple(_converter(a) for a in spec.attrs)
        unknown = set(spec.devices) - {"cpu", "cuda"}
        if unknown or not spec.devices:
            raise ValueError(f"{spec.name}: devices must be some of 'cpu', 'cuda'; got {spec.devices}")
        self.cuda_only = "cpu" not in spec.devices

    def __repr__(self) -> str:
        return f"<scale_lib op {self.name}>"

    def convert_attrs(self, attrs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The scalar attributes as the ABI takes them; TypeError/ValueError naming a bad one."""
        # Every eager call runs this: values of exactly the declared types, within bounds, pass
        # as they are; anything else takes the converters, which also word the errors.
        types = self._attr_types
        if len(attrs) == len(types):
            for i, value in enumerate(attrs):
                if type(value) is not types[i]:
                    break
            else:
                for i, minimum in self._minimums:
                    if not attrs[i] >= minimum:
                        break
                else:
                    return attrs
        if len(attrs) != len(self._converters):
            raise TypeError(f"{self.name} takes {len(self._converters)} scalar argument(s); got {len(attrs)}")
        return tuple([convert(value) for convert, value in zip(self._converters, attrs, strict=True)])

    def check_device(self, device_type: str, arg_name: str = "x") -> None:
        """The library's refusal of a CPU array for an op with only a CUDA implementation, for
        calls that the framework runs before the library sees them (autograd, tracing)."""
        if device_type == "cpu" and self.cuda_only:
            raise ValueError(
                f"{arg_name} is a CPU array, but {self.name} has only a CUDA implementation; "
                "pass a CUDA array"
            )

    def output_shape(self, inputs: tuple[Any, ...]) -> Shape:
        like = inputs[self.like_index]
        return tuple(like.shape) if self.spec.output.shape is None else tuple(self.spec.output.shape(*inputs))

    def check_abstract(self, inputs: tuple[Any, ...]) -> None:
        """The declared input rules (dtype, shape, rank, presence) for arrays the library cannot
        check itself; the messages are the library's. ``inputs`` have ``.shape``/``.dtype``."""
        first_spec, first = self.spec.inputs[0], inputs[0]
        dtype = _dtype_name(first.dtype)
        if dtype not in self.spec.dtypes:
            expected = ", ".join(self.spec.dtypes)
            raise TypeError(f"{first_spec.name} has unsupported dtype {dtype}; expected one of {expected}")
        _check_ndim(first_spec.name, first, first_spec.min_ndim)
        shape = tuple(first.shape)
        for spec, t in zip(self.spec.inputs[1:], inputs[1:], strict=True):
            if t is None:
                if not spec.optional:
                    raise TypeError(f"{spec.name} must be an array; got None")
                continue
            expected_dtype = spec.dtype or dtype
            if _dtype_name(t.dtype) != expected_dtype:
                if spec.dtype is None:
                    raise TypeError(
                        f"{spec.name} and {first_spec.name} must have the same dtype; got "
                        f"{_dtype_name(t.dtype)} and {dtype}"
                    )
                raise TypeError(f"{spec.name} must have dtype {spec.dtype}; got {_dtype_name(t.dtype)}")
            got = tuple(t.shape)
            if spec.shape is None:
                if got != shape:
                    raise ValueError(
                        f"{spec.name} and {first_spec.name} must have the same shape; got {got} and {shape}"
                    )
            elif got != tuple(spec.shape(shape)):
                rule = f" to match {spec.shape_text}" if spec.shape_text else ""
                raise ValueError(f"{spec.name} must have shape {tuple(spec.shape(shape))}{rule}; got {got}")


def _exported(name: str) -> Callable[..., Any]:
    try:
        return getattr(LIB, name)
    except AttributeError:
        raise AttributeError(
            f"the compiled library exports no function {name!r}: is its binding in bindings/ and "
            "the library rebuilt?"
        ) from None


def _dtype_name(dtype: Any) -> str:
    # numpy/jax dtypes print as "float32"; torch's as "torch.float32"; paddle's as "paddle.float32".
    return str(dtype).rsplit(".", 1)[-1]


def _check_ndim(name: str, t: Any, min_ndim: int) -> None:
    if len(t.shape) < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s); got shape {tuple(t.shape)}")


# ---------------------------------------------------------------------------------------------
# Scalar attributes
# ---------------------------------------------------------------------------------------------
def _converter(attr: Attr) -> Callable[[Any], Any]:
    convert = _CONVERT[attr.type]
    name, minimum = attr.name, attr.minimum
    if minimum is None:
        return lambda value: convert(value, name)

    def bounded(value: Any) -> Any:
        value = convert(value, name)
        if not value >= minimum:  # NaN fails too
            qualifier = "non-negative" if minimum == 0 else f">= {minimum}"
            raise ValueError(f"{name} must be {qualifier}; got {value}")
        return value

    return bounded


def _as_float(value: Any, name: str) -> float:
    if type(value) is float:  # the common case, without an ABC check
        return value
    # bool is a numbers.Real, but scaling by True is almost certainly a mistake.
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # 2**1024, Fraction(10**400, 3)
            raise ValueError(f"{name} is too large for a float64; got {_short(value)}") from None
    _reject_tracer(value, name)
    raise TypeError(f"{name} must be a real number (int or float); got {type(value).__name__}")


def _as_int(value: Any, name: str) -> int:
    if type(value) is int:
        pass
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
    else:
        _reject_tracer(value, name)
        raise TypeError(f"{name} must be an integer; got {type(value).__name__}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} does not fit in int64; got {_short(value)}")
    return value


def _as_bool(value: Any, name: str) -> bool:
    if type(value) is bool:
        return value
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.bool_):
        return bool(value)
    _reject_tracer(value, name)
    raise TypeError(f"{name} must be a bool; got {type(value).__name__}")


_CONVERT: dict[type, Callable[[Any, str], Any]] = {float: _as_float, int: _as_int, bool: _as_bool}


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]}"


def _reject_tracer(value: Any, name: str) -> None:
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} must be a concrete Python number, not a traced JAX value: it is a "
            "compile-time attribute of the XLA call. Under jax.jit, close over it or mark it "
            "static (static_argnums)"
        )
