"""Hostile input, driven by the declared ops (``scale_lib.ops.OPS``): every op, and every op a
fork adds, gets these cases from its declaration alone. Arguments are built from each
``OpSpec``: inputs from their declared dtype and shape rules, scalars from their declared types.

Each case is a correct result or a TypeError/ValueError naming the argument; never a crash, a
silent wrong answer, a stray write, a write autograd does not see, or a foreign exception. Cases
that could crash the process run in a subprocess.

Tests whose names end in ``_library_check`` exercise checks that the compiled library makes
(null data pointers, overlap between every output and every input): they pass once the library
makes them.
"""

from __future__ import annotations

import fractions
import inspect
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import numpy as np
import pytest
from backends import _module
from cases import built_devices, jax_device_for

import scale_lib
from scale_lib._dispatch import _REGISTERED, Dispatcher
from scale_lib._spec import OpSpec
from scale_lib.ops import OPS

X_SHAPE = (4, 8)
EXAMPLE_ATTR = {float: 1.5, int: 1, bool: True}


# ---------------------------------------------------------------------------------------------
# Example arguments from a declaration
# ---------------------------------------------------------------------------------------------
def input_shape(spec: OpSpec, i: int, x_shape: tuple[int, ...] = X_SHAPE) -> tuple[int, ...]:
    rule = spec.inputs[i].shape
    return x_shape if i == 0 or rule is None else tuple(rule(x_shape))


def example(spec: OpSpec, x_shape: tuple[int, ...] = X_SHAPE, seed: int = 0) -> list[np.ndarray]:
    """NumPy inputs that satisfy the declaration: float32 unless an input declares its dtype,
    values in [0.5, 1.5) (non-zero, positive)."""
    rng = np.random.default_rng(seed)
    return [
        (rng.random(input_shape(spec, i, x_shape)) + 0.5).astype(inp.dtype or "float32")
        for i, inp in enumerate(spec.inputs)
    ]


def attrs_of(spec: OpSpec) -> tuple[Any, ...]:
    return tuple(EXAMPLE_ATTR[a.type] for a in spec.attrs)


def call(spec: OpSpec, inputs: list[Any], attrs: tuple[Any, ...] | None = None, out: Any = None) -> Any:
    """The op as its public function calls it (private ops included)."""
    attrs = attrs_of(spec) if attrs is None else attrs
    return Dispatcher(_REGISTERED[spec.name]).call(tuple(inputs), attrs, out)


def public_call(spec: OpSpec, inputs: list[Any], out: Any = None) -> Any:
    fn = getattr(scale_lib, spec.name)
    kwargs = {} if out is None else {"out": out}
    return fn(*inputs, *attrs_of(spec), **kwargs)


def has_out(spec: OpSpec) -> bool:
    return not spec.output.allocated_by_library


def ops(where: Any = None, device: str | None = "cpu") -> list[Any]:
    """The declared ops ``where`` selects that run on ``device`` (where the test's arrays are; None
    for tests that take the device as a parameter and check it with _need_device)."""
    return [
        pytest.param(s, id=s.name)
        for s in OPS
        if (device is None or device in built_devices(s)) and (where is None or where(s))
    ]


# The ops that take CPU arrays, for tests that loop over the declared ops themselves.
CPU_OPS = [s for s in OPS if "cpu" in built_devices(s)]


def public_has_out(spec: OpSpec) -> bool:
    return spec.public and "out" in inspect.signature(getattr(scale_lib, spec.name)).parameters


def _need(name: str) -> Any:
    mod = _module(name)
    if mod is None:
        pytest.skip(f"{name} is not installed")
    return mod


def _run_isolated(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


# The torch cases that matter most on a GPU run on CUDA tensors too where a GPU is present.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _need_device(device: str, spec: OpSpec | None = None) -> None:
    torch = _need("torch")
    if spec is not None and device not in built_devices(spec):
        pytest.skip(f"{spec.name} has no {device} implementation")
    if device == "cuda" and not (torch.cuda.is_available() and scale_lib.cuda_available()):
        pytest.skip("no CUDA GPU visible to torch, or a CPU-only build")


# ---------------------------------------------------------------------------------------------
# 1. Freed storage: a null data pointer with elements (FSDP frees storage between steps)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", ops(device=None))
def test_freed_torch_storage_is_a_value_error_library_check(spec: OpSpec, device: str) -> None:
    _need("torch")
    _need_device(device, spec)
    child = _run_isolated(
        f"""
        import numpy as np, torch, scale_lib
        from scale_lib._dispatch import _REGISTERED, Dispatcher
        from scale_lib.ops import OPS
        spec = next(s for s in OPS if s.name == {spec.name!r})
        rng = np.random.default_rng(0)
        def inputs():
            shapes = [(4, 8) if i == 0 or s.shape is None else tuple(s.shape((4, 8)))
                      for i, s in enumerate(spec.inputs)]
            return [torch.from_numpy((rng.random(sh) + 0.5).astype(s.dtype or "float32")).to({device!r})
                    for sh, s in zip(shapes, spec.inputs)]
        attrs = tuple({{float: 1.5, int: 1, bool: True}}[a.type] for a in spec.attrs)
        def freed(t):
            t = t.clone()  # storage of its own, resizable
            t.untyped_storage().resize_(0)
            assert t.data_ptr() == 0 and t.numel() > 0
            return t
        op = Dispatcher(_REGISTERED[spec.name])
        for i, s in enumerate(spec.inputs):
            args = inputs()
            args[i] = freed(args[i])
            try:
                op.call(tuple(args), attrs)
            except ValueError as e:
                assert s.name in str(e), e
            else:
                raise SystemExit(f"no error for freed {{s.name}}")
            if not spec.output.allocated_by_library:  # the bare ABI
                args = inputs()
                out = torch.empty_like(args[0]) if spec.output.shape is None else None
                if out is not None:
                    args[i] = freed(args[i])
                    try:
                        getattr(scale_lib.lib, spec.name)(out, *args, *attrs)
                    except ValueError as e:
                        assert s.name in str(e), e
                    else:
                        raise SystemExit(f"bare ABI: no error for freed {{s.name}}")
        if not spec.output.allocated_by_library and spec.output.shape is None:
            args = inputs()
            out = freed(torch.empty_like(args[0]))
            try:
                op.call(tuple(args), attrs, out)
            except ValueError as e:  # named as the binding names its output
                output_name = scale_lib.lib.get_function_doc(spec.name).split("(", 1)[1].split(",")[0]
                assert output_name.strip() in str(e), e
            else:
                raise SystemExit("no error for freed out")
        print("ok")
        """
    )
    assert child.returncode == 0 and child.stdout.split()[-1:] == ["ok"], child.stdout + child.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# 2. Silent wrong answers (PyTorch)
# ---------------------------------------------------------------------------------------------
def _torch_inputs(spec: OpSpec, seed: int = 0, device: str = "cpu") -> list[Any]:
    torch = _need("torch")
    return [torch.from_numpy(a).to(device) for a in example(spec, seed=seed)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", ops(device=None))
def test_torch_negative_bit_inputs_are_resolved(spec: OpSpec, device: str) -> None:
    torch = _need("torch")
    _need_device(device, spec)
    inputs = _torch_inputs(spec, device=device)
    expected = call(spec, inputs)
    for i in range(len(inputs)):
        negated = torch._neg_view(-inputs[i])  # the same values, read through the negative bit
        assert negated.is_neg()
        got = call(spec, [*inputs[:i], negated, *inputs[i + 1 :]])
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # x.conj().imag: a real view with the negative bit set
    c = torch.complex(torch.zeros_like(inputs[0]), -inputs[0])
    imag = c.conj().imag
    assert imag.is_neg()
    torch.testing.assert_close(call(spec, [imag, *inputs[1:]]), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", ops(has_out, device=None))
def test_torch_negative_bit_out_is_refused(spec: OpSpec, device: str) -> None:
    torch = _need("torch")
    _need_device(device, spec)
    inputs = _torch_inputs(spec, device=device)
    like = call(spec, inputs)
    base = torch.full_like(like, float("nan"))
    out = torch._neg_view(base)
    with pytest.raises(ValueError, match=r"^out is a lazily negated view"):
        call(spec, inputs, out=out)
    assert torch.isnan(base).all(), "a refused call wrote into out"
    # The out= custom op itself: PyTorch resolves the bit for custom ops, into a copy
    with pytest.raises(ValueError, match=r"^out is a lazily negated view"):
        getattr(torch.ops.scale_lib, f"{spec.name}_out")(out, *inputs, *attrs_of(spec))
    assert torch.isnan(base).all(), "a refused call wrote into out"
    # ... which still resolves the inputs' bits
    out = torch.full_like(like, float("nan"))
    negated = [torch._neg_view(-inputs[0]), *inputs[1:]]
    getattr(torch.ops.scale_lib, f"{spec.name}_out")(out, *negated, *attrs_of(spec))
    torch.testing.assert_close(out, like, rtol=0, atol=0)


@pytest.mark.parametrize("spec", ops())
def test_torch_meta_mixed_with_real_tensors(spec: OpSpec) -> None:
    torch = _need("torch")
    for i in range(len(spec.inputs) if len(spec.inputs) > 1 else 0):
        inputs = _torch_inputs(spec)
        inputs[i] = inputs[i].to("meta")
        with pytest.raises(ValueError, match="every array must be on one device"):
            call(spec, inputs)
    if has_out(spec):
        inputs = [t.to("meta") for t in _torch_inputs(spec)]
        real = call(spec, _torch_inputs(spec))
        out = torch.full_like(real, float("nan"))
        with pytest.raises(ValueError, match="every array must be on one device"):
            call(spec, inputs, out=out)
        assert torch.isnan(out).all()
        with pytest.raises(ValueError, match="every array must be on one device"):
            call(spec, _torch_inputs(spec), out=torch.empty_like(real, device="meta"))


def _hostile_variants(
    spec: OpSpec, torch: Any, device: str
) -> list[tuple[str, str, list[Any], tuple[Any, ...], Any]]:
    """(label, argument named, inputs, attrs, out) on ``device`` that the library refuses."""
    cases = []
    good = [t.to(device) for t in _torch_inputs(spec)]
    attrs = attrs_of(spec)
    x_name = spec.inputs[0].name
    cases.append(("x int32", x_name, [good[0].to(torch.int32), *good[1:]], attrs, None))
    for i, t in enumerate(good):
        name = spec.inputs[i].name
        wide = torch.cat([t, t], dim=-1)
        cases.append((f"{name} step", name, [*good[:i], wide[..., ::2], *good[i + 1 :]], attrs, None))
        if i:
            bigger = torch.cat([t, t[..., :1]], dim=-1)
            cases.append((f"{name} shape", name, [*good[:i], bigger, *good[i + 1 :]], attrs, None))
    if good[0].ndim >= 2:
        transposed = good[0].T.contiguous().T
        cases.append(("x transposed", x_name, [transposed, *good[1:]], attrs, None))
    for j, a in enumerate(spec.attrs):
        if a.minimum is not None:
            bad = (*attrs[:j], a.type(a.minimum - 1), *attrs[j + 1 :])
            cases.append((f"{a.name} below minimum", a.name, good, bad, None))
        if a.type is float:
            cases.append((f"{a.name} huge", a.name, good, (*attrs[:j], 2**1024, *attrs[j + 1 :]), None))
    if has_out(spec):
        like = call(spec, _torch_inputs(spec)).to(device)
        if like.ndim:
            wide = torch.cat([like, like], dim=-1)
            cases.append(("out step", "", good, attrs, wide[..., ::2]))
            cases.append(("out shape", "", good, attrs, torch.cat([like, like[..., :1]], dim=-1)))
        cases.append(("out dtype", "", good, attrs, like.to(torch.float16)))
    return cases


@pytest.mark.parametrize("spec", ops())
def test_torch_fake_implementation_checks_what_the_library_checks(spec: OpSpec) -> None:
    """Every case the library refuses on the CPU, the fake implementation refuses on meta
    tensors with the same exception type, naming the same argument."""
    torch = _need("torch")
    real_cases = _hostile_variants(spec, torch, "cpu")
    meta_cases = _hostile_variants(spec, torch, "meta")
    for (label, name, inputs, attrs, out), (_, _, meta_inputs, _, meta_out) in zip(
        real_cases, meta_cases, strict=True
    ):
        with pytest.raises((TypeError, ValueError)) as real:
            call(spec, inputs, attrs, out)
        # an output is named as the library names it (out, grad_x, rstd, ...): type only
        with pytest.raises(real.type, match=name or None) as fake:
            call(spec, meta_inputs, attrs, meta_out)
        assert name in str(real.value), (label, real.value, fake.value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", ops(has_out, device=None))
def test_out_writes_bump_torch_version_counter(spec: OpSpec, device: str) -> None:
    torch = _need("torch")
    _need_device(device, spec)
    inputs = _torch_inputs(spec, device=device)
    out = torch.empty_like(call(spec, inputs))
    before = out._version
    assert call(spec, inputs, out=out) is out
    assert out._version > before, "direct path"
    before = out._version
    getattr(torch.ops.scale_lib, f"{spec.name}_out")(out, *inputs, *attrs_of(spec))
    assert out._version > before, "custom op"
    before = out._version
    meta = [t.to("meta") for t in inputs]  # a tensor on another path (custom op) with a real out
    with pytest.raises(ValueError, match="every array must be on one device"):
        call(spec, meta, out=out)
    assert out._version == before, "a refused call counts as no write"


@pytest.mark.parametrize("spec", ops(has_out))
def test_torch_training_loop_out_into_saved_tensor_raises_like_torch(spec: OpSpec) -> None:
    """A training loop that writes with out= into a tensor autograd saved raises exactly where
    PyTorch's own in-place op does, and trains where PyTorch's does."""
    torch = _need("torch")
    inputs = _torch_inputs(spec)
    template = call(spec, inputs)

    def loop(write: Any) -> list[str]:
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.rand_like(template))
        buf = torch.rand_like(template)  # needs no grad; saved by mul for w's gradient
        outcomes = []
        for step in range(4):
            loss = (w * buf).sum()
            if step % 2:  # overwrite the saved tensor before backward: must raise
                write(buf)
            try:
                loss.backward()
                outcomes.append("ok")
            except RuntimeError as err:
                outcomes.append("raised" if "modified by an inplace operation" in str(err) else str(err))
            if not step % 2:
                write(buf)  # after backward: fine
            with torch.no_grad():
                w -= 0.1 * (w.grad if w.grad is not None else 0)
        return outcomes

    ours = loop(lambda buf: call(spec, inputs, out=buf))
    theirs = loop(lambda buf: buf.mul_(1.0))
    assert ours == theirs == ["ok", "raised", "ok", "raised"]


@pytest.mark.parametrize("spec", ops())
def test_numpy_masked_arrays_and_other_subclasses_are_refused(spec: OpSpec, tmp_path: Any) -> None:
    inputs = example(spec)
    expected = call(spec, inputs)
    for i, inp in enumerate(spec.inputs):
        masked = np.ma.masked_array(inputs[i], mask=inputs[i] > 1)
        for sub in (masked, inputs[i].view(np.recarray)):
            with pytest.raises(TypeError, match=f"^{inp.name} is a numpy"):
                call(spec, [*inputs[:i], sub, *inputs[i + 1 :]])
        # a memory map's values are its buffer: it works
        mapped = np.memmap(tmp_path / f"{inp.name}.bin", inputs[i].dtype, "w+", shape=inputs[i].shape)
        mapped[...] = inputs[i]
        np.testing.assert_array_equal(call(spec, [*inputs[:i], mapped, *inputs[i + 1 :]]), expected)


# ---------------------------------------------------------------------------------------------
# 3. Overlap
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ops(lambda s: has_out(s) and s.inputs[0].rows and s.output.rows))
def test_interleaved_disjoint_views_are_accepted_library_check(spec: OpSpec) -> None:
    inputs = example(spec)
    expected = call(spec, inputs)
    wide = np.zeros((X_SHAPE[0], 2 * X_SHAPE[1]), np.float32)
    wide[:, : X_SHAPE[1]] = inputs[0]
    x, out = wide[:, : X_SHAPE[1]], wide[:, X_SHAPE[1] :]
    call(spec, [x, *inputs[1:]], out=out)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_array_equal(x, inputs[0])


@pytest.mark.parametrize("spec", ops(has_out))
def test_out_partially_overlapping_any_input_is_refused_library_check(spec: OpSpec) -> None:
    inputs = example(spec)
    like = call(spec, inputs)
    for i, inp in enumerate(spec.inputs):
        if inputs[i].dtype != like.dtype or inputs[i].size == 0:
            continue
        # out starts at the input's last element: they share exactly one element.
        n_in, n_out = inputs[i].size, like.size
        buffer = np.full(n_in + n_out, 0.75, like.dtype)
        arr = buffer[:n_in].reshape(inputs[i].shape)
        arr[...] = inputs[i]
        out = buffer[n_in - 1 : n_in - 1 + n_out].reshape(like.shape)
        if out.ctypes.data == arr.ctypes.data and out.shape == arr.shape:
            continue
        before = buffer.copy()
        with pytest.raises(ValueError, match="overlap"):
            call(spec, [*inputs[:i], arr, *inputs[i + 1 :]], out=out)
        np.testing.assert_array_equal(buffer, before, err_msg=f"out overlapping {inp.name} was written")


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ops(has_out, device="cuda"))
def test_cuda_out_partially_overlapping_any_input_is_refused_library_check(spec: OpSpec) -> None:
    torch = _need("torch")
    _need_device("cuda")
    inputs = _torch_inputs(spec, device="cuda")
    like = call(spec, inputs)
    for i in range(len(spec.inputs)):
        if inputs[i].dtype != like.dtype or inputs[i].numel() == 0:
            continue
        # out starts at the input's last element: they share exactly one element.
        n_in, n_out = inputs[i].numel(), like.numel()
        buffer = torch.full((n_in + n_out,), 0.75, dtype=like.dtype, device="cuda")
        arr = buffer[:n_in].view(inputs[i].shape)
        arr.copy_(inputs[i])
        out = buffer[n_in - 1 : n_in - 1 + n_out].view(like.shape)
        before = buffer.clone()
        with pytest.raises(ValueError, match="overlap"):
            call(spec, [*inputs[:i], arr, *inputs[i + 1 :]], out=out)
        torch.testing.assert_close(buffer, before, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# 4. out= that must not be written
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("spec", ops(has_out))
def test_torch_out_requiring_grad_is_refused_on_every_path(spec: OpSpec, grad_mode: bool) -> None:
    torch = _need("torch")
    inputs = _torch_inputs(spec)
    like = call(spec, inputs)
    param = torch.nn.Parameter(torch.full_like(like, float("nan")))
    leaf = torch.full_like(like, float("nan")).requires_grad_()
    non_leaf = leaf * 1.0
    paths = {
        "direct": inputs,
        "custom op": [torch.nn.Parameter(inputs[0], requires_grad=False), *inputs[1:]],  # a subclass
        "autograd": [inputs[0].clone().requires_grad_(), *inputs[1:]],
    }
    with torch.set_grad_enabled(grad_mode):
        for out in (param, leaf, non_leaf):
            for path, args in paths.items():
                with pytest.raises(ValueError, match=r"^out requires grad"):
                    call(spec, args, out=out)
                assert torch.isnan(out.detach()).all(), path
            with pytest.raises(ValueError, match=r"^out requires grad"):
                getattr(torch.ops.scale_lib, f"{spec.name}_out")(out, *inputs, *attrs_of(spec))
    # writing into the detached tensor is the supported way, and autograd sees it
    version = param._version
    call(spec, inputs, out=param.detach())
    assert param._version > version
    torch.testing.assert_close(param.detach(), like)


def _out_paths(spec: OpSpec, inputs: list[Any], out: Any) -> dict[str, Any]:
    """The calls that write ``out``: the public one and the out= custom op itself."""
    torch = _need("torch")
    custom_op = getattr(torch.ops.scale_lib, f"{spec.name}_out")
    return {
        "public": lambda: call(spec, inputs, out=out),
        "custom op": lambda: custom_op(out, *inputs, *attrs_of(spec)),
    }


@pytest.mark.parametrize("spec", ops(has_out))
def test_torch_inference_tensor_out_is_written_only_in_inference_mode(spec: OpSpec) -> None:
    # PyTorch's rule for its own in-place ops: an inference tensor is written only inside
    # torch.inference_mode().
    torch = _need("torch")
    inputs = _torch_inputs(spec)
    like = call(spec, inputs)
    with torch.inference_mode():
        out = torch.full_like(like, float("nan"))
    paths = _out_paths(spec, inputs, out)
    for path, run in paths.items():
        with pytest.raises(ValueError, match=r"^out is an inference tensor"):
            run()
        assert torch.isnan(out).all(), path
    for path, run in paths.items():
        with torch.inference_mode():
            out.fill_(float("nan"))
            run()
            torch.testing.assert_close(out, like, rtol=0, atol=0, msg=path)


@pytest.mark.parametrize("spec", ops(has_out))
def test_torch_dual_tensor_out_is_refused(spec: OpSpec) -> None:
    # out= would write the primal and leave the tangent stale: a wrong derivative.
    torch = _need("torch")
    import torch.autograd.forward_ad as fwAD

    inputs = _torch_inputs(spec)
    like = call(spec, inputs)
    with fwAD.dual_level():
        out = fwAD.make_dual(torch.full_like(like, float("nan")), torch.ones_like(like))
        for run in _out_paths(spec, inputs, out).values():
            with pytest.raises(TypeError, match=r"^out is a forward-mode dual tensor"):
                run()
            assert torch.isnan(fwAD.unpack_dual(out).primal).all()


@pytest.mark.parametrize("spec", ops(has_out))
def test_torch_subclass_out_is_written_through_its_own_dispatch(spec: OpSpec) -> None:
    # A wrapper subclass has no memory of its own (its data pointer is null): its
    # __torch_dispatch__ writes each tensor it holds.
    torch = _need("torch")
    from torch.testing._internal.two_tensor import TwoTensor

    inputs = _torch_inputs(spec)
    like = call(spec, inputs)
    out = TwoTensor(torch.full_like(like, float("nan")), torch.full_like(like, float("nan")))
    assert call(spec, inputs, out=out) is out
    torch.testing.assert_close(out.a, like, rtol=0, atol=0)
    torch.testing.assert_close(out.b, like, rtol=0, atol=0)
    # autograd sees the write into the wrapper: a tensor saved for backward and written since
    weight = torch.ones_like(like).requires_grad_()
    loss = (out * weight).sum()
    call(spec, inputs, out=out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    numpy_inputs = [t.numpy() for t in inputs]
    with pytest.raises(TypeError, match=r"^out is a TwoTensor \(a torch\.Tensor subclass\)"):
        call(spec, numpy_inputs, out=out)


def _paddle_inputs(spec: OpSpec) -> list[Any]:
    paddle = _need("paddle")
    return [paddle.to_tensor(a) for a in example(spec)]


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("spec", ops(has_out))
def test_paddle_out_needing_grad_is_refused(spec: OpSpec, grad_mode: bool) -> None:
    paddle = _need("paddle")
    inputs = _paddle_inputs(spec)
    like = call(spec, inputs)
    out = paddle.full(like.shape, float("nan"), like.dtype)
    out.stop_gradient = False
    grad_inputs = [inputs[0].clone(), *inputs[1:]]
    grad_inputs[0].stop_gradient = False
    context = paddle.enable_grad() if grad_mode else paddle.no_grad()
    with context:
        for args in (inputs, grad_inputs):
            with pytest.raises(ValueError, match=r"^out needs a gradient"):
                call(spec, args, out=out)
            assert bool(paddle.isnan(out).all())


@pytest.mark.parametrize("spec", ops(has_out))
def test_paddle_out_writes_bump_inplace_version(spec: OpSpec) -> None:
    paddle = _need("paddle")
    inputs = _paddle_inputs(spec)
    out = paddle.empty_like(call(spec, inputs))
    before = out.inplace_version
    call(spec, inputs, out=out)
    assert out.inplace_version > before
    # a training step: the write into a tensor saved for backward is an error in backward
    w = paddle.rand(out.shape, out.dtype)
    w.stop_gradient = False
    loss = (w * out).sum()
    call(spec, inputs, out=out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# ---------------------------------------------------------------------------------------------
# 5. Valid input refused, or a foreign exception
# ---------------------------------------------------------------------------------------------
def _foreign(framework: str, a: np.ndarray) -> Any:
    if framework == "numpy":
        return a
    if framework == "jax":  # on the CPU, like x, also where JAX's default device is a GPU
        jax = _need("jax")
        return jax.device_put(a, jax.devices("cpu")[0])
    if framework == "torch":
        return _need("torch").from_numpy(a)
    if framework == "paddle":
        paddle = _need("paddle")
        return paddle.to_tensor(a, place=paddle.CPUPlace())
    raise AssertionError(framework)


@pytest.mark.parametrize("other", ["numpy", "jax", "paddle"])
@pytest.mark.parametrize("spec", ops(lambda s: len(s.inputs) > 1))
def test_torch_x_requiring_grad_with_inputs_of_other_frameworks(spec: OpSpec, other: str) -> None:
    torch = _need("torch")
    data = example(spec)
    x = torch.from_numpy(data[0]).requires_grad_()
    reference_x = torch.from_numpy(data[0]).requires_grad_()
    result = call(spec, [x, *(_foreign(other, a) for a in data[1:])])
    reference = call(spec, [reference_x, *(torch.from_numpy(a) for a in data[1:])])
    torch.testing.assert_close(result, reference)
    if spec.vjp is not None:
        result.sum().backward()
        reference.sum().backward()
        torch.testing.assert_close(x.grad, reference_x.grad)


def _needing_gradient(framework: str, a: np.ndarray) -> tuple[Any, str, Any]:
    """``a`` as an array of ``framework`` that needs a gradient; how a refusal words it; the
    context in which no gradient is wanted."""
    if framework == "torch":
        torch = _need("torch")
        return torch.from_numpy(a).requires_grad_(), r"requires grad .*as a torch\.Tensor", torch.no_grad()
    paddle = _need("paddle")
    return (
        paddle.to_tensor(a, stop_gradient=False),
        r"needs a gradient .*as a paddle\.Tensor",
        paddle.no_grad(),
    )


@pytest.mark.parametrize(
    ("first", "later"),
    [(f, later) for later in ("torch", "paddle") for f in ("numpy", "jax", "torch", "paddle") if f != later],
)
@pytest.mark.parametrize("spec", ops(lambda s: len(s.inputs) > 1))
def test_a_later_input_needing_a_gradient_is_refused_by_another_framework(
    spec: OpSpec, first: str, later: str
) -> None:
    # The first input's framework runs the call and reads the others as memory: a gradient
    # that a later input needs would be dropped without a word. (A JAX call takes only JAX
    # arrays: its refusal comes first, since detaching would not do.)
    data = example(spec)
    for i in range(1, len(data)):
        inputs = [_foreign(first, a) for a in data]
        inputs[i], wording, no_grad = _needing_gradient(later, data[i])
        if first == "jax":
            with pytest.raises(TypeError, match=r"must be a JAX array like"):
                call(spec, inputs)
            continue
        with pytest.raises(ValueError, match=rf"^{spec.inputs[i].name} {wording}"):
            call(spec, inputs)
        with no_grad:  # no gradient wanted: it is only memory
            result = call(spec, inputs)
        np.testing.assert_allclose(np.asarray(result), call(spec, data), rtol=1e-6)


@pytest.mark.parametrize("first", ["numpy", "paddle"])
@pytest.mark.parametrize("spec", ops(lambda s: len(s.inputs) > 1))
def test_a_later_torch_dual_tensor_is_refused_by_another_framework(spec: OpSpec, first: str) -> None:
    torch = _need("torch")
    import torch.autograd.forward_ad as fwAD

    data = example(spec)
    for i in range(1, len(data)):
        inputs = [_foreign(first, a) for a in data]
        with fwAD.dual_level():
            inputs[i] = fwAD.make_dual(
                torch.from_numpy(data[i]), torch.ones(data[i].shape, dtype=torch.float32)
            )
            with pytest.raises(
                ValueError, match=rf"^{spec.inputs[i].name} requires grad \(or has a forward-mode tangent\)"
            ):
                call(spec, inputs)


@pytest.mark.parametrize("first", ["numpy", "torch"])
@pytest.mark.parametrize("spec", ops(lambda s: len(s.inputs) > 1 and not s.output.allocated_by_library))
def test_a_later_jax_tracer_is_refused_by_another_framework(spec: OpSpec, first: str) -> None:
    jax = _need("jax")
    data = example(spec)
    for i in range(1, len(data)):
        name = spec.inputs[i].name

        def f(traced: Any, i: int = i) -> Any:
            inputs = [_foreign(first, a) for a in data]
            inputs[i] = traced
            return call(spec, inputs)

        with pytest.raises(
            TypeError, match=rf"^{name} is a traced JAX value .*pass the first input as a JAX array"
        ):
            jax.jit(f)(jax.numpy.asarray(data[i]))


@pytest.mark.parametrize("spec", ops())
def test_a_deleted_jax_array_is_a_value_error_naming_it(spec: OpSpec) -> None:
    jax = _need("jax")
    data = example(spec)
    for first in ("jax", "numpy"):
        for i in range(len(data)):
            if first == "numpy" and i == 0:
                continue
            inputs = [_foreign(first, a) for a in data]
            inputs[i] = _foreign("jax", data[i])
            inputs[i].delete()
            with pytest.raises(ValueError, match=rf"^{spec.inputs[i].name} is a deleted JAX array"):
                call(spec, inputs)
            assert jax is not None


@pytest.mark.parametrize("other", ["numpy", "jax", "torch"])
@pytest.mark.parametrize("spec", ops(lambda s: len(s.inputs) > 1))
def test_paddle_x_with_inputs_of_other_frameworks(spec: OpSpec, other: str) -> None:
    paddle = _need("paddle")
    data = example(spec)
    for needs_grad in (False, True) if spec.vjp is not None else (False,):
        x = paddle.to_tensor(data[0], stop_gradient=not needs_grad)
        reference = call(spec, [paddle.to_tensor(a) for a in data])
        result = call(spec, [x, *(_foreign(other, a) for a in data[1:])])
        np.testing.assert_allclose(result.numpy(), reference.numpy(), rtol=1e-6)


@pytest.mark.parametrize("spec", ops(lambda s: s.output.dtype is not None and "float" not in s.output.dtype))
def test_integer_results_of_paddle_tensors_needing_grad(spec: OpSpec) -> None:
    _need("paddle")
    inputs = _paddle_inputs(spec)
    expected = call(spec, inputs)
    inputs[0].stop_gradient = False
    np.testing.assert_array_equal(call(spec, inputs).numpy(), expected.numpy())


@pytest.mark.parametrize("spec", ops(lambda s: any(a.minimum is not None for a in s.attrs)))
def test_jax_attribute_bounds_are_checked_in_python(spec: OpSpec) -> None:
    jax = _need("jax")
    _need("jax_tvm_ffi")
    inputs = [jax.numpy.asarray(a) for a in example(spec)]
    attrs = attrs_of(spec)
    for j, a in enumerate(spec.attrs):
        if a.minimum is None:
            continue
        bad = (*attrs[:j], a.type(a.minimum - 1), *attrs[j + 1 :])
        with pytest.raises(ValueError, match=f"^{a.name} must be"):
            call(spec, inputs, bad)
        with pytest.raises(ValueError, match=f"^{a.name} must be"):
            jax.jit(lambda *t, bad=bad: call(spec, list(t), bad))(*inputs)


_CONCRETE = {float: "Python number", int: "Python int", bool: "Python bool"}


@pytest.mark.parametrize("spec", ops(lambda s: bool(s.attrs) and not s.output.allocated_by_library))
def test_jax_traced_attributes_are_refused_by_name_and_type(spec: OpSpec) -> None:
    # A scalar attribute is a compile-time constant of the XLA call: a traced one is refused
    # with what it must be, never a JAX error about concretisation.
    jax = _need("jax")
    _need("jax_tvm_ffi")
    inputs = [jax.numpy.asarray(a) for a in example(spec)]
    attrs = attrs_of(spec)
    for j, a in enumerate(spec.attrs):

        def f(value: Any, j: int = j) -> Any:
            return call(spec, inputs, (*attrs[:j], value, *attrs[j + 1 :]))

        with pytest.raises(
            TypeError, match=f"^{a.name} must be a concrete {_CONCRETE[a.type]}, not a traced"
        ):
            jax.jit(f)(attrs[j])


def _batchings(n: int) -> list[tuple[int | None, ...]]:
    """Every in_axes with at least one input batched."""
    import itertools

    return [axes for axes in itertools.product((0, None), repeat=n) if 0 in axes]


@pytest.mark.parametrize("spec", ops(has_out))
def test_jax_vmap_over_any_inputs_matches_a_loop(spec: OpSpec) -> None:
    jax = _need("jax")
    _need("jax_tvm_ffi")
    jnp = jax.numpy
    batch = 3
    per_example = [example(spec, seed=b) for b in range(batch)]
    with jax.default_device(jax_device_for(built_devices(spec))):
        stacked = [jnp.asarray(np.stack([ex[i] for ex in per_example])) for i in range(len(spec.inputs))]
    for axes in _batchings(len(spec.inputs)):
        args = [stacked[i] if ax == 0 else stacked[i][0] for i, ax in enumerate(axes)]
        got = jax.vmap(lambda *t: call(spec, list(t)), in_axes=axes)(*args)
        expected = [
            call(spec, [stacked[i][b] if ax == 0 else stacked[i][0] for i, ax in enumerate(axes)])
            for b in range(batch)
        ]
        np.testing.assert_allclose(np.asarray(got), np.stack([np.asarray(e) for e in expected]), rtol=1e-5)


@pytest.mark.parametrize("spec", ops(lambda s: s.output.allocated_by_library))
def test_jax_arrays_on_several_devices_work_eagerly(spec: OpSpec) -> None:
    _need("jax")
    _need("jax_tvm_ffi")
    child = _run_isolated(
        f"""
        import numpy as np, jax, jax.numpy as jnp, scale_lib
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from scale_lib._dispatch import _REGISTERED, Dispatcher
        assert len(jax.devices()) == 2
        op = Dispatcher(_REGISTERED[{spec.name!r}])
        data = np.arange(-3, 5, dtype=np.float32).reshape(2, 4)
        mesh = Mesh(np.array(jax.devices()), ("d",))
        expected = np.asarray(op.call((jnp.asarray(data),)))
        for spec in (P("d"), P()):  # sharded, replicated
            x = jax.device_put(data, NamedSharding(mesh, spec))
            np.testing.assert_array_equal(np.asarray(op.call((x,))), expected)
        print("ok")
        """,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"},
    )
    assert child.returncode == 0 and child.stdout.split()[-1:] == ["ok"], child.stdout + child.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# 6. Wrong exception type or message
# ---------------------------------------------------------------------------------------------
HUGE = [2**1024, -(2**1024), fractions.Fraction(10**400, 3), 10**400]


@pytest.mark.parametrize("spec", ops(lambda s: any(a.type is float for a in s.attrs)))
def test_scalars_too_large_for_a_double(spec: OpSpec) -> None:
    inputs = example(spec)
    attrs = attrs_of(spec)
    huge = [*HUGE, np.longdouble("1e400")] if np.finfo(np.longdouble).max > 1e400 else HUGE
    for j, a in enumerate(spec.attrs):
        if a.type is not float:
            continue
        for value in huge:
            with pytest.raises(ValueError, match=f"^{a.name} is too large for a float64"):
                call(spec, inputs, (*attrs[:j], value, *attrs[j + 1 :]))


def _numpy_unexportable(a: np.ndarray) -> list[tuple[str, np.ndarray]]:
    structured = np.zeros(a.shape, [("pad", "i1"), ("v", a.dtype)])
    structured["v"] = a
    cases = [("byte order", a.astype(a.dtype.newbyteorder()))]
    if a.ndim:  # element strides that are not a whole number of elements
        cases.append(("field view", structured["v"]))
    if np.dtype(np.longdouble).itemsize > 8:
        cases.append(("longdouble", a.astype(np.longdouble)))
    return cases


@pytest.mark.parametrize("spec", ops())
def test_numpy_arrays_numpy_cannot_export(spec: OpSpec) -> None:
    inputs = example(spec)
    for i, inp in enumerate(spec.inputs):
        for _label, bad in _numpy_unexportable(inputs[i]):
            with pytest.raises((TypeError, ValueError), match=f"^{inp.name} "):
                call(spec, [*inputs[:i], bad, *inputs[i + 1 :]])
    if has_out(spec):
        like = call(spec, inputs)
        for _label, bad in _numpy_unexportable(like):
            with pytest.raises((TypeError, ValueError), match=r"^out "):
                call(spec, inputs, out=bad)


def _unsupported_numpy_dtypes() -> list[Any]:
    dtypes: list[Any] = [object, "U3", "S3", "M8[s]", "m8[s]", [("a", "f4"), ("b", "f4")], np.complex64, "V4"]
    ml_dtypes = _module("ml_dtypes")
    if ml_dtypes is not None:
        dtypes += [ml_dtypes.float8_e4m3fn, ml_dtypes.int4]
    return dtypes


@pytest.mark.parametrize("dtype", _unsupported_numpy_dtypes(), ids=str)
@pytest.mark.parametrize("spec", ops())
def test_numpy_x_of_unsupported_dtype_names_x(spec: OpSpec, dtype: Any) -> None:
    inputs = example(spec)
    x = np.zeros(X_SHAPE, dtype)
    # the first input is named (for ops whose library checks another input's dtype first, in
    # terms of both); never out, which the caller did not pass
    with pytest.raises(TypeError, match=f"^{spec.inputs[0].name} (has unsupported|and )"):
        call(spec, [x, *inputs[1:]])


def _odd_torch_tensors(torch: Any, t: Any) -> list[tuple[str, Any]]:
    dense = t.float()
    cases = [
        ("sparse_coo", dense.to_sparse()),
        ("sparse_csr", dense.to_sparse_csr() if dense.ndim == 2 else dense.to_sparse()),
        ("quantized", torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8)),
        ("nested", torch.nested.nested_tensor([dense, dense])),
    ]
    if torch.backends.mkldnn.is_available():
        cases.append(("mkldnn", dense.to_mkldnn()))
    return cases


@pytest.mark.filterwarnings("ignore::UserWarning")  # sparse CSR and nested tensors are in beta
@pytest.mark.parametrize("spec", ops())
def test_torch_sparse_mkldnn_quantized_nested_are_type_errors(spec: OpSpec) -> None:
    torch = _need("torch")
    inputs = _torch_inputs(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, inp in enumerate(spec.inputs):
            for _label, odd in _odd_torch_tensors(torch, inputs[i]):
                with pytest.raises(TypeError, match=f"^{inp.name} "):
                    call(spec, [*inputs[:i], odd, *inputs[i + 1 :]])
                if i:  # the custom-op path: x requires grad
                    x = inputs[0].clone().requires_grad_()
                    with pytest.raises(TypeError, match=f"^{inp.name} "):
                        call(spec, [x, *inputs[1:i], odd, *inputs[i + 1 :]])
        if has_out(spec):
            like = call(spec, inputs)
            if like.ndim:
                for _label, odd in _odd_torch_tensors(torch, like):
                    with pytest.raises(TypeError, match=r"^out "):
                        call(spec, inputs, out=odd)
