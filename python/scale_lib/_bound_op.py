# SPDX-License-Identifier: Apache-2.0
"""An op declaration bound to the library's exported functions, and the checks every framework
shares: scalar attributes from their declared types, and the declared input rules for abstract
arrays (JAX tracers, PyTorch fake tensors) that never reach the library's own checks.

Nothing here knows a framework: the adapters (``_numpy.py``, ``_torch.py``, ...) receive an
:class:`BoundOp` and decide how to run it. :func:`sharding_of` reads, from the declaration, what the
distributed-array rules of ``_torch.py`` and ``_jax.py`` need.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._lib import BUILD_INFO, LIB
from ._spec import Attr, OpSpec, Shape


class BoundOp:
    """``spec`` with its exported functions looked up, and what the call path derives from it."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.fn: Callable[..., Any] = _exported(spec.name)
        self.workspace_bytes = _exported(spec.workspace) if spec.workspace else None
        self.fn_with_workspace = _exported(f"{spec.name}_with_workspace") if spec.workspace else None
        # fn without its output, returning a new one allocated by the calling framework, where the
        # library exports one (include/functional.h): the allocating call's fast path.
        self.fn_new: Callable[..., Any] | None = getattr(LIB, f"{spec.name}_new", None)
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
        self.takes_out = not spec.output.allocated_by_library
        self.attr_types = tuple(a.type for a in spec.attrs)
        self._minimums = tuple((i, a.minimum) for i, a in enumerate(spec.attrs) if a.minimum is not None)
        self._converters = tuple(_converter(a) for a in spec.attrs)
        unknown = set(spec.devices) - {"cpu", "cuda"}
        if unknown or not spec.devices:
            raise ValueError(f"{spec.name}: devices must be some of 'cpu', 'cuda'; got {spec.devices}")
        self.cuda_only = "cpu" not in spec.devices
        # A Triton op in a library built without the Triton kernels has no CUDA kernel.
        self.cuda_missing = spec.triton and not BUILD_INFO["triton"]
        # Where this build has kernels for the op.
        self.devices = tuple(d for d in spec.devices if not (d == "cuda" and self.cuda_missing))
        # The op as its public function calls it (set by _dispatch.register): derivatives written
        # as ops call it, so that they take each framework's route, tracing and transforms included.
        self.public_call: Callable[..., Any] = _unbound
        # Inputs that the output may be the very same array of (in-place use), as the library
        # exports them ("out=x" in its ABI docstring).
        self.in_place_inputs = _in_place_inputs(spec.name) if self.takes_out else frozenset()

    def __repr__(self) -> str:
        return f"<scale_lib op {self.name}>"

    def convert_attrs(self, attrs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The scalar attributes as the ABI takes them; TypeError/ValueError naming a bad one."""
        # Values of exactly the declared types, within bounds, pass as they are; anything else
        # takes the converters, which also word the errors.
        if exact_types(attrs, self.attr_types):
            for i, minimum in self._minimums:
                if not attrs[i] >= minimum:
                    break
            else:
                return attrs
        if len(attrs) != len(self._converters):
            raise TypeError(f"{self.name} takes {len(self._converters)} scalar argument(s); got {len(attrs)}")
        return tuple([convert(value) for convert, value in zip(self._converters, attrs, strict=True)])

    def vjp(self, grad: Any, out: Any, inputs: Sequence[Any], attrs: Sequence[Any]) -> tuple[Any, ...]:
        """The declared vjp's gradients, each with its input's shape: an input given with
        leading dimensions of size 1 (a ``(1, hidden)`` weight) gets its gradient in that shape,
        as every framework's autograd requires."""
        grads = self.spec.vjp(grad, out, *inputs, *attrs)  # type: ignore[misc]
        if len(grads) != len(inputs):
            raise TypeError(f"{self.name}'s vjp returned {len(grads)} gradient(s) for {len(inputs)} inputs")
        # Every backward runs this: a plain loop, and the shapes compared as the framework gives
        # them first (tuple(...) only where that says they differ: Paddle's are lists).
        reshaped = None
        for i, g in enumerate(grads):
            t = inputs[i]
            if g is None or t is None or g.shape == t.shape or tuple(g.shape) == tuple(t.shape):
                continue
            if reshaped is None:
                reshaped = list(grads)
            reshaped[i] = g.reshape(t.shape)
        return tuple(grads) if reshaped is None else tuple(reshaped)

    @property
    def has_jvp(self) -> bool:
        """Whether the op has a forward-mode derivative: declared, or the op itself (linear)."""
        return self.spec.jvp is not None or self.spec.linear

    def jvp(self, tangents: Sequence[Any], out: Any, inputs: Sequence[Any], attrs: Sequence[Any]) -> Any:
        """The tangent of the output for ``tangents`` (one per input; ``None``: zero or absent).
        A linear op's tangent is the op of the tangents, with a zero array (``zeros_like``) for
        an input that has none. Only for ops with :attr:`has_jvp`."""
        if self.spec.jvp is not None:
            return self.spec.jvp(tuple(tangents), out, *inputs, *attrs)
        assert self.spec.linear, "only ops with a jvp get here"
        if all(t is None for t in tangents):
            return None
        filled = tuple(
            t if t is not None or x is None else _zeros_like(x) for t, x in zip(tangents, inputs, strict=True)
        )
        return self.public_call(filled, tuple(attrs))

    def refuse_jvp(self) -> None:
        """TypeError for forward-mode differentiation of an op that declares no jvp."""
        raise TypeError(
            f"{self.name} has no forward-mode derivative (its declaration has no jvp and it is not "
            "linear): jax.jvp, jax.jacfwd, jax.hessian, torch.func.jvp, torch.func.jacfwd and "
            "torch.autograd.forward_ad are not supported for it; use reverse mode (jax.grad, "
            "torch.autograd.grad, torch.func.jacrev)"
        )

    def check_out_allowed(self) -> None:
        """TypeError for ``out=`` given to an op whose result size depends on the data."""
        if not self.takes_out:
            raise TypeError(f"{self.name} has no out=: the size of its result depends on the data")

    def check_device(self, device_type: str, array: str = "a CPU array") -> None:
        """The library's refusal of a CPU array for an op with only a CUDA implementation (and of
        a CUDA array for a Triton op built without its kernels), for calls that the framework
        runs before the library sees them (autograd, tracing) and for frameworks whose arrays are
        all on the CPU (``array``: how the message names such an array)."""
        if device_type == "cpu" and self.cuda_only:
            raise ValueError(
                f"{self.input_names[0]} is {array}, but {self.name} has only a CUDA implementation; "
                "pass a CUDA array"
            )
        if device_type == "cuda" and self.cuda_missing:
            raise ValueError(
                f"{self.name} has no CUDA kernel in this build of scale_lib: its CUDA kernel is written "
                "in Triton, and the library was built without Triton. Rebuild with triton installed in "
                "the build environment (SCALE_LIB_TRITON=ON), or pass a CPU tensor"
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
        for spec, t in zip(self.spec.inputs, inputs, strict=True):
            if spec.check is not None and t is not None:
                try:
                    spec.check(tuple(t.shape))
                except ValueError:
                    spec.check(concrete(tuple(t.shape)))  # the same refusal, worded with numbers
                    raise
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
                        f"{spec.name} and {first_spec.name} must have the same shape; got "
                        f"{concrete(got)} and {concrete(shape)}"
                    )
            elif _without_leading_ones(got) != tuple(spec.shape(shape)):
                rule = f" to match {spec.shape_text}" if spec.shape_text else ""
                wanted = concrete(tuple(spec.shape(shape)))
                raise ValueError(f"{spec.name} must have shape {wanted}{rule}; got {concrete(got)}")


# ---------------------------------------------------------------------------------------------
# Memory overlap of abstract arrays (the library's rule, include/tvm_ffi_utils.h, for
# arrays that never reach it: compiled code may hand the library a copy of out)
# ---------------------------------------------------------------------------------------------
Layout = tuple[Any, Shape, Shape, int]  # byte offset, shape, element strides, item size


def check_overlap(op: BoundOp, input_name: str, out: Layout, other: Layout) -> None:
    """The library's ValueError if ``out`` and input ``input_name``, two views of one buffer,
    share a byte without being the very same array where the op allows in-place use."""
    if not _footprints_intersect(_footprint(out), _footprint(other)):
        return
    allowed = input_name in op.in_place_inputs
    if allowed and out[0] == other[0] and out[3] == other[3] and _same_layout(out, other):
        return
    if allowed:
        raise ValueError(
            f"out and {input_name} overlap in memory without being the same array; pass the same "
            "array for in-place use, or arrays that do not overlap"
        )
    raise ValueError(f"out and {input_name} overlap in memory; out must not share memory with {input_name}")


def _same_layout(a: Layout, b: Layout) -> bool:
    return a[1] == b[1] and all(size <= 1 or sa == sb for size, sa, sb in zip(a[1], a[2], b[2], strict=True))


def _footprint(layout: Layout) -> tuple[int, int, int, int]:
    """(begin, run, step, count): the bytes the elements occupy, as in the library."""
    begin, shape, strides, item = layout
    if 0 in shape:
        return begin, 0, 0, 0
    run_items, runs, run_stride, regular = 1, 1, 0, True
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if not regular:
            break
        if size == 1:
            continue
        if runs == 1 and stride == run_items:
            run_items *= size
        elif runs == 1:
            runs, run_stride = size, stride
            regular = stride >= run_items
        else:
            regular = stride == run_stride * runs
            runs *= size
    if regular:
        return begin, run_items * item, run_stride * item, runs
    low = sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True) if stride < 0)
    high = sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True) if stride > 0)
    return begin + low * item, (high - low + 1) * item, 0, 1


def _footprints_intersect(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether a run of ``a`` and a run of ``b`` share a byte (the library's FootprintsIntersect:
    arithmetic for equal steps, else a walk over both sorted lists of runs)."""
    (a0, a_run, a_step, a_count), (b0, b_run, b_step, b_count) = a, b
    if a_count == 0 or b_count == 0:
        return False
    if a0 + (a_count - 1) * a_step + a_run <= b0 or b0 + (b_count - 1) * b_step + b_run <= a0:
        return False  # the spans are apart
    if a_count == 1 and b_count == 1:
        return True
    if a_count > 1 and b_count > 1 and a_step == b_step:
        d = b0 - a0
        k = max((-b_run - d) // a_step + 1, -(a_count - 1))
        return k <= b_count - 1 and d + k * a_step < a_run
    i = j = 0
    while i < a_count and j < b_count:
        ai, bj = a0 + i * a_step, b0 + j * b_step
        if ai + a_run <= bj:
            i = a_count if a_count == 1 else max(i + 1, (bj - a0 - a_run) // a_step + 1)
        elif bj + b_run <= ai:
            j = b_count if b_count == 1 else max(j + 1, (ai - b0 - b_run) // b_step + 1)
        else:
            return True
    return False


def _unbound(*args: Any) -> Any:
    raise AssertionError("an BoundOp is called through the Dispatcher that _dispatch.register makes")


def _zeros_like(x: Any) -> Any:
    """Zeros of ``x``'s framework, shape, dtype and device (a linear op's missing tangent)."""
    from ._namespace import array_namespace

    return array_namespace(x).zeros_like(x)


def _without_leading_ones(shape: Shape) -> Shape:
    """A shape with its leading dimensions of size 1 dropped: an input with a declared shape may
    have them (jax.vmap passes an unbatched weight as ``(1, hidden)``), as the kernels accept."""
    first = next((i for i, d in enumerate(shape) if d != 1), len(shape))
    return shape[first:] if len(shape) - first >= 1 else shape[-1:]


def check_one_device(op: BoundOp, devices: list[tuple[str, Any]]) -> None:
    """The library's refusal of arrays on several devices, for arrays it never sees (fake and
    meta tensors); ``devices``: (argument name, device) of each array given."""
    if len({device for _, device in devices}) > 1:
        raise ValueError(
            f"{op.name}: every array must be on one device; got "
            + ", ".join(f"{name} on {device}" for name, device in devices)
        )


def check_layout(arg_name: str, shape: Shape, strides: Shape, rows: bool) -> None:
    """The library's layout rule for an abstract array with element ``strides``: contiguous, or
    with ``rows``, rows of contiguous elements evenly spaced (``x[:, :hidden]``)."""
    if _is_contiguous(shape, strides) or (rows and _is_rows(shape, strides)):
        return
    got = f"got shape {_tuple_text(shape)} with element strides {_tuple_text(strides)}"
    if rows:
        raise ValueError(
            f"{arg_name} must be rows of contiguous elements: the last dimension contiguous and the "
            f"leading ones a (possibly strided) stack of rows; {got}"
        )
    raise ValueError(f"{arg_name} must be contiguous (row-major); {got}. Pass a contiguous copy")


def _is_contiguous(shape: Shape, strides: Shape) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size == 0:
            return True
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _is_rows(shape: Shape, strides: Shape) -> bool:
    if not shape or 0 in shape:
        return True
    hidden = shape[-1]
    if hidden != 1 and strides[-1] != 1:
        return False
    n_rows = 1
    for size in shape[:-1]:
        n_rows *= size
    row_stride, next_stride = hidden, -1
    for size, stride in zip(reversed(shape[:-1]), reversed(strides[:-1]), strict=True):
        if size == 1:
            continue
        if next_stride < 0:
            row_stride = stride
        elif stride != next_stride:
            return False
        next_stride = stride * size
    return n_rows == 1 or row_stride >= hidden


def _tuple_text(values: Shape) -> str:
    return str(concrete(tuple(values)))


def concrete(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` with symbolic sizes (PyTorch's under ``torch.compile(dynamic=True)``) as the
    numbers of this call, for an error message: the refusal is about this call's arrays. Only
    for messages: reading a symbolic size's number makes compiled code depend on it."""
    return tuple(_number(v) for v in values)


def _number(value: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.SymInt):
        return int(value)
    if torch is not None and isinstance(value, torch.SymFloat):
        return float(value)
    return value


def exact_types(values: tuple[Any, ...], types: tuple[type, ...]) -> bool:
    """Whether each value is of exactly its declared type (a bool is not an int here)."""
    if len(values) != len(types):
        return False
    # Every eager call runs this loop: a plain index, as making a zip, map or enumerate object
    # costs more than the loop itself.
    i = 0
    for value in values:
        if type(value) is not types[i]:
            return False
        i += 1  # noqa: SIM113
    return True


def _in_place_inputs(name: str) -> frozenset[str]:
    doc = LIB.get_function_doc(name) or ""
    for line in doc.splitlines():
        if line.startswith("In-place (the same array) allowed:"):
            pairs = line.split(":", 1)[1].split(",")
            return frozenset(pair.split("=", 1)[1].strip() for pair in pairs if "=" in pair)
    return frozenset()


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
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension(s); got shape {concrete(tuple(t.shape))}"
        )


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
            # float()/int(): a scalar torch.compile made symbolic, worded as this call's number.
            shown = float(value) if attr.type is float else int(value)
            raise ValueError(f"{name} must be {qualifier}; got {shown}")
        return value

    return bounded


def _is_number(value: Any, kind: type) -> bool:
    """``value`` is a ``numbers.Real``/``numbers.Integral`` that means a number: not a bool (a
    Real, but scaling by True is almost certainly a mistake), nor a NumPy time delta (NumPy
    registers ``timedelta64`` as an integer, so ``float()`` would drop or refuse its unit)."""
    if not isinstance(value, kind) or isinstance(value, bool):
        return False
    numpy = sys.modules.get("numpy")
    return numpy is None or not isinstance(value, numpy.timedelta64)


def _as_float(value: Any, name: str) -> float:
    if type(value) is float:  # the common case, without an ABC check
        return value
    if _is_symbolic(value, "SymFloat"):  # a scalar torch.compile made dynamic: checked as it is
        return value
    if _is_number(value, numbers.Real):
        try:
            result = float(value)
        except OverflowError:  # 2**1024, Fraction(10**400, 3)
            result = math.inf
        if math.isinf(result) and value != result:  # numpy.longdouble(1e400) rounds to inf
            raise ValueError(f"{name} is too large for a float64; got {_short(value)}")
        return result
    _reject_tracer(value, name, "Python number")
    raise TypeError(f"{name} must be a real number (int or float); got {type(value).__name__}")


def _as_int(value: Any, name: str) -> int:
    if type(value) is int:
        pass
    elif _is_symbolic(value, "SymInt"):
        return value
    elif _is_number(value, numbers.Integral):
        value = int(value)
    else:
        _reject_tracer(value, name, "Python int")
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
    _reject_tracer(value, name, "Python bool")
    raise TypeError(f"{name} must be a bool; got {type(value).__name__}")


_CONVERT: dict[type, Callable[[Any, str], Any]] = {float: _as_float, int: _as_int, bool: _as_bool}


def _is_symbolic(value: Any, kind: str) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, getattr(torch, kind))


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]}"


def _reject_tracer(value: Any, name: str, kind: str) -> None:
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} must be a concrete {kind}, not a traced JAX value: it is a "
            "compile-time attribute of the XLA call. Under jax.jit, close over it or mark it "
            "static (static_argnums)"
        )


# ---------------------------------------------------------------------------------------------
# Distributed arrays: what the sharding rules (``_torch.py``, ``_jax.py``) read from a declaration
# ---------------------------------------------------------------------------------------------
SHARDING_KINDS = ("elementwise", "rows", "reduction", None)

_PROBE_BASE = 1000  # distinct sizes for probing a declared shape rule: 1001, 1002, ...


class Sharding:
    """``spec``'s ``sharding`` kind with what its rules need, derived from the declaration.

    ``per_feature[i]``: input ``i`` holds one value per feature, the last dimension of the first
    input (its declared ``shape`` rule gives that dimension: a weight, a bias); every other input
    has the first input's shape or (``"rows"`` ops) its leading dimensions. ``own_last[i]``
    (``"rows"`` ops): input ``i`` has the first input's leading dimensions and a last dimension
    of its own size (``(..., d)`` beside ``(..., 2d)``), also used whole. Shape rules are probed
    with distinct sizes, so a new op's rules come from its declaration alone.
    """

    def __init__(self, spec: OpSpec) -> None:
        if spec.sharding not in SHARDING_KINDS:
            raise ValueError(
                f"{spec.name}: unknown sharding kind {spec.sharding!r}; expected one of {SHARDING_KINDS}"
            )
        self.spec = spec
        self.kind = spec.sharding
        self.linear = spec.linear
        probe = _probe_shape(3)
        per_feature, own_last = [], []
        for i in spec.inputs[1:]:
            shape = probe if i.shape is None else tuple(i.shape(probe))
            if self.kind == "elementwise" and shape != probe:
                raise ValueError(
                    f"{spec.name}: an elementwise op's input {i.name} must have the first input's shape"
                )
            own = len(shape) == len(probe) and shape[:-1] == probe[:-1] and shape != probe
            if self.kind == "rows" and shape not in (probe, probe[:-1], probe[-1:]) and not own:
                raise ValueError(
                    f"{spec.name}: a rows op's input {i.name} must have the first input's shape, its "
                    "leading dimensions, its last dimension, or its leading dimensions and a last "
                    "dimension of its own"
                )
            per_feature.append(shape == probe[-1:])
            own_last.append(own)
        self.per_feature = (False, *per_feature)
        self.own_last = (False, *own_last)

    def output_dims(self, ndim: int) -> list[int | None]:
        """For each output dimension, the dimension of the first input (of ``ndim`` dimensions)
        it comes from; ``None`` where it comes from none (a reduced or new dimension)."""
        probe = _probe_shape(ndim)
        inputs = [
            _Probe(probe if i.shape is None else tuple(i.shape(probe)), i.dtype) for i in self.spec.inputs
        ]
        output = self.spec.output
        if output.shape is None:
            shape = inputs[[i.name for i in self.spec.inputs].index(output.like)].shape
        else:
            shape = tuple(output.shape(*inputs))
        return [probe.index(n) if n in probe else None for n in shape]


class _Probe:
    """An array as a shape rule sees it."""

    def __init__(self, shape: Shape, dtype: str | None) -> None:
        self.shape, self.ndim, self.dtype = shape, len(shape), dtype


def _probe_shape(ndim: int) -> Shape:
    return tuple(_PROBE_BASE + 1 + d for d in range(ndim))


@functools.cache
def sharding_of(op: BoundOp) -> Sharding:
    """The sharding of ``op``'s declaration (``ValueError`` for an unknown kind or an input the
    kind cannot place), derived once."""
    return Sharding(op.spec)
