"""Kernels run on the caller's stream. Each test queues a long GPU spin and then the input's
final values on a non-default stream; a kernel launched on any other stream would read the input
before it is written. And each op's kernels wait for the kernel before them on the stream, which
may be scheduled early (gpu::Launch, kernels/cuda_float.cuh)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from backends import Backend, capture_cuda_graph
from cases import declared_cases

import scale_lib

pytestmark = pytest.mark.gpu

SPIN_CYCLES = 100_000_000  # ~50 ms of torch.cuda._sleep on an H100
N = 1 << 20


@pytest.fixture
def torch_cuda():
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    return torch


def _queue_late_fill(torch, stream, tensor, value: float) -> None:
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SPIN_CYCLES)
        tensor.fill_(value)


def test_torch_current_stream(torch_cuda) -> None:
    torch = torch_cuda
    x = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    _queue_late_fill(torch, s, x, 3.0)
    with torch.cuda.stream(s):
        y = scale_lib.scale(x, 2.0)
    s.synchronize()
    assert bool((y == 6.0).all())


def _late_input_as_ffi_tensors(torch):
    """x (zeros now, 3.0 once a spin on a fresh stream s ends) and an output of -1s, both also as
    tvm_ffi.Tensors: those carry no framework, so TVM-FFI publishes no stream for them."""
    import tvm_ffi

    x = torch.zeros(N, device="cuda")
    out = torch.full((N,), -1.0, device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    _queue_late_fill(torch, s, x, 3.0)
    return x, out, s, tvm_ffi.from_dlpack(x), tvm_ffi.from_dlpack(out)


def test_the_ordering_test_can_fail(torch_cuda) -> None:
    # Control: the same sequence launched on the legacy default stream does race. If this ever
    # fails, the stream tests above prove nothing on this system.
    import tvm_ffi

    x, out, _, xt, ot = _late_input_as_ffi_tensors(torch_cuda)
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", x.device.index), 0):
        scale_lib.lib.scale(ot, xt, 2.0)
    torch_cuda.cuda.synchronize()
    assert not bool((out == 6.0).all())


def test_tvm_ffi_use_raw_stream(torch_cuda) -> None:
    import tvm_ffi

    x, out, s, xt, ot = _late_input_as_ffi_tensors(torch_cuda)
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", x.device.index), s.cuda_stream):
        scale_lib.lib.scale(ot, xt, 2.0)
    s.synchronize()
    assert bool((out == 6.0).all())


def test_tvm_ffi_use_torch_stream(torch_cuda) -> None:
    import tvm_ffi

    _, out, s, xt, ot = _late_input_as_ffi_tensors(torch_cuda)
    with tvm_ffi.use_torch_stream(torch_cuda.cuda.stream(s)):
        scale_lib.lib.scale(ot, xt, 2.0)
    s.synchronize()
    assert bool((out == 6.0).all())


def test_cupy_current_stream(torch_cuda) -> None:
    Backend("cupy", "cuda").skip_if_unavailable()
    import cupy

    torch = torch_cuda
    x = cupy.zeros(N, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    # Queue the spin on CuPy's stream through torch, then the fill through CuPy.
    _queue_late_fill(torch, torch.cuda.ExternalStream(s.ptr), torch.from_dlpack(x), 0.0)
    with s:
        x.fill(3.0)
        y = scale_lib.scale(x, 2.0)
    s.synchronize()
    assert bool((y == 6.0).all())


def _write_inputs_then_call(case, sources: dict, buffers: dict, inputs: list, out) -> object:
    for name, source in sources.items():
        scale_lib.scale(source, 1.0, out=buffers[name])
    return case.call(*inputs, **({"out": out} if out is not None else {}))


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
def test_every_op_waits_for_the_kernel_before_it(torch_cuda, graph: bool) -> None:
    # Each input is the last elements of a large buffer that the library's own scale writes just
    # before the op, on the same stream. Its last blocks write them, and on GPUs that take
    # programmatic dependent launches the op's kernel may be scheduled before they finish: it
    # must wait before it reads (a kernel that did not would read the NaNs put there first).
    torch = torch_cuda
    cases = [c for c in declared_cases() if "cuda" in c.devices]
    big = 1 << 24
    for case in cases:
        data = {n: a.astype(np.float32) for n, a in case.numpy_inputs(11).items()}
        sources = {n: torch.full((big,), float("nan"), device="cuda") for n in data}
        buffers = {n: torch.full((big,), float("nan"), device="cuda") for n in data}
        for n, a in data.items():
            sources[n][big - a.size :] = torch.from_numpy(a.ravel()).cuda()
        inputs = [buffers[n][big - a.size :].view(a.shape) for n, a in data.items()]
        out = torch.empty(case.output_shape(), device="cuda") if case.has_out else None

        step = functools.partial(_write_inputs_then_call, case, sources, buffers, inputs, out)
        torch.cuda.synchronize()
        if graph and case.has_out:
            captured, result = capture_cuda_graph(step)
            for b in buffers.values():
                b.fill_(float("nan"))
            captured.replay()
        elif graph:
            continue  # a result whose size depends on the data cannot be captured
        else:
            result = step()
        got = result.cpu().numpy()  # type: ignore[attr-defined]
        case.assert_matches(got, [a.astype(np.float64) for a in data.values()], 1e-4, 1e-5)
