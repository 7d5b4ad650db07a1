"""PyTorch: custom ops, autograd, torch.compile, torch.export, opcheck."""

from __future__ import annotations

import numpy as np
import pytest
from backends import Backend, backend_params
from cases import declared_cases
from reference import assert_close, random_data, scale_reference

import scale_lib
from scale_lib.ops import OPS

torch = pytest.importorskip("torch")

TORCH_BACKENDS = [p for p in backend_params() if p.values[0].framework == "torch"]
NAN = float("nan")


def _randn(backend: Backend, *shape, dtype="float32", requires_grad=False):
    t = backend.asarray(random_data(shape, seed=sum(shape) + 11), dtype)
    return t.requires_grad_(requires_grad)


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_custom_ops_are_usable_directly(backend: Backend) -> None:
    x = _randn(backend, 3, 5)
    y = torch.ops.scale_lib.scale(x, 2.5)
    assert_close(backend.to_numpy(y), scale_reference(backend.to_numpy(x), 2.5), "float32")
    out = torch.full_like(x, NAN)
    assert torch.ops.scale_lib.scale_out(out, x, -1.0) is None
    assert_close(backend.to_numpy(out), -backend.to_numpy(x), "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_opcheck(backend: Backend, dtype: str) -> None:
    for shape in [(0,), (1,), (7, 3), (2, 3, 4)]:
        x = _randn(backend, *shape, dtype=dtype, requires_grad=dtype in ("float32", "float64"))
        torch.library.opcheck(torch.ops.scale_lib.scale.default, (x, 1.5))
        out = torch.empty(shape, device=backend.device, dtype=getattr(torch, dtype))
        torch.library.opcheck(torch.ops.scale_lib.scale_out.default, (out, x.detach(), 1.5))


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_gradcheck(backend: Backend) -> None:
    x = _randn(backend, 4, 3, dtype="float64", requires_grad=True)
    fn = lambda v: scale_lib.scale(v, -1.75)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_backward_through_the_public_api(backend: Backend) -> None:
    x = _randn(backend, 100, requires_grad=True)
    y = scale_lib.scale(x, 3.0)
    assert "scale_lib_scale" in y.grad_fn.name()  # the op's autograd function: autograd saw it
    # sum's gradient reaches scale as an expanded (stride-0) view: must still work
    (y.sum() + (scale_lib.scale(x, 0.5) * 2).sum()).backward()
    assert_close(backend.to_numpy(x.grad), np.full(100, 3.0 + 1.0), "float32")


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_no_grad_and_inference_mode_take_the_direct_path(backend: Backend) -> None:
    x = _randn(backend, 10, requires_grad=True)
    with torch.no_grad():
        y = scale_lib.scale(x, 2.0)
    assert y.grad_fn is None and not y.requires_grad
    with torch.inference_mode():
        z = scale_lib.scale(_randn(backend, 10), 2.0)
    assert z.is_inference()


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_module_weights_take_the_direct_path_without_grad(backend: Backend) -> None:
    # A module's weight is an nn.Parameter: under no_grad (inference) the call goes straight to
    # the library, with grad enabled through the op's autograd function, so that autograd sees it.
    from scale_lib._adapter import AUTOGRAD, LIBRARY
    from scale_lib._torch import ADAPTER
    from scale_lib.ops.scale import _scale

    weight = torch.nn.Parameter(_randn(backend, 8))
    with torch.no_grad():
        assert ADAPTER.route(_scale.op, (weight,), None) == LIBRARY
        y = scale_lib.scale(weight, 2.0)
    assert not y.requires_grad
    assert ADAPTER.route(_scale.op, (weight,), None) == AUTOGRAD
    assert_close(backend.to_numpy(y), backend.to_numpy(weight.detach() * 2.0), "float32")
    scale_lib.scale(weight, 2.0).sum().backward()
    assert weight.grad is not None and weight.grad.shape == (8,)


_DIFFERENTIABLE = {spec.name for spec in OPS if spec.public and spec.vjp is not None}


@pytest.mark.parametrize(
    "case",
    [c for c in declared_cases("cpu") if len(c.arrays) > 1 and c.name in _DIFFERENTIABLE],
    ids=lambda c: c.name,
)
def test_module_weights_beside_a_plain_input_take_the_direct_path_without_grad(case) -> None:
    # An op's other inputs as a module's weights (nn.Parameter) beside a plain x: under no_grad
    # straight to the library, with grad through the op's autograd function, with a gradient for
    # each weight.
    from scale_lib._adapter import AUTOGRAD, LIBRARY
    from scale_lib._dispatch import _REGISTERED
    from scale_lib._torch import ADAPTER

    arrays = case.numpy_inputs(4)
    x, *rest = (torch.tensor(a, dtype=torch.float32) for a in arrays.values())
    weights = [torch.nn.Parameter(t) for t in rest]
    op = _REGISTERED[case.name]
    with torch.no_grad():
        assert ADAPTER.route(op, (x, *weights), None) == LIBRARY
        y = case.call(x, *weights)
    assert not y.requires_grad
    assert ADAPTER.route(op, (x, *weights), None) == AUTOGRAD
    expected = case.reference(*(a.astype(np.float32).astype(np.float64) for a in arrays.values()))
    assert_close(y.numpy(), np.asarray(expected), "float32", reduction=case.reduction)
    case.call(x, *weights).sum().backward()
    for weight in weights:
        assert weight.grad is not None and weight.grad.shape == weight.shape


def _checkpointed(reentrant: bool):
    from torch.utils.checkpoint import checkpoint

    return lambda fn, *a: checkpoint(fn, *a, use_reentrant=reentrant)


# A training job's autograd machinery around a call: each must give the plain call's gradients.
_TRAINING = {
    "checkpoint": _checkpointed(False),
    "reentrant checkpoint": _checkpointed(True),
    "saved tensors on the CPU": lambda fn, *a: _within(torch.autograd.graph.save_on_cpu(), fn, *a),
    "anomaly detection": lambda fn, *a: _within(torch.autograd.detect_anomaly(), fn, *a),
    "retain_graph, twice": None,  # backward twice through one graph
}


def _within(context, fn, *args):
    with context:
        return fn(*args)


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled:UserWarning")
@pytest.mark.parametrize("training", list(_TRAINING))
@pytest.mark.parametrize(
    "case", [c for c in declared_cases("cpu") if c.name in _DIFFERENTIABLE], ids=lambda c: c.name
)
def test_training_machinery_gives_the_plain_gradients(case, training: str) -> None:
    # Eager calls on tensors that require grad apply the op's autograd function directly (not
    # through the dispatcher): activation checkpointing, saved-tensor hooks and anomaly mode
    # must see it as they see the custom op.
    arrays = case.numpy_inputs(5)
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays.values()]
    weight = torch.tensor(np.random.default_rng(6).standard_normal(case.output_shape()))

    def loss(*inputs):
        return (case.call(*inputs) * weight).sum()

    def gradients(total, backwards: int = 1):
        for leaf in leaves:
            leaf.grad = None
        for i in range(backwards):
            total.backward(retain_graph=i + 1 < backwards)
        return [leaf.grad for leaf in leaves]

    expected = gradients(loss(*leaves))
    if _TRAINING[training] is None:
        got = [g / 2 for g in gradients(loss(*leaves), backwards=2)]  # accumulated twice
    else:
        got = gradients(_TRAINING[training](loss, *leaves))
    for name, e, g in zip(arrays, expected, got, strict=True):
        assert g is not None and torch.equal(e, g), f"{case.name}: the gradient of {name} differs"


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_out_with_autograd_is_rejected(backend: Backend) -> None:
    x = _randn(backend, 4, requires_grad=True)
    out = torch.full((4,), NAN, device=backend.device)
    with pytest.raises(ValueError, match="out= does not support autograd, and an input requires grad"):
        scale_lib.scale(x, 2.0, out=out)
    assert torch.isnan(out).all()


def test_meta_tensors_use_the_fake_implementation() -> None:
    y = scale_lib.scale(torch.empty(3, 4, device="meta", dtype=torch.float16), 2.0)
    assert y.device.type == "meta" and y.shape == (3, 4) and y.dtype == torch.float16


# [torch_compile.begin]
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_torch_compile_fullgraph(backend: Backend, dynamic: bool) -> None:
    torch._dynamo.reset()

    def f(v):
        return scale_lib.scale(v * 2, 1.5) + 1

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for n in (8, 33):
        x = _randn(backend, n)
        torch.testing.assert_close(compiled(x), f(x))


# [torch_compile.end]


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_torch_compile_out_and_backward(backend: Backend) -> None:
    torch._dynamo.reset()
    x = _randn(backend, 16)
    out = torch.full_like(x, NAN)
    torch.compile(lambda v, o: scale_lib.scale(v, -2.0, out=o), fullgraph=True)(x, out)
    torch.testing.assert_close(out, x * -2.0)

    xg = _randn(backend, 16, requires_grad=True)
    loss = torch.compile(lambda v: scale_lib.scale(v, 5.0).square().sum(), fullgraph=True)(xg)
    loss.backward()
    torch.testing.assert_close(xg.grad, 2 * 25.0 * xg.detach())


class _AnotherArrayType:
    pass


@pytest.mark.parametrize("case", [c for c in declared_cases("cpu") if c.jittable], ids=lambda c: c.name)
def test_compiled_calls_do_not_depend_on_the_librarys_registries(case) -> None:
    # Compiled code re-checks, on every call, what the traced Python read (dynamo's guards). The
    # eager route's registries change as a process runs (a new array type, a framework imported):
    # were they read while tracing, each change would recompile, and every call would pay for
    # checking them.
    from scale_lib import _adapter, _numpy

    compiles = []

    def count_compiles(gm, example_inputs):
        compiles.append(gm)
        return gm.forward

    torch._dynamo.reset()
    arrays = [torch.from_numpy(a) for a in case.numpy_inputs(seed=3).values()]
    compiled = torch.compile(lambda *a: case.call(*a), backend=count_compiles, fullgraph=True)
    expected = case.call(*arrays)
    torch.testing.assert_close(compiled(*arrays), expected)
    _adapter._BY_TYPE[_AnotherArrayType] = _numpy.ADAPTER
    try:
        torch.testing.assert_close(compiled(*arrays), expected)
    finally:
        del _adapter._BY_TYPE[_AnotherArrayType]
    assert len(compiles) == 1


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph-breaks", "fullgraph"])
@pytest.mark.parametrize("case", declared_cases("cpu"), ids=lambda c: c.name)
def test_torch_compile_with_and_without_graph_breaks_gives_the_eager_result(case, fullgraph: bool) -> None:
    # Without fullgraph, dynamo breaks the graph where an op's result size depends on the data
    # (the fake implementation's signal for it must reach dynamo); with it, the op is captured.
    torch._dynamo.reset()
    arrays = [torch.from_numpy(a) for a in case.numpy_inputs(seed=5).values()]
    compiled = torch.compile(lambda *a: case.call(*a) * 2, backend="eager", fullgraph=fullgraph)
    torch.testing.assert_close(compiled(*arrays), case.call(*arrays) * 2)


def test_torch_export_records_the_custom_op() -> None:
    class Model(torch.nn.Module):
        def forward(self, v):
            return scale_lib.scale(v, 3.0) + 1

    program = torch.export.export(Model(), (torch.randn(4),))
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert torch.ops.scale_lib.scale.default in targets
    x = torch.randn(4)
    torch.testing.assert_close(program.module()(x), x * 3 + 1)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")
@pytest.mark.parametrize("case", declared_cases(), ids=lambda c: c.name)
@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_jit_trace_records_the_op_not_its_result(backend: Backend, case) -> None:
    # torch.jit.trace keeps what PyTorch's dispatcher runs: a call that went around it would be
    # traced as the constant it returned for the example inputs.
    if backend.device not in case.devices:
        pytest.skip(f"{case.name} has no {backend.device} kernel")
    example = [backend.asarray(a, "float64") for a in case.numpy_inputs(1).values()]
    fresh = case.numpy_inputs(2)
    traced = torch.jit.trace(lambda *arrays: case.call(*arrays), tuple(example), check_trace=False)
    result = traced(*[backend.asarray(a, "float64") for a in fresh.values()])
    expected = case.reference(*fresh.values())
    assert_close(backend.to_numpy(result), np.asarray(expected), "float64", reduction=case.reduction)


@pytest.mark.parametrize("case", declared_cases("cpu"), ids=lambda c: c.name)
def test_compiled_refusals_carry_the_librarys_message(case) -> None:
    # Under torch.compile the checks run in the fake implementation while PyTorch traces, and
    # PyTorch reports a failure there as torch._dynamo.exc.TorchRuntimeError (a RuntimeError)
    # with the library's message in it (docs/guarantees.md says so).
    arrays = [torch.tensor(a, dtype=torch.float32) for a in case.numpy_inputs(3).values()]
    bad = [arrays[0].to(torch.int32), *arrays[1:]]
    with pytest.raises(TypeError, match=f"{case.arrays[0]} has unsupported dtype int32"):
        case.call(*bad)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: case.call(*a), fullgraph=True)
    with pytest.raises(
        torch._dynamo.exc.TorchRuntimeError, match=f"{case.arrays[0]} has unsupported dtype int32"
    ):
        compiled(*bad)


_SHAPED = [
    (c, i)
    for c in declared_cases("cpu")
    for i, spec in enumerate(next(s for s in OPS if s.name == c.name).inputs)
    if spec.shape is not None and i < len(c.arrays)
]


@pytest.mark.parametrize(("case", "index"), _SHAPED, ids=lambda v: getattr(v, "name", str(v)))
def test_a_declared_shape_with_leading_ones_is_accepted_on_every_path(case, index: int) -> None:
    # (1, hidden) for a (hidden,) weight: what jax.vmap passes the kernels, so they accept it;
    # then eager calls, autograd (the gradient in the input's own shape) and torch.compile must
    # accept it as well, with the results of the declared shape.
    data = [torch.tensor(a, dtype=torch.float64) for a in case.numpy_inputs(4).values()]
    plain = [t.clone().requires_grad_() for t in data]
    lifted = [t.clone().requires_grad_() for t in data]
    lifted[index] = data[index].reshape(1, *data[index].shape).clone().requires_grad_()
    expected = case.call(*plain)
    result = case.call(*lifted)
    torch.testing.assert_close(result, expected)
    expected.sum().backward()
    result.sum().backward()
    assert lifted[index].grad.shape == lifted[index].shape
    torch.testing.assert_close(lifted[index].grad.reshape(plain[index].shape), plain[index].grad)
    compiled = torch.compile(lambda *a: case.call(*a), fullgraph=True)
    torch.testing.assert_close(compiled(*[t.detach() for t in lifted]), expected.detach())
