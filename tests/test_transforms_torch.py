"""Every PyTorch transformation sees every op and keeps its guarantees.

Driven by the declared ops (``scale_lib.ops.OPS``, private ops included), so an op a fork adds
is checked the same way: dispatch modes (``make_fx``, recording modes), every compile backend's
aliasing checks, ``torch.func`` transforms (``vmap``, ``jacrev``, ``jacfwd``, ``jvp``,
``functionalize``), batched reverse mode (``jacobian(vectorize=True)``,
``is_grads_batched``), forward-mode AD (declared jvps, refused up front where there is none),
and symbolic sizes and scalars under ``torch.compile``. docs/guarantees.md names these tests.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from cases import built_devices

from scale_lib._dispatch import _REGISTERED, Dispatcher
from scale_lib._spec import OpSpec
from scale_lib.ops import OPS

torch = pytest.importorskip("torch")
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

X_SHAPE = (3, 4)
EXAMPLE_ATTR = {float: 1.5, int: 1, bool: True}
CPU_OPS = [pytest.param(s, id=s.name) for s in OPS if "cpu" in built_devices(s)]
ALL_OPS = [pytest.param(s, id=s.name) for s in OPS]
FIXED_SIZE = [p for p in CPU_OPS if not p.values[0].output.allocated_by_library]
# Ops with out= and an input of the output's dtype (one that out could overlap), and ops that
# allow out to be the very same array as an input.
WITH_OUT = [p for p in FIXED_SIZE if any(i.dtype == p.values[0].output.dtype for i in p.values[0].inputs)]
IN_PLACE = [p for p in FIXED_SIZE if _REGISTERED[p.values[0].name].in_place_inputs]
DIFFERENTIABLE = [p for p in FIXED_SIZE if p.values[0].vjp is not None]


# The transforms on CUDA tensors too, where a GPU is present.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _need_device(device: str, spec: OpSpec) -> None:
    import scale_lib

    if device not in built_devices(spec):
        pytest.skip(f"{spec.name} has no {device} implementation")
    if device == "cuda" and not (torch.cuda.is_available() and scale_lib.cuda_available()):
        pytest.skip("no CUDA GPU visible to torch, or a CPU-only build")


def _inputs(
    spec: OpSpec, shape: tuple[int, ...] = X_SHAPE, seed: int = 0, dtype: Any = None, device: str = "cpu"
) -> list[Any]:
    """float64 tensors that satisfy the declaration, values in [0.5, 1.5) (positive, non-zero)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for i, inp in enumerate(spec.inputs):
        s = shape if i == 0 or inp.shape is None else tuple(inp.shape(shape))
        a = torch.from_numpy(rng.random(s) + 0.5)
        arrays.append(a.to(getattr(torch, inp.dtype) if inp.dtype else (dtype or torch.float64)).to(device))
    return arrays


def _attrs(spec: OpSpec) -> tuple[Any, ...]:
    return tuple(EXAMPLE_ATTR[a.type] for a in spec.attrs)


def _call(spec: OpSpec, *inputs: Any, out: Any = None) -> Any:
    """The op as its public function calls it (private ops included)."""
    return Dispatcher(_REGISTERED[spec.name]).call(tuple(inputs), _attrs(spec), out)


def _op_name(spec: OpSpec) -> str:
    return f"scale_lib.{spec.name}"


# ---------------------------------------------------------------------------------------------
# Dispatch modes and tracers: the op is what they see, never its result as a constant
# ---------------------------------------------------------------------------------------------
class _Recording(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _FunctionRecording(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", ALL_OPS)
def test_a_dispatch_mode_records_every_op(spec: OpSpec, device: str) -> None:
    _need_device(device, spec)
    inputs = _inputs(spec, device=device)
    expected = _call(spec, *inputs)
    with _Recording() as mode:
        result = _call(spec, *inputs)
    assert f"{_op_name(spec)}.default" in mode.ops, mode.ops
    torch.testing.assert_close(result, expected)
    if spec.output.allocated_by_library:
        return
    out = torch.empty_like(expected)
    with _Recording() as mode:
        _call(spec, *inputs, out=out)
    assert f"{_op_name(spec)}_out.default" in mode.ops, mode.ops
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("spec", CPU_OPS)
def test_a_torch_function_mode_records_every_op(spec: OpSpec) -> None:
    inputs = _inputs(spec)
    expected = _call(spec, *inputs)
    with _FunctionRecording() as mode:
        result = _call(spec, *inputs)
    assert any(_op_name(spec) in op for op in mode.ops), mode.ops
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("tracing_mode", ["real", "symbolic"])
@pytest.mark.parametrize("spec", FIXED_SIZE)
def test_make_fx_records_the_op_not_its_result(spec: OpSpec, tracing_mode: str) -> None:
    graph = make_fx(lambda *a: _call(spec, *a), tracing_mode=tracing_mode)(*_inputs(spec))
    assert _op_name(spec).replace(".", "_") in graph.code or _op_name(spec) in graph.code, graph.code
    other = _inputs(spec, seed=1)
    torch.testing.assert_close(graph(*other), _call(spec, *other))


# ---------------------------------------------------------------------------------------------
# out= aliasing under every compile backend
# ---------------------------------------------------------------------------------------------
# Every backend PyTorch ships; cudagraphs only for CUDA tensors.
BACKENDS = [
    pytest.param(
        device, backend, id=f"{device}-{backend}", marks=[pytest.mark.gpu] if device == "cuda" else []
    )
    for device, backends in (
        ("cpu", ("eager", "aot_eager", "inductor")),
        ("cuda", ("eager", "aot_eager", "inductor", "cudagraphs")),
    )
    for backend in backends
]


@pytest.mark.parametrize(("device", "backend"), BACKENDS)
@pytest.mark.parametrize("spec", WITH_OUT)
def test_out_overlapping_an_input_is_refused_by_every_backend(
    spec: OpSpec, device: str, backend: str
) -> None:
    _need_device(device, spec)
    torch._dynamo.reset()
    inputs = _inputs(spec, dtype=torch.float32, device=device)
    like = _call(spec, *inputs)
    refused = 0
    for i, t in enumerate(inputs):
        if t is None or t.dtype != like.dtype:
            continue
        # out starts at the input's last element: they share exactly one element.
        buffer = torch.full((t.numel() + like.numel(),), 0.75, dtype=like.dtype, device=device)
        arr = buffer[: t.numel()].view(t.shape)
        arr.copy_(t)
        out = buffer[t.numel() - 1 : t.numel() - 1 + like.numel()].view(like.shape)
        args = [*inputs[:i], arr, *inputs[i + 1 :]]
        before = buffer.clone()
        compiled = torch.compile(lambda *a, o: _call(spec, *a, out=o), backend=backend, fullgraph=True)
        # The library's ValueError; torch.compile reports a refusal raised while it traces as
        # its own error, carrying the library's message.
        with pytest.raises((ValueError, RuntimeError), match="overlap in memory"):
            compiled(*args, o=out)
        torch.testing.assert_close(buffer, before, msg=f"out overlapping {spec.inputs[i].name} was written")
        refused += 1
    assert refused, f"{spec.name}: no input of out's dtype"


@pytest.mark.parametrize(("device", "backend"), BACKENDS)
@pytest.mark.parametrize("spec", IN_PLACE)
def test_in_place_out_works_with_every_backend(spec: OpSpec, device: str, backend: str) -> None:
    _need_device(device, spec)
    op = _REGISTERED[spec.name]
    torch._dynamo.reset()
    inputs = _inputs(spec, dtype=torch.float32, device=device)
    expected = _call(spec, *inputs)
    i = op.input_names.index(sorted(op.in_place_inputs)[0])
    target = inputs[i].clone()
    args = [*inputs[:i], target, *inputs[i + 1 :]]
    compiled = torch.compile(lambda *a, o: _call(spec, *a, out=o), backend=backend, fullgraph=True)
    compiled(*args, o=target)
    torch.testing.assert_close(target, expected)


# ---------------------------------------------------------------------------------------------
# torch.func: vmap, functionalize, batched reverse mode
# ---------------------------------------------------------------------------------------------
def _batched(
    spec: OpSpec, batch: int, which: tuple[bool, ...], device: str = "cpu"
) -> tuple[list[Any], tuple[Any, ...]]:
    """Inputs with a batch of ``batch`` in dimension 0 where ``which`` says, and in_dims."""
    per_example = [_inputs(spec, seed=s, device=device) for s in range(batch)]
    inputs = [
        torch.stack([e[i] for e in per_example]) if b else per_example[0][i] for i, b in enumerate(which)
    ]
    return inputs, tuple(0 if b else None for b in which)


def _loop(spec: OpSpec, inputs: list[Any], in_dims: tuple[Any, ...], batch: int) -> Any:
    return torch.stack(
        [
            _call(spec, *(t[k] if d == 0 else t for t, d in zip(inputs, in_dims, strict=True)))
            for k in range(batch)
        ]
    )


BATCHABLE = [pytest.param(s, id=s.name) for s in OPS if not s.output.allocated_by_library]


def _each_and_all(n: int) -> set[tuple[bool, ...]]:
    """Which of ``n`` inputs are batched: each alone, and all."""
    return {tuple(i == j for i in range(n)) for j in range(n)} | {(True,) * n}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", BATCHABLE)
def test_vmap_over_any_inputs_matches_a_loop(spec: OpSpec, device: str) -> None:
    _need_device(device, spec)
    for which in _each_and_all(len(spec.inputs)):
        inputs, in_dims = _batched(spec, 3, which, device)
        result = torch.func.vmap(lambda *a: _call(spec, *a), in_dims=in_dims)(*inputs)
        expected = _loop(spec, inputs, in_dims, 3)
        torch.testing.assert_close(result, expected)
        # The batch in the last dimension: each example a strided view
        last = [t.movedim(0, -1).contiguous() if d == 0 else t for t, d in zip(inputs, in_dims, strict=True)]
        in_last = tuple(-1 if d == 0 else None for d in in_dims)
        torch.testing.assert_close(
            torch.func.vmap(lambda *a: _call(spec, *a), in_dims=in_last)(*last), expected
        )
        # A batch of 0 has no example to run (a per-example loop would stack nothing).
        empty = [t[:0] if d == 0 else t for t, d in zip(inputs, in_dims, strict=True)]
        result = torch.func.vmap(lambda *a: _call(spec, *a), in_dims=in_dims)(*empty)
        assert (result.shape, result.dtype, result.device) == (
            (0, *expected.shape[1:]),
            expected.dtype,
            expected.device,
        ), which
    if len(spec.inputs) > 1:  # the device check, which a call on one example would make
        inputs, _ = _batched(spec, 3, (True,) * len(spec.inputs), device)
        inputs = [t[:0] for t in inputs]
        inputs[-1] = inputs[-1].to("meta")
        with pytest.raises(ValueError, match="every array must be on one device"):
            torch.func.vmap(lambda *a: _call(spec, *a))(*inputs)


@pytest.mark.parametrize("spec", [p for p in CPU_OPS if p.values[0].output.allocated_by_library])
def test_vmap_of_a_data_dependent_size_is_a_type_error(spec: OpSpec) -> None:
    inputs, in_dims = _batched(spec, 2, (True,) * len(spec.inputs))
    with pytest.raises(TypeError, match=f"{spec.name} cannot be batched"):
        torch.func.vmap(lambda *a: _call(spec, *a), in_dims=in_dims)(*inputs)


@pytest.mark.parametrize("spec", FIXED_SIZE)
def test_functionalize_runs_the_op(spec: OpSpec) -> None:
    inputs = _inputs(spec)
    result = torch.func.functionalize(lambda *a: _call(spec, *a))(*inputs)
    torch.testing.assert_close(result, _call(spec, *inputs))


def _jacobian_reference(spec: OpSpec, inputs: list[Any]) -> Any:
    """d op / d x by reverse mode, one output element at a time (no batching)."""
    return torch.autograd.functional.jacobian(lambda x: _call(spec, x, *inputs[1:]), inputs[0])


def _in(spec: OpSpec, inputs: list[Any], i: int) -> Any:
    """The op as a function of its input ``i``, the others fixed."""
    return lambda t: _call(spec, *inputs[:i], t, *inputs[i + 1 :])


@pytest.mark.parametrize("shape", [(4,), X_SHAPE], ids=str)
@pytest.mark.parametrize("spec", DIFFERENTIABLE)
def test_batched_reverse_mode_matches_one_row_at_a_time(spec: OpSpec, shape: tuple[int, ...]) -> None:
    inputs = _inputs(spec, shape)
    for i in range(len(inputs)):  # in each input: a 1-D x's weight gradient sums one row
        f = _in(spec, inputs, i)
        expected = torch.autograd.functional.jacobian(f, inputs[i])  # one output element at a time
        torch.testing.assert_close(torch.autograd.functional.jacobian(f, inputs[i], vectorize=True), expected)
        torch.testing.assert_close(torch.func.jacrev(f)(inputs[i]), expected)
    inputs = _inputs(spec)
    f = _in(spec, inputs, 0)
    # is_grads_batched: one backward per batch element of the incoming gradient.
    x = inputs[0].clone().requires_grad_(True)
    y = f(x)
    grads = torch.randn(4, *y.shape, dtype=y.dtype)
    (batched,) = torch.autograd.grad(y, x, grads, is_grads_batched=True, retain_graph=True)
    for k in range(4):
        (one,) = torch.autograd.grad(y, x, grads[k], retain_graph=True)
        torch.testing.assert_close(batched[k], one)


# ---------------------------------------------------------------------------------------------
# Forward mode: declared jvps (and linear ops) work; the others are refused up front
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", DIFFERENTIABLE)
def test_forward_mode_matches_reverse_mode_or_is_refused(spec: OpSpec) -> None:
    import torch.autograd.forward_ad as fwad

    op = _REGISTERED[spec.name]
    inputs = _inputs(spec)
    tangents = _inputs(spec, seed=5)
    f = lambda *a: _call(spec, *a)  # noqa: E731
    if not op.has_jvp:
        with pytest.raises(TypeError, match=f"{spec.name} has no forward-mode derivative"):
            torch.func.jvp(f, tuple(inputs), tuple(tangents))
        with fwad.dual_level(), pytest.raises(TypeError, match=f"{spec.name} has no forward-mode"):
            f(fwad.make_dual(inputs[0], tangents[0]), *inputs[1:])
        return
    # The reference: J @ t from reverse mode, input by input.
    jacobians = torch.autograd.functional.jacobian(f, tuple(inputs))
    out = f(*inputs)
    expected = sum(
        (j.reshape(out.numel(), -1) @ t.reshape(-1)).reshape(out.shape)
        for j, t in zip(jacobians, tangents, strict=True)
    )
    primal, tangent = torch.func.jvp(f, tuple(inputs), tuple(tangents))
    torch.testing.assert_close(primal, out)
    torch.testing.assert_close(tangent, expected)
    with fwad.dual_level():
        dual = f(*(fwad.make_dual(x, t) for x, t in zip(inputs, tangents, strict=True)))
        torch.testing.assert_close(fwad.unpack_dual(dual).tangent, expected)
    g = lambda x: _call(spec, x, *inputs[1:])  # noqa: E731
    torch.testing.assert_close(torch.func.jacfwd(g)(inputs[0]), _jacobian_reference(spec, inputs))


@pytest.mark.parametrize("spec", DIFFERENTIABLE)
def test_second_order_through_torch_func_is_right_or_refused(spec: OpSpec) -> None:
    inputs = _inputs(spec)
    f = lambda x: _call(spec, x, *inputs[1:]).sum()  # noqa: E731
    refusal = None
    try:
        hessian = torch.func.hessian(f)(inputs[0])
    except TypeError as err:
        refusal = str(err)
    if refusal is not None:
        # An op of the derivative declares no derivative of its own: named, never a wrong number.
        assert re.search(r"has no (forward-mode derivative|gradient)", refusal), refusal
        return
    expected = torch.autograd.functional.hessian(f, inputs[0])
    torch.testing.assert_close(hessian, expected)


def test_out_under_a_transform_is_a_type_error() -> None:
    spec = FIXED_SIZE[0].values[0]
    inputs = _inputs(spec)
    out = torch.empty_like(_call(spec, *inputs))
    with pytest.raises(TypeError, match=r"out= is not supported under torch\.func transforms"):
        torch.func.vmap(lambda x: _call(spec, x, *inputs[1:], out=out[0]))(inputs[0][None])


# ---------------------------------------------------------------------------------------------
# Symbolic sizes and scalars under torch.compile keep the library's messages
# ---------------------------------------------------------------------------------------------
BOUNDED = [p for p in FIXED_SIZE if any(a.minimum is not None for a in p.values[0].attrs)]


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("spec", BOUNDED)
def test_a_scalar_made_dynamic_is_checked_with_the_librarys_message(spec: OpSpec, fullgraph: bool) -> None:
    torch._dynamo.reset()
    k = next(i for i, a in enumerate(spec.attrs) if a.minimum is not None)
    inputs = _inputs(spec)
    op = Dispatcher(_REGISTERED[spec.name])

    def f(*arrays: Any, value: float) -> Any:
        attrs = list(_attrs(spec))
        attrs[k] = value
        return op.call(arrays, tuple(attrs))

    compiled = torch.compile(f, backend="eager", fullgraph=fullgraph, dynamic=True)
    for value in (0.5, 0.25, 0.125):  # recompiles make the scalar symbolic
        compiled(*inputs, value=value)
    with pytest.raises((ValueError, RuntimeError), match=rf"{spec.attrs[k].name} must be .*; got -1\.0"):
        compiled(*inputs, value=-1.0)


@pytest.mark.parametrize("spec", FIXED_SIZE)
def test_symbolic_sizes_are_worded_as_numbers(spec: OpSpec) -> None:
    torch._dynamo.reset()
    inputs = _inputs(spec)
    bad = [inputs[0].to(torch.int32), *inputs[1:]]  # a refusal every op has: x's dtype
    compiled = torch.compile(lambda *a: _call(spec, *a), backend="eager", dynamic=True)
    with pytest.raises((TypeError, RuntimeError)) as info:
        compiled(*bad)
    assert "unsupported dtype int32" in str(info.value)
    # Shape refusals word this call's sizes, not PyTorch's symbols (s0, s33, ...).
    for i, inp in enumerate(spec.inputs[1:], start=1):
        if inp.shape is None and inputs[i] is not None:
            wrong = [*inputs[:i], inputs[i][..., :-1].contiguous(), *inputs[i + 1 :]]
            with pytest.raises((ValueError, RuntimeError)) as info:
                compiled(*wrong)
            message = str(info.value)
            assert "shape" in message and not re.search(r"\bs\d+\b", message), message
