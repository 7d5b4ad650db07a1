// SPDX-License-Identifier: Apache-2.0
// CUDA axpby through TVM-FFI's CUBIN launcher: the kernels are not compiled into this file but
// embedded as a fatbin (see kernels/axpby/cubin/axpby_kernels.cu and CMakeLists.txt), looked up by
// name and launched on the caller's stream.
#include <tvm/ffi/extra/cuda/cubin_launcher.h>

#include <cstdint>
#include <string>

#include "axpby.h"
#include "cuda_float.cuh"

// [cubin_launch.begin]
// Declares the embedded fatbin; CMake assembles its bytes into the library as this symbol.
TVM_FFI_EMBED_CUBIN(axpby_kernels);

namespace scale_lib {
namespace {

// Looked up once per process (the fatbin is loaded on first use, so CPU-only callers never
// touch the driver); CubinKernel handles are valid on every device.
template <typename T>
tvm::ffi::CubinKernel& AxpbyKernel(bool packed) {
  static tvm::ffi::CubinKernel packed_kernel = TVM_FFI_EMBED_CUBIN_GET_KERNEL(
      axpby_kernels, (std::string("axpby_packed_") + DTypeName<T>()).c_str());
  static tvm::ffi::CubinKernel any_kernel = TVM_FFI_EMBED_CUBIN_GET_KERNEL(
      axpby_kernels, (std::string("axpby_any_alignment_") + DTypeName<T>()).c_str());
  return packed ? packed_kernel : any_kernel;
}

constexpr unsigned int kThreads = 256;

}  // namespace

void AxpbyCUDA(ffi::TensorView out, ffi::TensorView x, ffi::TensorView y, double a, double b) {
  CheckAxpbyArgs(out, x, y);                        // 1. validate
  int64_t n = x.numel();
  if (n == 0) return;
  ffi::CUDADeviceGuard guard(x.device().device_id);      // 2. device guard
  cudaStream_t stream = GetCudaStream(x.device());  // 3. stream
  MakeContextCurrent(x.device().device_id);  // the CUBIN launcher launches in the current context
  DispatchFloating(x.dtype(), "x", [&](auto tag) {  // 4. dtype dispatch + launch
    using T = typename decltype(tag)::type;
    using Compute = typename gpu::FloatMath<T>::Compute;
    void* out_ptr = DataPtr<T>(out);
    void* x_ptr = DataPtr<T>(x);
    void* y_ptr = DataPtr<T>(y);
    Compute ac = static_cast<Compute>(a);
    Compute bc = static_cast<Compute>(b);
    const bool packed =
        gpu::IsAligned(out_ptr, 16) && gpu::IsAligned(x_ptr, 16) && gpu::IsAligned(y_ptr, 16);
    const int64_t items = packed ? n / gpu::kPackWidth<T> : n;
    void* args[] = {&out_ptr, &x_ptr, &y_ptr, &ac, &bc, &n};
    const tvm::ffi::dim3 grid(gpu::GridSize(std::max<int64_t>(items, 1), kThreads));
    // 5. check: the launch returns the runtime/driver error, if any
    TVM_FFI_CHECK_CUBIN_LAUNCHER_CUDA_ERROR(
        AxpbyKernel<T>(packed).Launch(args, grid, tvm::ffi::dim3(kThreads), stream));
  });
}
// [cubin_launch.end]

}  // namespace scale_lib
