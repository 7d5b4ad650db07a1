"""Kernels run on the caller's stream. Each test queues a long GPU spin and then the input's
final values on a non-default stream; a kernel launched on any other stream would read the input
before it is written. And each op's kernels wait for the kernel before them on the stream, though
they may be scheduled before it has finished (gpu::Launch, kernels/cuda_float.cuh)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from backends import INCLUDE, Backend, capture_cuda_graph, skip_without_nvcc
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


# The kernel before the op: it lets the next kernel on the stream be scheduled at once (on GPUs
# that take programmatic dependent launches), spins for a few milliseconds, then copies the
# input in. A kernel scheduled early that read its input without waiting would read NaNs.
LATE_COPY_SOURCE = r"""
#include "tvm_ffi_utils.h"

__global__ void LateCopyKernel(float* dst, const float* src, int64_t n, long long cycles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

void LateCopy(tvm::ffi::TensorView dst, tvm::ffi::TensorView src, int64_t cycles) {
  tvm::ffi::CUDADeviceGuard guard(dst.device().device_id);
  cudaStream_t stream = scale_lib::GetCudaStream(dst.device());
  LateCopyKernel<<<1, 256, 0, stream>>>(scale_lib::DataPtr<float>(dst),
                                        scale_lib::DataPtr<const float>(src), dst.numel(), cycles);
  CHECK_CUDA_LAUNCH();
}
"""
LATE_CYCLES = 10_000_000  # a few milliseconds
# Shapes of x that reach each kernel the public ops launch: short rows; rows longer than one
# block holds (two-pass reductions, the tile scan); many elements (the elementwise launcher's
# grid-stride kernel).
WAIT_SHAPES = [(6, 8), (3, 70_000), (2, 1 << 21)]


@pytest.fixture(scope="module")
def late_copy():
    Backend("torch", "cuda").skip_if_unavailable()
    skip_without_nvcc("the test's copy kernel")
    import tvm_ffi.cpp

    module = tvm_ffi.cpp.load_inline(
        "scale_lib_late_copy",
        cuda_sources=LATE_COPY_SOURCE,
        functions=["LateCopy"],
        extra_include_paths=[str(INCLUDE)],
        extra_cuda_cflags=["-DSCALE_LIB_WITH_CUDA=1"],
    )
    return module.LateCopy


def _late_input_then_call(late_copy, case, late: int, inputs: list, sources: list, out) -> object:
    for i, (t, source) in enumerate(zip(inputs, sources, strict=True)):
        if i != late:
            t.copy_(source)
    late_copy(inputs[late], sources[late], LATE_CYCLES)
    return case.call(*inputs, **({"out": out} if out is not None else {}))


@pytest.mark.parametrize("shape", WAIT_SHAPES, ids=str)
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
def test_every_op_waits_for_the_kernel_before_it(torch_cuda, late_copy, graph: bool, shape) -> None:
    # Each input in turn is written by the late copy, the op's call right after it on the
    # stream: eager, and captured in a CUDA graph then replayed over inputs reset to NaN.
    torch = torch_cuda
    for case in [c for c in declared_cases() if "cuda" in c.devices]:
        if graph and not case.jittable:
            continue  # a result whose size depends on the data cannot be captured
        data = {n: a.astype(np.float32) for n, a in case.numpy_inputs(11, shape).items()}
        sources = [torch.from_numpy(a).cuda() for a in data.values()]
        for late in range(len(sources)):
            inputs = [torch.full_like(t, float("nan")) for t in sources]
            out = torch.empty(case.output_shape(shape), device="cuda") if case.has_out else None
            step = functools.partial(_late_input_then_call, late_copy, case, late, inputs, sources, out)
            torch.cuda.synchronize()
            if graph:
                captured, result = capture_cuda_graph(step)
                for t in inputs:
                    t.fill_(float("nan"))
                captured.replay()
            else:
                step()  # first launches load the kernels, which can take longer than the spin
                torch.cuda.synchronize()
                for t in inputs:
                    t.fill_(float("nan"))
                result = step()
            got = result.cpu().numpy()  # type: ignore[attr-defined]
            case.assert_matches(got, [a.astype(np.float64) for a in data.values()], 1e-4, 1e-5)
