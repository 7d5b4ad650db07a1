// SPDX-License-Identifier: Apache-2.0
// CUDA implementation of scale: out = x * factor. The math is ScaleFn (kernels/scale/scale.h), run
// by the shared elementwise launcher (kernels/elementwise.cuh); the CPU twin is
// kernels/scale/scale_cpu.cc.
#include <cstdint>

#include "elementwise.cuh"
#include "scale.h"

namespace scale_lib {

// [function.begin]
void ScaleCUDA(ffi::TensorView out, ffi::TensorView x, double factor) {
  CheckScaleArgs(out, x);                              // 1. validate
  const int64_t n = x.numel();
  if (n == 0) return;
  ffi::CUDADeviceGuard guard(x.device().device_id);    // 2. device guard
  cudaStream_t stream = GetCudaStream(x.device());     // 3. stream
  DispatchFloating(x.dtype(), "x", [&](auto tag) {     // 4. dtype dispatch + launch
    using T = typename decltype(tag)::type;
    using C = gpu::Compute<T>;
    gpu::LaunchElementwise<T>(ScaleFn<C>{static_cast<C>(factor)}, n, stream, DataPtr<T>(out),
                              DataPtr<const T>(x));
  });                                                  // 5. check: inside LaunchElementwise
}
// [function.end]

}  // namespace scale_lib
