"""CUDA errors surface as Python exceptions, never aborts. A deliberately broken kernel library,
built at test time with the same tvm_ffi_utils.h as scale_lib, launches an impossible
configuration and writes through an illegal address."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from backends import INCLUDE, Backend, skip_without_nvcc

pytestmark = pytest.mark.gpu

BROKEN_SOURCE = r"""
#include "tvm_ffi_utils.h"

__global__ void WriteOne(float* p) { *p = 1.0f; }

// Launch with more threads per block than any GPU allows: the launch itself fails.
void InvalidLaunch(tvm::ffi::TensorView x) {
  tvm::ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = scale_lib::GetCudaStream(x.device());
  WriteOne<<<1, 4096, 0, stream>>>(scale_lib::DataPtr<float>(x));
  CHECK_CUDA_LAUNCH();
}

// Write through a pointer that is not device memory: the launch succeeds, the kernel faults,
// and the fault surfaces at the next synchronisation.
void IllegalAddress(tvm::ffi::TensorView x) {
  tvm::ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = scale_lib::GetCudaStream(x.device());
  WriteOne<<<1, 1, 0, stream>>>(reinterpret_cast<float*>(0x10));
  CHECK_CUDA_LAUNCH();
  TVM_FFI_CHECK_CUDA_ERROR(cudaStreamSynchronize(stream));
}
"""

LOAD_BROKEN = f"""
import tvm_ffi.cpp
broken = tvm_ffi.cpp.load_inline(
    "scale_lib_broken", cuda_sources={BROKEN_SOURCE!r},
    functions=["InvalidLaunch", "IllegalAddress"], extra_include_paths=[{str(INCLUDE)!r}],
    extra_cuda_cflags=["-DSCALE_LIB_WITH_CUDA=1"])
"""


@pytest.fixture(scope="module")
def torch_cuda():
    Backend("torch", "cuda").skip_if_unavailable()
    skip_without_nvcc("the broken kernel library")
    import torch

    return torch


def test_invalid_launch_is_a_runtime_error_and_the_context_survives(torch_cuda) -> None:
    torch = torch_cuda
    namespace: dict = {}
    exec(LOAD_BROKEN, namespace)
    x = torch.zeros(4, device="cuda")
    # CUDA reports an impossible block size as an invalid configuration or value (by version).
    with pytest.raises(RuntimeError, match=r"CUDA Runtime Error: cudaErrorInvalid(Configuration|Value)"):
        namespace["broken"].InvalidLaunch(x)
    import scale_lib  # the GPU is still usable

    torch.testing.assert_close(
        scale_lib.scale(torch.ones(4, device="cuda"), 2.0), torch.full((4,), 2.0, device="cuda")
    )


def test_illegal_address_is_a_runtime_error_not_an_abort(torch_cuda) -> None:
    # An illegal address poisons the CUDA context for the rest of the process: run it in a child.
    code = LOAD_BROKEN + textwrap.dedent(
        """
        import torch
        try:
            broken.IllegalAddress(torch.zeros(4, device="cuda"))
        except RuntimeError as err:
            print("RuntimeError:", err)
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=600
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert "RuntimeError: CUDA Runtime Error: cudaErrorIllegalAddress" in child.stdout, child.stdout
