// SPDX-License-Identifier: Apache-2.0
// Kernels compiled at run time: RuntimeKernel() returns the CUBIN launcher's handle of a kernel
// that NVRTC compiled for this GPU and the given specialisation values (python/scale_lib/_nvrtc.py
// compiles and caches the CUBIN; kernels/runtime_kernel.cu loads it once per process), or
// nullptr where runtime compilation is unavailable: the caller then runs its ahead-of-time kernel.
#ifndef SCALE_LIB_KERNELS_RUNTIME_KERNEL_H_
#define SCALE_LIB_KERNELS_RUNTIME_KERNEL_H_

#if defined(SCALE_LIB_WITH_CUDA)
#include <cuda_runtime.h>
#include <tvm/ffi/extra/cuda/cubin_launcher.h>

#include <string>
#include <vector>

namespace scale_lib {

// [runtime_kernel_api.begin]
// The kernel `kernel` of python/scale_lib/nvrtc_kernels/<op>.cu, compiled with -D<define> for
// each "NAME=VALUE" of `defines`, for the architecture of `device_id`. The first call of a
// process for these values compiles (or reads the disk cache) and loads the CUBIN; later calls
// find it in memory. nullptr when there is no NVRTC (or NVRTC does not know the GPU). A first
// call that would load a kernel while `stream` is being captured into a CUDA graph raises a
// RuntimeError (loading a module is not allowed during capture): call the op once before
// capturing. Without NVRTC such a call returns nullptr and the capture goes on. A kernel that does
// not compile raises NvrtcError (a RuntimeError) with NVRTC's log.
tvm::ffi::CubinKernel* RuntimeKernel(const char* op, const char* kernel,
                                     const std::vector<std::string>& defines, int device_id,
                                     cudaStream_t stream);
// [runtime_kernel_api.end]

}  // namespace scale_lib

#endif  // SCALE_LIB_WITH_CUDA
#endif  // SCALE_LIB_KERNELS_RUNTIME_KERNEL_H_
